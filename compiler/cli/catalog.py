"""`kiln catalog`: the GPU and model facts Kiln checks against."""

from __future__ import annotations

import argparse
import sys

from .errors import UsageError
from .exitcodes import ExitCode
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("catalog", help="list the GPUs, their MIG profiles, the model architectures and the "
                                       "quantization formats")
    c.add_argument("gpu", nargs="?", help="show one GPU's MIG profiles")
    what = c.add_mutually_exclusive_group()
    what.add_argument("--models", action="store_true", help="list model architectures instead")
    what.add_argument("--formats", action="store_true",
                      help="list the quantization recipes: where each target and MoE backend runs them")
    c.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    c.set_defaults(handler=cmd_catalog)


def cmd_catalog(args: argparse.Namespace) -> ExitCode:
    from compiler.catalog import load_gpu_catalog, load_model_catalog
    from compiler.catalog.listing import render_catalog, render_formats, render_models

    if args.formats:
        from compiler.catalog.formats import load_format_table

        emit(render_formats(load_format_table(), args.format), None)
        return ExitCode.OK
    if args.models:
        emit(render_models(load_model_catalog(), args.format), None)
        return ExitCode.OK
    catalog = load_gpu_catalog()
    if args.gpu is not None and catalog.get(args.gpu) is None:
        hint = ", ".join(catalog.suggest(args.gpu)) or ", ".join(catalog.names)
        raise UsageError(f"unknown GPU {args.gpu!r}; did you mean: {hint}")
    candidates = catalog.ambiguous(args.gpu) if args.gpu is not None else ()
    if candidates:  # a family name: show the part it resolves to, and say a spec must choose (K909)
        print(f"kiln: note: {args.gpu!r} names {len(candidates)} parts ({', '.join(candidates)}); showing "
              f"{catalog.resolve_name(args.gpu)}. A spec must name one (K909).", file=sys.stderr)
    emit(render_catalog(catalog, args.format, gpu=args.gpu), None)
    return ExitCode.OK
