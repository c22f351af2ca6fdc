"""`kiln plan --base REF`: compile the spec at a git revision and now, and compare the two."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compiler.store.digests import DigestCache
from compiler.lower import lower_or_report
from compiler.pipeline import Options, Validation, validate_path
from compiler.staleness import keyed_diagnostics
from compiler.store.local import LocalStore

from . import gitrev
from .semplan import (SemanticPlan, action_changes, builder_lacks, capacity_deltas, change_simulations,
                      host_disruptions, job_matrix)


@dataclass
class BasePlan:
    head: Validation
    base: Validation | None
    plan: SemanticPlan | None  # None when the working tree's spec has errors


def plan_against(spec: Path, ref: str, store: LocalStore, options: Options | None = None,
                 has_remote=lambda key, kind: False) -> BasePlan:
    commit = gitrev.resolve_ref(spec, ref)
    head = validate_path(spec, options)
    # Base files live in a temporary directory: digest them without the store's path-keyed cache.
    with gitrev.spec_at(spec, commit) as base_spec:
        base = validate_path(base_spec, options, display=f"{ref}:{spec.name}") if base_spec else None
        base_graph = lower_or_report(base, DigestCache(None)) if base is not None else None
    # as plan_spec: reading a store that does not exist does not create it (with a digest cache alone)
    digests = DigestCache(store.root / "digest-cache.json" if store.root.is_dir() else None)
    head_graph = lower_or_report(head, digests)
    if head_graph is None:
        return BasePlan(head, base, None)
    keyed_diagnostics(head, digests)  # measured records, by artifact key
    digests.save()
    note = None
    if base is None:
        note = f"{spec.name} does not exist at {ref}: every artifact is new"
    elif not base.ok:
        note = f"{spec.name} has errors at {ref}: every artifact counts as new"
    changes, unchanged = action_changes(base_graph, head_graph, store, head.spec.name, has_remote)
    todo = [a for a in changes if a.change != "removed" and not a.cached]
    base_rows = base.resolved.capacity_rows() if base is not None and base.ok else []
    plan = SemanticPlan(ref, commit, note, changes, unchanged, host_disruptions(base_graph, head_graph),
                        capacity_deltas(base_rows, head.resolved.capacity_rows()),
                        job_matrix(todo, head_graph, builder_lacks()),
                        change_simulations(base_graph if base is not None and base.ok else None, head_graph))
    for sim in plan.rollouts:  # the per-workload lines say what the simulation found
        plan.disruptions = sim.annotate(plan.disruptions)
    head.diagnostics.extend(refused_updates(head, plan.disruptions))
    moved = moved_namespace(head, base, plan.rollouts) if plan.rollouts and base is not None and base.ok else []
    # a namespace move is K956's, which gives the simulated outage: no K859 per model beside it
    head.diagnostics.extend(rollout_diagnostics(head, plan.rollouts, skip=("K859",) if moved else ()))
    head.diagnostics.extend(moved)
    if plan.rollouts and base is not None and base.ok:
        head.diagnostics.extend(renamed_spec(head, base.spec.name))
        plan.disruptions, renames = renamed_workloads(head, base, plan.disruptions)
        head.diagnostics.extend(renames)
    if base is not None and base.ok:
        head.diagnostics.extend(pathway_changed(head, base_graph, head_graph))
    return BasePlan(head, base, plan)


def renamed_workloads(head: Validation, base: Validation, disruptions: list) -> tuple[list, list]:
    """K954 for each device shape whose workload the change renames (review M7: without a lock file
    the bare name follows the largest shape), at the model; the pruned workload's plan line says
    it was a rename. Runtime `deployment` only: a DGD's changed component set is K855's."""
    from dataclasses import replace

    from compiler.checks.kubernetes import WorkloadRenamed as rule
    from compiler.diagnostics import Diagnostic
    from compiler.ir.pools import shape_moves

    if _runtime(head) != "deployment" or _runtime(base) != "deployment":
        return disruptions, []
    diags, pruned = [], {}
    for m in shape_moves(base.resolved.pools, head.resolved.pools):
        a, b = m.before, m.after
        takes = (f"{b.name} rolls from {m.new_name_on} onto {m.shape}" if m.new_name_on
                 else f"{b.name} starts {b.replicas} new pod(s) of {m.shape}")
        if m.old_name_on is None:
            pruned[a.name] = f"renamed to {b.name}: its {a.replicas} pod(s) deleted at once (Argo CD prunes it), {takes}"
            what = f"{a.name} {pruned[a.name]}"
        else:
            what = f"{m.shape} moves from {a.name} to {b.name}: {a.name} rolls onto {m.old_name_on}, {takes}"
        diags.append(Diagnostic(rule.code, rule.severity, f"node pool {m.pool!r}: {what}", head.file,
                                _span(head, ("models", m.model), key=True),
                                help="to keep the name, run `kiln lock` on the base revision and commit the lock "
                                     "file before this change (K953)"))
    out = []
    for d in disruptions:
        name = d.detail.split(":", 1)[0]
        if d.kind == "workload-delete" and name in pruned:
            d = replace(d, detail=f"{name}: {pruned[name]}; `kiln lock` before the change keeps the name (K954)")
        out.append(d)
    return out, diags


def pathway_changed(head: Validation, base_graph, head_graph) -> list:
    """K850: `kubernetes.dynamo.grove` changed for DGDs that run: Dynamo's operator fixes a DGD's
    workload provider when it first admits it, so the new nvidia.com/enable-grove would change
    nothing on main and switch the live DGD's workloads on an earlier operator (catalog
    k8s_controllers.json rolling_update.pathway)."""
    from compiler.checks.kubernetes import DynamoPathwayChanged as rule
    from compiler.diagnostics import Diagnostic
    from compiler.targets.kubernetes.k8s_dgd import KIND

    def dgds(graph) -> dict:
        return {(a.params.namespace, a.params.model): a.params.grove for a in (graph.actions.values() if graph else ())
                if a.kind == KIND.kind}

    before, after = dgds(base_graph), dgds(head_graph)
    live = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    if not live:
        return []
    dynamo = (head.spec.kubernetes.dynamo if head.spec.kubernetes is not None else None)
    span = _span(head, ("kubernetes", "dynamo", "grove") if dynamo is not None and "grove" in dynamo.model_fields_set
                 else ("kubernetes", "dynamo"))
    named = {True: "Grove", False: "the operator's component pathway"}
    models = ", ".join(m for _, m in live)
    was = before[live[0]]
    return [Diagnostic(rule.code, rule.severity,
                       f"kubernetes.dynamo.grove changes from {str(was).lower()} to {str(not was).lower()} for the "
                       f"running DGD(s) {models}: Dynamo's operator fixed each one's pathway ({named[was]}) when it first "
                       "admitted it (nvidia.com/workload-provider, immutable), so the new nvidia.com/enable-grove would "
                       "leave it there and the plan would not hold; an earlier operator would switch its workloads",
                       head.file, span,
                       help=f"keep `grove: {str(was).lower()}` while these models run; to move them, delete each DGD "
                            "(it serves nothing until the new one is up) and sync the changed spec, or serve them from a "
                            "second spec on the other pathway first")]


def renamed_spec(head: Validation, old: str) -> list:
    """K955: the spec's name changed under a running Kubernetes tree (review N6): its Argo CD
    Application and the live MIG layouts ConfigMap are named after it, and no sync renames them."""
    from compiler.checks.kubernetes import SpecRenamedOnCluster as rule
    from compiler.diagnostics import Diagnostic
    from compiler.ir.k8s_names import mig_configmap_name

    new = head.spec.name
    if new == old:
        return []
    span = _span(head, ("name",))
    what = [f"the re-layout Job would write {mig_configmap_name(new)!r} while the GPU Operator's mig-manager reads "
            f"{mig_configmap_name(old)!r} (its helm values name it)"]
    if head.spec.kubernetes is not None and head.spec.kubernetes.argocd is not None:
        what.insert(0, f"a second Argo CD Application {new!r} would manage the objects Application {old!r} manages")
    return [Diagnostic(rule.code, rule.severity, f"the spec's name changes from {old!r} to {new!r} on a running "
                       f"Kubernetes tree: {'; '.join(what)}", head.file, span,
                       help=f"keep `name: {old}`; or retire {old!r} first (`argocd app delete {old} "
                            "--cascade=false`, then helm upgrade the GPU Operator with the new tree's "
                            "node-layer/gpu-operator-values.yaml) and plan the renamed spec as a new one, "
                            "without --base")]


def moved_namespace(head: Validation, base: Validation, rollouts: list) -> list:
    """K956: the Kubernetes namespace changed under a running tree (review N5). A namespace is part of
    each object's identity: every workload is deleted in the old one and created in the new one, and
    every Service gets a new DNS name; the simulation gives how long each model has no ready pod."""
    from compiler.checks.kubernetes import NamespaceMovedOnCluster as rule
    from compiler.diagnostics import Diagnostic
    from compiler.targets.kubernetes.k8s_deployment import namespace_of

    if head.spec.kubernetes is None or base.spec.kubernetes is None:
        return []
    old, new = namespace_of(base.spec), namespace_of(head.spec)
    if old == new:
        return []
    k8s = head.spec.kubernetes
    span = _span(head, ("kubernetes", "namespace") if k8s.namespace else ("name",))
    down = []
    for sim in rollouts:
        for m in sim.floor_breaches():
            _, since, span_s = sim.result.low[m]
            down.append(f"{m} from +{_t(since)} for {_t(span_s)}")
    services = sorted({(name, a, b) for sim in rollouts for name, a, b in sim.moved_services()})
    what = [f"a namespace is part of each object's identity, so Argo CD deletes every workload in {old!r} (its "
            f"pods stop at once) and creates it in {new!r}"]
    if down:
        what.append(f"no ready pod (simulated): {', '.join(down)}")
    if services:
        what.append("the Services get new DNS names: " + ", ".join(f"{n}.{a}.svc -> {n}.{b}.svc" for n, a, b in services)
                    + "; clients that name the old ones stop resolving them")
    return [Diagnostic(rule.code, rule.severity, f"the Kubernetes namespace changes from {old!r} to {new!r} on a "
                       f"running tree: {'; '.join(what)}", head.file, span,
                       help=f"keep `namespace: {old}`; or move in steps: serve the models from {new!r} beside "
                            f"{old!r} first (a second spec with its own name and `namespace: {new}`, on nodes of its "
                            "own), move the clients to the new Service names, then retire the old deployment "
                            "(delete its Argo CD Application)")]


def _t(seconds: float) -> str:
    from compiler.targets.kubernetes.sim.report import duration

    return duration(seconds)


def rollout_diagnostics(head: Validation, rollouts: list, skip: tuple = ()) -> list:
    """K858 (the change sticks on the cluster) and K859 (a model has no ready pod during it), from
    each target's simulation of the change; they point at the spec as a whole. `skip`: codes another
    diagnostic of the plan says with its cause (K956's namespace move: its K859s)."""
    from compiler.checks import get_rule
    from compiler.diagnostics import Diagnostic, Span

    out = []
    for sim in rollouts:
        for code, message, help_ in sim.diagnostics():
            if code in skip:
                continue
            rule = get_rule(code.lower())
            out.append(Diagnostic(rule.code, rule.severity, message, head.file, Span.unknown(), help=help_))
    return out


def refused_updates(head: Validation, disruptions: list) -> list:
    """K855 for every `recreate` the plan holds: an update a controller refuses on the live objects."""
    from compiler.checks.kubernetes import KubernetesUpdateForbidden as rule
    from compiler.diagnostics import Diagnostic

    out = []
    for d in disruptions:
        if d.kind != "recreate":
            continue
        span = _span(head, ("hosts", d.host), key=True)
        out.append(Diagnostic(rule.code, rule.severity, f"node pool {d.host!r}: {d.detail}", head.file, span,
                              help="apply it in a maintenance window: the object is deleted and created anew"))
    return out


def _runtime(v: Validation) -> str:
    k8s = v.spec.kubernetes
    return k8s.runtime if k8s is not None else "deployment"


def _span(head: Validation, path: tuple, key: bool = False):
    """The span of `path` in the working tree's spec; unknown where it cannot be found."""
    from compiler.diagnostics import Span

    try:
        return head.document.span_of(path, key=key) if head.document is not None else Span.unknown()
    except (KeyError, IndexError, TypeError):
        return Span.unknown()
