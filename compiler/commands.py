"""Subcommands beyond the front end (catalog, plan), registered on the CLI's parser."""

from __future__ import annotations

import argparse
from pathlib import Path


def register_more(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("catalog", help="list the GPUs, their MIG profiles and the model architectures")
    c.add_argument("gpu", nargs="?", help="show one GPU's MIG profiles")
    c.add_argument("--models", action="store_true", help="list model architectures instead")
    c.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    c.set_defaults(handler=_cmd_catalog)

    p = sub.add_parser("plan", help="show what the spec deploys: capacity per host, GPU and MIG instance")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    p.add_argument("--gpu-profiles", type=Path, metavar="FILE",
                   help="captured `nvidia-smi mig -lgip` output to validate MIG profiles against")
    p.set_defaults(handler=_cmd_plan)


def _cmd_catalog(args: argparse.Namespace) -> int:
    from compiler.catalog import load_gpu_catalog, load_model_catalog
    from compiler.catalog.listing import render_catalog, render_models
    from compiler.cli import UsageError, emit

    if args.models:
        emit(render_models(load_model_catalog(), args.format), None)
        return 0
    catalog = load_gpu_catalog()
    if args.gpu is not None and catalog.get(args.gpu) is None:
        hint = ", ".join(catalog.suggest(args.gpu)) or ", ".join(catalog.names)
        raise UsageError(f"unknown GPU {args.gpu!r}; did you mean: {hint}")
    emit(render_catalog(catalog, args.format, gpu=args.gpu), None)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from compiler.capacity.render import render_capacity
    from compiler.cli import UsageError, emit
    from compiler.diagnostics.render import diagnostic_dict, render_text, summary_line
    from compiler.pipeline import Options, validate_path
    from compiler.planning import capacity_figures

    if not args.spec.is_file():
        raise UsageError(f"no such file: {args.spec}")
    result = validate_path(args.spec, Options(gpu_profiles=args.gpu_profiles))
    figures = capacity_figures(result) if result.resolved is not None else []
    if args.format == "json":
        emit(json.dumps({"diagnostics": [diagnostic_dict(d) for d in result.diagnostics],
                         "capacity": json.loads(render_capacity(figures, "json"))}, indent=2, sort_keys=True), None)
    else:
        parts = []
        if result.diagnostics:
            sources = {result.file: result.document.text} if result.document else {}
            parts.append(render_text(result.diagnostics, sources))
        if figures:
            parts.append(render_capacity(figures, args.format))
        parts.append(f"{result.file}: {summary_line(result.diagnostics)}")
        emit("\n\n".join(parts), None)
    return 1 if not result.ok else 0
