"""`kiln render`: the Kubernetes tree of a spec, for review, without building (compiler/review.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import add_gpu_profiles, gpu_profiles, require_file
from .errors import UsageError
from .exitcodes import ExitCode
from .output import print_diagnostics


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="write a spec's Kubernetes tree for review, images as placeholders "
                                      "(no weights, Docker or store; not a release)")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--to", type=Path, required=True, metavar="DIR",
                   help="a new (or empty) directory for the Kustomize tree")
    add_gpu_profiles(p)
    p.set_defaults(handler=cmd_render)


def cmd_render(args: argparse.Namespace) -> ExitCode:
    from compiler.pipeline import Options
    from compiler.review import PLACEHOLDER_REGISTRY, RenderError, render_spec

    require_file(args.spec)
    try:
        result, out = render_spec(args.spec, args.to, Options(gpu_profiles=gpu_profiles(args)))
    except RenderError as e:
        raise UsageError(f"{args.spec}: {e}") from None
    except OSError as e:
        raise UsageError(f"--to {str(args.to)[:200]}: {e.strerror or e}") from None
    if out is None:
        print_diagnostics([result], stream=sys.stderr)
        return ExitCode.ERRORS
    if result.diagnostics:
        print_diagnostics([result], stream=sys.stderr)
    print(f"wrote the Kubernetes tree of {args.spec} to {out} for review: `kubectl kustomize {out}` builds it")
    print(f"not deployable: its images are placeholders ({PLACEHOLDER_REGISTRY}/...), and nothing went to the store; "
          "a release's tree comes from `kiln build` and `kiln export`")
    from .plan import kubernetes_version_note

    note = kubernetes_version_note(result.resolved)
    if note:
        print(note)
    return ExitCode.OK
