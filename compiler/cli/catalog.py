"""`kiln catalog`: the GPU and model facts Kiln checks against."""

from __future__ import annotations

import argparse

from .errors import UsageError
from .exitcodes import ExitCode
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("catalog", help="list the GPUs, their MIG profiles and the model architectures")
    c.add_argument("gpu", nargs="?", help="show one GPU's MIG profiles")
    c.add_argument("--models", action="store_true", help="list model architectures instead")
    c.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    c.set_defaults(handler=cmd_catalog)


def cmd_catalog(args: argparse.Namespace) -> ExitCode:
    from compiler.catalog import load_gpu_catalog, load_model_catalog
    from compiler.catalog.listing import render_catalog, render_models

    if args.models:
        emit(render_models(load_model_catalog(), args.format), None)
        return ExitCode.OK
    catalog = load_gpu_catalog()
    if args.gpu is not None and catalog.get(args.gpu) is None:
        hint = ", ".join(catalog.suggest(args.gpu)) or ", ".join(catalog.names)
        raise UsageError(f"unknown GPU {args.gpu!r}; did you mean: {hint}")
    emit(render_catalog(catalog, args.format, gpu=args.gpu), None)
    return ExitCode.OK
