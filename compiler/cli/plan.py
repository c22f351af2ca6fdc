"""`kiln plan`: what a build would do and the capacity; with --base the semantic difference from a
git revision (compiler/gitops/planbase.py), with --matrix the CI job matrix of what is left to build."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .builders import add_builders, declared_builders
from .common import STORE_HELP, add_gpu_profiles, gpu_profiles, remote_cache, require_file, store_path
from .errors import UsageError
from .exitcodes import ExitCode
from .output import diagnostic_records, emit, footer_line, print_diagnostics, render_diagnostics


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show what a build would do (cached or to run, and why) and the capacity")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    p.add_argument("--store", type=Path, help=STORE_HELP)
    add_gpu_profiles(p)
    # the GitOps loop (compiler/gitops)
    p.add_argument("--base", metavar="REF", help="compare with the spec at this git revision (exit 5 on changes)")
    p.add_argument("--matrix", action="store_true",
                   help="print only the GitHub Actions job matrix of the actions left to build that this "
                        "builder cannot run (a GPU, or what $KILN_BUILDER_HAS leaves out)")
    p.add_argument("--cache", metavar="REGISTRY", help="count artifacts in this registry cache as built")
    add_builders(p)
    p.set_defaults(handler=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> ExitCode:
    require_file(args.spec)
    if args.base is not None or args.matrix or args.cache:
        return _plan_gitops(args)
    return _plan_store(args)


def _plan_store(args: argparse.Namespace) -> ExitCode:
    """Plain `kiln plan`: each action cached or to run (and why), disruptions, capacity."""
    from compiler.build import open_store, plan_spec
    from compiler.capacity.mig_layout import placement_rows, render_placements
    from compiler.capacity.render import render_capacity
    from compiler.capacity.roles_render import render_roles
    from compiler.ir.role_capacity import roles_rows
    from compiler.graph.plan import render_plan, summary_line
    from compiler.targets.disruption import disrupted_phrase, render_disruptions
    from compiler.pipeline import Options
    from compiler.runtimes.plan import process_rows, render_processes

    # planning reads the store, never creates it
    store = open_store(store_path(args.store, args.spec), create=False, missing_ok=True)
    builders = declared_builders(args)
    outcome = plan_spec(args.spec, store, Options(gpu_profiles=gpu_profiles(args)))
    result = outcome.validation
    if builders is not None and outcome.graph is not None:
        _place(outcome, builders)
    figures = result.resolved.capacity_rows() if result.resolved is not None else []
    placements = placement_rows(result.resolved.units) if result.resolved is not None else []
    processes = process_rows(result.resolved) if result.resolved is not None else []
    roles = roles_rows(result.resolved) if result.resolved is not None else []
    summary = summary_line(outcome.plan, disrupted_phrase(outcome.disruptions)) if outcome.graph is not None else None
    if args.format == "json":
        emit(json.dumps({"summary": summary, "diagnostics": diagnostic_records([result]), "store": str(store.root),
                         "actions": json.loads(render_plan(outcome.plan, "json")) if outcome.graph else None,
                         "disruptions": json.loads(render_disruptions(outcome.disruptions, "json")),
                         "placements": placements, "processes": processes,
                         **({"disaggregated": roles} if roles else {}),
                         "capacity": json.loads(render_capacity(figures, "json"))}, indent=2, sort_keys=True), None)
    else:
        parts = [f"**{summary}**" if args.format == "markdown" else summary] if summary else []
        if result.diagnostics:
            parts.append(render_diagnostics([result], footer=False))
        if outcome.graph is not None:
            plan_text = render_plan(outcome.plan, args.format)
            if args.format == "text":  # "cached", "never built in this store": which store
                plan_text = f"{store_line(store)}\n{plan_text}"
            parts.append(plan_text)
            parts.append(render_disruptions(outcome.disruptions, args.format))
            notes = (short_calibration_lines(result.resolved) + idle_gpu_lines(result.resolved)
                     + [kubernetes_version_note(result.resolved) or ""])
            notes = [n for n in notes if n]
            if notes:
                parts.append("\n".join(f"- {n}" if args.format == "markdown" else n for n in notes))
        if placements:
            parts.append(render_placements(placements, args.format))
        if processes:  # only units that start more than one process (engine tp * pp > 1 under mpirun)
            parts.append(render_processes(processes, args.format))
        if figures:
            parts.append(render_capacity(figures, args.format))
        if roles:
            parts.append(render_roles(roles, args.format))
        parts.append(footer_line([result]))
        emit("\n\n".join(parts), None)
    return ExitCode.OK if result.ok else ExitCode.ERRORS


def _place(outcome, builders) -> None:
    """Each action to run on the first declared class that holds it; K405 for those none holds."""
    from compiler.graph.sizes import SMALL
    from compiler.machines import place, unplaceable, way_rank
    from compiler.targets.registry import REGISTRY

    todo = [p for p in outcome.plan if not p.cached]
    for p in todo:
        action = outcome.graph.actions[p.id]
        home = place(REGISTRY, action, builders.machines)
        p.builder = home.name if home is not None else None
        if home is not None:
            p.builder_way = (action.size or SMALL).ways[way_rank(REGISTRY, action, home)]
    spec = outcome.validation.spec
    outcome.validation.diagnostics.extend(unplaceable(outcome.graph, REGISTRY, builders.machines, [p.id for p in todo],
                                                      outcome.validation.resolved.document, spec.models, spec.hosts))


def short_calibration_lines(ir) -> list[str]:
    """Per model whose calibration data holds fewer samples than `calibration.samples`: the set is
    built from what there is (counted up to `samples` lines: a large file costs nothing)."""
    from compiler.ir.inputs import count_samples

    out = []
    for name, m in (ir.spec.models.items() if ir is not None else ()):
        cal = m.quantization.calibration
        if cal is None or cal.data not in ir.inputs:
            continue
        found = count_samples(ir.input_path(cal.data), cal.samples)
        if found is not None and found < cal.samples:
            out.append(f"Calibration: {name}'s {cal.data} holds {found} sample{'s' * (found != 1)}, fewer than the "
                       f"{cal.samples} asked for: calibration-set/{name} will hold {found}")
    return out


def idle_gpu_lines(ir) -> list[str]:
    """Per host (or node of a pool) whose GPUs are not all assigned: which serve nothing. A host that
    serves 1 of its 8 GPUs said nothing of the other 7."""
    out = []
    for name, host in (ir.hosts.items() if ir is not None else ()):
        used = {g for a in host.spec.gpus for g in a.indexes}
        idle = [g for g in range(host.spec.count) if g not in used]
        if idle and used:
            where = "each node of node pool" if name in ir.pools else "host"
            out.append(f"Idle: {where} {name} serves on {len(used)} of its {host.spec.count} GPUs; "
                       f"GPU{'s' * (len(idle) > 1)} {', '.join(map(str, idle))} serve{'s' * (len(idle) == 1)} nothing")
    return out


def kubernetes_version_note(ir) -> str | None:
    """What a Kubernetes tree assumes of the cluster when the spec does not name its release: the
    default one, whose image volumes carry the node pools' weights."""
    from compiler.ir.pools import mounts_weights
    from compiler.spec.models import DEFAULT_KUBERNETES_VERSION

    k8s = ir.spec.kubernetes if ir is not None else None
    if ir is None or not ir.pools or (k8s is not None and "version" in k8s.model_fields_set):
        return None
    volumes = sorted(p for p in ir.pools if mounts_weights(ir, p))
    why = (f"; {', '.join(volumes)} mount{'s' * (len(volumes) == 1)} each model's weights as an image volume, "
           f"on by default from Kubernetes {DEFAULT_KUBERNETES_VERSION} (K857 checks an older cluster once "
           "kubernetes.version names it)") if volumes else ""
    return (f"Kubernetes: kubernetes.version is not set, so the tree is written for Kubernetes "
            f"{DEFAULT_KUBERNETES_VERSION}{why}")


def store_line(store) -> str:
    """The store a plan was made against (it may not exist yet: nothing was built there)."""
    return f"Store: {store.root}" + ("" if (store.root / "objects").is_dir() else " (none there yet)")


def _plan_gitops(args: argparse.Namespace) -> ExitCode:
    """`kiln plan` with --base or --matrix (and --cache)."""
    from compiler.build import open_store, plan_spec
    from compiler.gitops.gitrev import GitError
    from compiler.gitops.planbase import plan_against
    from compiler.gitops.render import render_semantic
    from compiler.gitops.semplan import builder_lacks, class_matrix, job_matrix
    from compiler.pipeline import Options

    if args.base is None and not args.matrix:
        raise UsageError("--cache goes with --base or --matrix")
    store = open_store(store_path(args.store, args.spec), create=False, missing_ok=True)
    remote = remote_cache(args.cache, store) if args.cache else None
    has_remote = remote.has if remote is not None else (lambda key, kind: False)
    options = Options(gpu_profiles=gpu_profiles(args))
    if args.base is None:  # --matrix against the store (and the registry cache)
        outcome = plan_spec(args.spec, store, options)
        if outcome.graph is None:
            print_diagnostics([outcome.validation], stream=sys.stderr)
            return ExitCode.ERRORS
        todo = [p for p in outcome.plan if not p.cached and not has_remote(p.key, p.kind)]
        builders = declared_builders(args)
        if builders is None:
            matrix = job_matrix(todo, outcome.graph, builder_lacks())
        else:  # every chain on the first declared class that holds it
            from compiler.machines import unplaceable
            from compiler.targets.registry import REGISTRY

            matrix, homeless = class_matrix(todo, outcome.graph, REGISTRY, builders.machines)
            if homeless:
                result = outcome.validation
                result.diagnostics.extend(unplaceable(outcome.graph, REGISTRY, builders.machines, homeless,
                                                      result.resolved.document, result.spec.models, result.spec.hosts))
                print_diagnostics([result], stream=sys.stderr)
                return ExitCode.ERRORS
        emit(json.dumps(matrix, sort_keys=True, separators=(",", ":")), None)
        return ExitCode.OK
    try:
        result = plan_against(args.spec, args.base, store, options, has_remote)
    except GitError as e:
        raise UsageError(f"--base {args.base}: {e}") from None
    if result.plan is None:
        print_diagnostics([result.head], stream=sys.stderr)
        return ExitCode.ERRORS
    if args.matrix:  # output for a workflow step: the exit code says nothing about changes
        emit(json.dumps(result.plan.matrix, sort_keys=True, separators=(",", ":")), None)
        return ExitCode.OK
    text = render_semantic(result.plan, args.format)
    if args.format == "text":  # the durations and "built in this store" are this store's (stdout may be a PR comment)
        print(store_line(store), file=sys.stderr)
    head = result.head
    if head.diagnostics and args.format != "json":  # warnings of the new revision stay visible
        text = render_diagnostics([head], footer=False) + "\n\n" + text
    if args.format == "text":
        text += "\n\n" + footer_line([head])
    emit(text, None)
    if not head.ok:  # the change itself is refused (K858, K859: it would stick or empty a model on the cluster)
        return ExitCode.ERRORS
    return ExitCode.CHANGES if result.plan.changed else ExitCode.OK
