"""`kiln lock`: write (or check) the lock file beside a spec, the MIG placements later layouts keep."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import require_file
from .exitcodes import ExitCode
from .output import print_diagnostics


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", help="write the lock file beside the spec: the MIG placements that later "
                                    "layouts keep where they can")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when the lock file is missing or does not match (for CI)")
    p.set_defaults(handler=cmd_lock)


def cmd_lock(args: argparse.Namespace) -> ExitCode:
    from compiler.ir.lockfile import lock_entries, lock_path, render_lock
    from compiler.pipeline import validate_path

    require_file(args.spec)
    result = validate_path(args.spec)
    if not result.ok:
        print_diagnostics([result], stream=sys.stderr)
        return ExitCode.ERRORS
    path = lock_path(args.spec)
    data = render_lock(result.spec.name, {h: dict(g) for h, g in lock_entries(result.resolved).items()})
    current = path.read_bytes() if path.is_file() else None
    if current == data:
        print(f"{path} is up to date")
        return ExitCode.OK
    if args.check:
        print(f"{path} is {'missing' if current is None else 'stale'}; run `kiln lock {args.spec}` and commit it",
              file=sys.stderr)
        return ExitCode.ERRORS
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    print(f"wrote {path}")
    return ExitCode.OK
