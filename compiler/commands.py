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

    p = sub.add_parser("plan", help="show what a build would do (cached or to run, and why) and the capacity")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    p.add_argument("--store", type=Path, help="store directory (default: $KILN_STORE or .kiln/store)")
    p.add_argument("--gpu-profiles", type=Path, metavar="FILE",
                   help="captured `nvidia-smi mig -lgip` output to validate MIG profiles against")
    p.set_defaults(handler=_cmd_plan)
    # --- GitOps loop (compiler/gitops): plan --base/--matrix/--cache, build --cache, publish, init ---
    from compiler.gitops import commands as gitops

    gitops.add_plan_args(p)

    b = sub.add_parser("build", help="build every artifact that is not cached and write the release manifest")
    b.add_argument("spec", type=Path, metavar="SPEC")
    b.add_argument("--store", type=Path, help="store directory (default: $KILN_STORE or .kiln/store)")
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
    b.set_defaults(handler=_cmd_build)
    gitops.register(sub)
    # --- end GitOps loop ---

    st = sub.add_parser("store", help="inspect and maintain the artifact store")
    st_sub = st.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    v = st_sub.add_parser("verify", help="check every object, record and release in the store")
    v.add_argument("--store", type=Path)
    v.add_argument("--repair", action="store_true",
                   help="remove corrupt objects and the records that need them; the next build rebuilds them")
    v.set_defaults(handler=_cmd_store_verify)
    g = st_sub.add_parser("gc", help="remove what the last N releases of each spec do not reference")
    g.add_argument("--store", type=Path)
    g.add_argument("--keep", type=int, default=5, help="releases to keep per spec (default 5)")
    g.set_defaults(handler=_cmd_store_gc)


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

    from compiler.build import open_store, plan_spec, store_dir
    from compiler.capacity.render import render_capacity
    from compiler.cli import UsageError, emit
    from compiler.diagnostics.render import diagnostic_dict, render_text, summary_line
    from compiler.graph.plan import render_disruptions, render_plan
    from compiler.pipeline import Options

    if args.base is not None or args.matrix or args.cache:  # GitOps loop: compiler/gitops/commands.py
        from compiler.gitops.commands import cmd_plan
        return cmd_plan(args)
    if not args.spec.is_file():
        raise UsageError(f"no such file: {args.spec}")
    outcome = plan_spec(args.spec, open_store(store_dir(args.store)), Options(gpu_profiles=args.gpu_profiles))
    result = outcome.validation
    figures = result.resolved.capacity_rows() if result.resolved is not None else []
    if args.format == "json":
        emit(json.dumps({"diagnostics": [diagnostic_dict(d) for d in result.diagnostics],
                         "actions": json.loads(render_plan(outcome.plan, "json")) if outcome.graph else None,
                         "disruptions": json.loads(render_disruptions(outcome.disruptions, "json")),
                         "capacity": json.loads(render_capacity(figures, "json"))}, indent=2, sort_keys=True), None)
    else:
        parts = []
        if result.diagnostics:
            sources = {result.file: result.document.text} if result.document else {}
            parts.append(render_text(result.diagnostics, sources))
        if outcome.graph is not None:
            parts.append(render_plan(outcome.plan, args.format))
            parts.append(render_disruptions(outcome.disruptions, args.format))
        if figures:
            parts.append(render_capacity(figures, args.format))
        parts.append(f"{result.file}: {summary_line(result.diagnostics)}")
        emit("\n\n".join(parts), None)
    return 1 if not result.ok else 0


def _cmd_build(args: argparse.Namespace) -> int:
    import sys

    from compiler.build import BadSelection, build_spec, open_store, store_dir
    from compiler.cli import UsageError
    from compiler.graph.builder import Selection
    from compiler.diagnostics.render import render_text, summary_line

    if not args.spec.is_file():
        raise UsageError(f"no such file: {args.spec}")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    store = open_store(store_dir(args.store))
    progress = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    remote = None
    if args.cache:  # GitOps loop: the registry as a shared cache (compiler/gitops/cache.py)
        from compiler.gitops.cache import remote_for
        remote = remote_for(args.cache, store)
    try:
        outcome = build_spec(args.spec, store, jobs=args.jobs, progress=progress,
                             selection=Selection(tuple(args.only), tuple(args.skip)), remote=remote)
    except BadSelection as e:
        raise UsageError(str(e)) from None
    result = outcome.validation
    if not result.ok:
        sources = {result.file: result.document.text} if result.document else {}
        print(render_text(result.diagnostics, sources), file=sys.stderr)
        print(f"{result.file}: {summary_line(result.diagnostics)}; nothing built", file=sys.stderr)
        return 1
    executed = len(outcome.executed)
    cached = sum(r.status == "cached" for r in outcome.results.values())
    if outcome.failed:
        for r in outcome.failed:
            where = f" (log: {r.log})" if r.log else ""
            print(f"{r.status}: {r.id}: {r.error}{where}", file=sys.stderr)
        print(f"build failed: {len([r for r in outcome.failed if r.status == 'failed'])} failed, "
              f"{len([r for r in outcome.failed if r.status == 'skipped'])} skipped, {cached} cached", file=sys.stderr)
        return 1
    if args.manifest is not None:
        tmp = args.manifest.with_name(args.manifest.name + ".tmp")
        args.manifest.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(outcome.manifest)
        tmp.replace(args.manifest)
    if outcome.deferred:
        for r in sorted(outcome.deferred, key=lambda r: r.id):
            print(f"deferred: {r.id}: {r.error}", file=sys.stderr)
        print(f"release {outcome.manifest_digest}: {executed} executed, {cached} cached, {len(outcome.deferred)} "
              "deferred (incomplete: a builder that has what they need completes it)")
        return 0 if args.allow_partial else 4
    print(f"release {outcome.manifest_digest}: {executed} executed, {cached} cached")
    return 0


def _cmd_store_verify(args: argparse.Namespace) -> int:
    from compiler.build import open_store, store_dir
    from compiler.store.maintenance import verify

    store = open_store(store_dir(args.store))
    problems = verify(store, repair=args.repair)
    for p in problems:
        print(f"store: {p}")
    if args.repair and problems:
        print(f"{store.root}: removed what was corrupt; the next build rebuilds it")
        return 1
    print(f"{store.root}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def _cmd_store_gc(args: argparse.Namespace) -> int:
    from compiler.build import open_store, store_dir
    from compiler.cli import UsageError
    from compiler.store.maintenance import gc

    if args.keep < 1:
        raise UsageError("--keep must be at least 1")
    stats = gc(open_store(store_dir(args.store)), args.keep)
    print(f"kept {stats.kept_releases} release(s); removed {stats.removed_actions} action(s), "
          f"{stats.removed_objects} object(s), {stats.removed_tmp} temporary file(s)")
    return 0
