"""`kiln lock`: write (or check) the lock file beside a spec, the MIG placements later layouts keep."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .common import require_file
from .exitcodes import ExitCode
from .output import print_diagnostics


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", help="write the lock file beside the spec: the MIG placements, workload names and "
                                    "Dynamo worker surges that later layouts keep where they can")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when the lock file is missing or does not match (for CI)")
    p.set_defaults(handler=cmd_lock)


def cmd_lock(args: argparse.Namespace) -> ExitCode:
    from compiler.diagnostics.render import shown
    from compiler.ir.inputs import read_regular, replace_file
    from compiler.ir.lockfile import MAX_LOCK_BYTES, lock_entries, lock_path, render_lock
    from compiler.ir.pools import lock_workloads
    from compiler.ir.resolve import LockFileInvalid
    from compiler.pipeline import validate_path
    from compiler.targets.kubernetes.k8s_deployment import lock_pods
    from compiler.targets.kubernetes.k8s_dgd import lock_surges

    require_file(args.spec)
    result = validate_path(args.spec)
    # An unusable lock file (K912) is what this command replaces: it does not stop it (the spec's
    # placements are then computed afresh). A lock file outside the repository (K915) does.
    if result.resolved is None or any(d.is_error and d.code != LockFileInvalid.code for d in result.diagnostics):
        print_diagnostics([result], stream=sys.stderr)
        return ExitCode.ERRORS
    path = lock_path(args.spec)
    data = render_lock(result.spec.name, {h: dict(g) for h, g in lock_entries(result.resolved).items()},
                       lock_workloads(result.resolved), lock_surges(result.resolved),
                       lock_pods(result.resolved))
    try:  # confined by the validation above; a FIFO or device is not read
        current = read_regular(path, MAX_LOCK_BYTES)
    except OSError:
        current = None
    if current == data:
        print(f"{shown(str(path))} is up to date")
        return ExitCode.OK
    if args.check:
        print(f"{shown(str(path))} is {'stale' if os.path.lexists(path) else 'missing'}; run "
              f"`kiln lock {shown(str(args.spec))}` and commit it", file=sys.stderr)
        return ExitCode.ERRORS
    try:
        replace_file(path, data)
    except OSError as e:
        print(f"kiln: error: cannot write {shown(str(path))}: {e.strerror or e}", file=sys.stderr)
        return ExitCode.ERRORS
    print(f"wrote {shown(str(path))}")
    return ExitCode.OK
