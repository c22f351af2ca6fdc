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
                   help="write nothing; exit 1 when the lock file is missing or does not match (for CI); "
                        "Deployment pods the lock records at other shapes or counts are the running "
                        "revision's mid-change, said and accepted")
    p.add_argument("--keep-pods", action="store_true",
                   help="keep the lock's Deployment pods (the running revision) while writing the placements, "
                        "names and surges the spec gives: for a change of a pod shape that also moves MIG "
                        "instances; run `kiln lock` again after the rollout")
    p.set_defaults(handler=cmd_lock)


def running_pods(ir, pods: dict) -> tuple[dict, list[str]] | None:
    """The lock's "workloads" and a line per Deployment when the lock's "pods" record the same
    Deployments as the spec with other shapes or counts: mid-change, they describe the revision that
    runs (k8s_deployment.reshape_unavailable paces the change from them), which `kiln lock` records
    after the rollout. A bare-named workload whose shape changed keeps its name, so the lock's
    "workloads" name its running shape; None when the pods agree or record other Deployments."""
    from compiler.ir.pools import lock_workloads

    locked = ir.locked_pods
    if locked == pods or {p: set(ws) for p, ws in locked.items()} != {p: set(ws) for p, ws in pods.items()}:
        return None
    names = lock_workloads(ir)
    lines = []
    for pool, ws in sorted(pods.items()):
        for w, now in sorted(ws.items()):
            was = locked[pool][w]
            if was != now:
                lines.append(f"{w} runs {was['replicas']} pod(s) of {was['shape']}, {was['per_node']} per node; the "
                             f"spec gives {now['replicas']} of {now['shape']}, {now['per_node']} per node")
            for key, (bare, *rest) in list(names.get(pool, {}).items()):
                model, _, role = key.partition("/")
                if w == (f"{model}-{pool}-{role}" if role else f"{model}-{pool}") and bare == now["shape"]:
                    names[pool][key] = (was["shape"], *rest)
    return names, lines


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
    placements = {h: dict(g) for h, g in lock_entries(result.resolved).items()}
    surges, pods = lock_surges(result.resolved), lock_pods(result.resolved)
    data = render_lock(result.spec.name, placements, lock_workloads(result.resolved), surges, pods)
    # mid-change (the lock's "pods" are the running revision's): accepted by --check, kept by --keep-pods
    running = running_pods(result.resolved, pods)
    kept = None if running is None else render_lock(result.spec.name, placements, running[0], surges,
                                                    result.resolved.locked_pods)
    note = "" if running is None else (
        f"its \"pods\" describe the running revision ({'; '.join(running[1])}): after the rollout, run "
        f"`kiln lock {shown(str(args.spec))}` and commit it (until then K957 warns where a shape changed)")
    if args.keep_pods and kept is not None:
        data = kept
    try:  # confined by the validation above; a FIFO or device is not read
        current = read_regular(path, MAX_LOCK_BYTES)
    except OSError:
        current = None
    if current == data:
        print(f"{shown(str(path))} is up to date" + (f"; {note}" if data == kept else ""))
        return ExitCode.OK
    if args.check and current == kept:
        print(f"{shown(str(path))} matches the spec's placements, names and surges; {note}")
        return ExitCode.OK
    if args.check:
        keep = "" if running is None else " --keep-pods"  # mid-change: the running pods stay recorded
        print(f"{shown(str(path))} is {'stale' if os.path.lexists(path) else 'missing'}; run "
              f"`kiln lock{keep} {shown(str(args.spec))}` and commit it", file=sys.stderr)
        return ExitCode.ERRORS
    try:
        replace_file(path, data)
    except OSError as e:
        print(f"kiln: error: cannot write {shown(str(path))}: {e.strerror or e}", file=sys.stderr)
        return ExitCode.ERRORS
    print(f"wrote {shown(str(path))}" + (f"; {note}" if data == kept else ""))
    return ExitCode.OK
