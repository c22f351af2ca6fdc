"""`kiln build`: run what is not cached, store it, write the release manifest."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .builders import add_builders, declared_builder
from .common import STORE_HELP, check_output_file, remote_cache, require_file, store_path, write_output
from .errors import UsageError
from .exitcodes import ExitCode
from .output import print_diagnostics


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("build", help="build every artifact that is not cached and write the release manifest")
    b.add_argument("spec", type=Path, metavar="SPEC")
    b.add_argument("--store", type=Path, help=STORE_HELP)
    b.add_argument("--jobs", "-j", type=int, default=2, help="actions run in parallel (default 2)")
    b.add_argument("--manifest", type=Path, help="also write the release manifest to this file")
    b.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    b.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="build only the actions whose id or kind matches (and what they depend on); repeatable")
    b.add_argument("--skip", action="append", default=[], metavar="GLOB",
                   help="do not build the actions whose id or kind matches (nor what depends on them); repeatable")
    b.add_argument("--allow-partial", action="store_true",
                   help="exit 0 when actions are deferred (this builder lacks what they need, or --only/--skip); "
                        "without it such a build exits 4")
    b.add_argument("--cache", metavar="REGISTRY", help="fetch artifacts missing from the store from this registry "
                                                      "(see `kiln publish`) instead of building them")
    add_builders(b, as_class=True)
    b.add_argument("--executor", metavar="ENGINE", default=os.environ.get("KILN_EXECUTOR") or None,
                   help="run the actions on a distributed engine: ray://HOST:PORT (a Ray cluster's GCS address); "
                        "needs --cache, the registry every input and output moves through (default: $KILN_EXECUTOR)")
    b.add_argument("--action-deadline", type=float, metavar="SECONDS",
                   help="with --executor: cancel an action still running after this long (it fails)")
    b.set_defaults(handler=cmd_build)


def cmd_build(args: argparse.Namespace) -> ExitCode:
    from compiler.build import BadSelection, build_spec, open_store
    from compiler.graph.builder import Selection
    from compiler.graph.executor import Interrupt

    from .interrupts import stopping_on_signals

    require_file(args.spec)
    check_output_file(args.manifest, "--manifest")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    store = open_store(store_path(args.store, args.spec))
    progress = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    remote = remote_cache(args.cache, store) if args.cache else None  # the registry as a shared cache
    builder = declared_builder(args)  # --as CLASS of a builders file; else this machine, probed
    engine = _engine(args, remote)
    if engine is not None:
        from compiler.distributed.driver import on_engine
    interrupt = Interrupt()
    try:
        with stopping_on_signals(interrupt):
            outcome = build_spec(args.spec, store, jobs=args.jobs, progress=progress,
                                 selection=Selection(tuple(args.only), tuple(args.skip)), remote=remote,
                                 interrupt=interrupt, builder=builder,
                                 engine=None if engine is None else on_engine(engine, remote,
                                                                              deadline_s=args.action_deadline))
    except BadSelection as e:
        raise UsageError(str(e)) from None
    finally:
        if engine is not None:
            engine.close()  # cancels what is still submitted (an interrupt, an error)
    result = outcome.validation
    if not result.ok:
        print_diagnostics([result], stream=sys.stderr, suffix="; nothing built")
        return ExitCode.ERRORS
    if outcome.interrupted:
        print(interrupted_summary(outcome, store), file=sys.stderr)
        return ExitCode.INTERRUPTED
    if remote is not None and remote.refused:  # publish.signed_by: an unverified artifact fails the build
        for line in remote.refused:
            print(f"refused: {line}", file=sys.stderr)
        print(f"build failed: {len(remote.refused)} artifact(s) in the cache {remote.registry} are not signed by "
              f"{remote.trust.describe()} (publish.signed_by)", file=sys.stderr)
        return ExitCode.ERRORS
    executed = len(outcome.executed)
    fetched = sum(r.status == "cached" and r.fetched for r in outcome.results.values())
    cached = sum(r.status == "cached" for r in outcome.results.values()) - fetched
    counts = f"{executed} executed, {cached} cached" + (f", {fetched} fetched" if fetched else "")
    if outcome.failed:
        for r in outcome.failed:
            where = f" (log: {r.log})" if r.log else ""
            print(f"{r.status}: {r.id}: {r.error}{where}", file=sys.stderr)
        print(f"build failed: {len([r for r in outcome.failed if r.status == 'failed'])} failed, "
              f"{len([r for r in outcome.failed if r.status == 'skipped'])} skipped, {cached} cached", file=sys.stderr)
        return ExitCode.ERRORS
    if args.manifest is not None:
        write_output(args.manifest, outcome.manifest, "--manifest")
    if outcome.deferred:
        for r in sorted(outcome.deferred, key=lambda r: r.id):
            print(f"deferred: {r.id}: {r.error}", file=sys.stderr)
        print(f"release {outcome.manifest_digest}: {counts}, {len(outcome.deferred)} "
              "deferred (incomplete: a builder that has what they need completes it)")
        print(summary(args, store, outcome))
        return ExitCode.OK if args.allow_partial else ExitCode.INCOMPLETE
    print(f"release {outcome.manifest_digest}: {counts}")
    print(summary(args, store, outcome))
    return ExitCode.OK


def _engine(args, remote):
    """The distributed engine of --executor, joined; None without one."""
    if args.executor is None:
        if args.action_deadline is not None:
            raise UsageError("--action-deadline goes with --executor")
        return None
    if remote is None:
        raise UsageError("--executor needs --cache REGISTRY: the registry every input and output moves through")
    if args.action_deadline is not None and args.action_deadline <= 0:
        raise UsageError("--action-deadline must be a positive number of seconds")
    from compiler.distributed.connect import connect
    from compiler.distributed.engine import EngineError

    try:
        return connect(args.executor)
    except EngineError as e:
        raise UsageError(str(e)) from None


def interrupted_summary(outcome, store) -> str:
    """What an interrupted build leaves: what it stopped, what it kept, and whether a release exists."""
    by = {}
    for r in outcome.results.values():
        by.setdefault(r.status, []).append(r.id)
    stopped = sorted((r.id, r.log) for r in outcome.results.values() if r.status == "interrupted" and r.log)
    lines = [f"kiln: build interrupted ({store.root}): " + ", ".join(
        f"{len(by.get(s, []))} {label}" for s, label in (("built", "built"), ("cached", "cached"),
                                                          ("interrupted", "stopped or not started"),
                                                          ("failed", "failed")) if by.get(s))]
    if stopped:
        lines += [f"stopped: {aid} (nothing of it was stored; log: {log})" for aid, log in stopped]
    lines += [f"failed: {r.id}: {r.error} (log: {r.log})" for r in outcome.results.values() if r.status == "failed"]
    if outcome.manifest_digest:
        lines.append(f"release {outcome.manifest_digest} was recorded before the interrupt")
    else:
        lines.append("no release was recorded; what was built is kept, and the next build continues from it")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""  # not reached


def summary(args: argparse.Namespace, store, outcome) -> str:
    """Where the manifest is, what was produced (per kind, with sizes), the quality-gate figures and
    the command to run next."""
    import json
    import shlex

    from compiler.releases import load_release, sizes_by_kind

    release = load_release(store, outcome.manifest_digest)
    lines = [f"manifest: {args.manifest if args.manifest is not None else store.blob_path(release.digest)}",
             f"store: {store.root}"]
    rows = sizes_by_kind(store, list(release.artifacts))
    width = max((len(r.kind) for r in rows), default=0)
    lines.append("produced (per kind: artifacts, files, size):")
    lines += [f"  {r.kind:<{width}}  {r.artifacts:>3}  {r.files:>5}  {_size(r.bytes):>10}" for r in rows]
    pending = [a for a in release.artifacts if a.tree is None]
    if pending:
        lines.append(f"  (pending: {', '.join(a.id for a in pending)})")
    gates = json.loads(release.manifest).get("quality") or {}
    if gates:
        lines.append("quality gates:")
        for model, g in gates.items():
            reg = "unbounded" if g["regression_pct"] is None else f"{g['regression_pct']:+.2f}%"
            lines.append(f"  {model}: {g['metric']} {g['unquantized']:g} -> {g['quantized']:g} ({reg}, allowed "
                         f"{g['max_regression_pct']:g}%) {'passed' if g['passed'] else 'FAILED'}")
    spec = shlex.quote(str(args.spec))
    store_opt = f" --store {shlex.quote(str(args.store))}" if args.store is not None else ""
    if pending:  # a partial release: export writes what was built, and says what is pending
        lines.append(f"next: a builder with what the {len(pending)} pending artifact(s) need completes the release "
                     f"(`kiln build {spec}{store_opt}` there); `kiln export {spec}{store_opt} --to DIR --allow-partial` "
                     f"writes the {len(release.artifacts) - len(pending)} built now")
    else:
        lines.append(f"next: kiln export {spec}{store_opt} --to DIR   (every artifact, provision.sh and the Triton "
                     f"repositories included; `kiln show {spec}{store_opt} ARTIFACT/PATH` prints one file)")
    return "\n".join(lines)
