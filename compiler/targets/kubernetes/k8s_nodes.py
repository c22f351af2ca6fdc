"""`k8s-node-layer`: the GPU Operator node layer of the spec's Kubernetes node pools
(compiler/targets/kubernetes/nodelayer.py): the desired layouts ConfigMap with one named layout per distinct node
layout, the ClusterPolicy merge patch, the re-layout script (and its Job and RBAC), and per pool
with clocks or power a node-tuning script. Its parameters are the layouts, pools and tunings
themselves, so its key changes exactly when one of them does; `disruptions` says which pools are
re-laid out, node by node, and which instances each node loses.

Output (the tree's node-layer/ directory):
  kustomization.yaml        resources: mig-parted-config.yaml, relayout-rbac.yaml[, relayout-job.yaml]
  mig-parted-config.yaml    <spec>-mig-layouts-desired (GPU Operator namespace), checked with mig-parted's rules,
                            and <spec>-mig-layouts, the one the MIG manager reads (its data the script's)
  relayout-rbac.yaml        the Job's ServiceAccount, (Cluster)Roles and bindings: exactly what the script calls
  relayout-job.yaml         with kubernetes.relayout_image: the script and the sync-wave Job running it
  clusterpolicy-patch.yaml  `kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge --patch-file ...`
  label-nodes.sh            the node-by-node re-layout (--check, --dry-run)
  node-tuning-<pool>.sh     clocks and power (no GPU Operator setting exists for either)
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Annotated

from compiler.actions.base import ActionKind, Disruption, LowerContext, Params, RunContext
from compiler.actions.gpustate import desired_state
from compiler.targets.disruption import POOL
from compiler.graph.model import Action
from compiler.ir.pools import ALL_DISABLED, cluster_strategy
from compiler.params import Effect, changed_kinds, worded

from . import nodelayer, plan, tree
from .k8s_deployment import max_unavailable, namespace_of

TEMPLATES = (nodelayer.LABEL_TEMPLATE, nodelayer.TUNING_TEMPLATE)


def template_digests() -> dict[str, str]:
    return {n: "sha256:" + hashlib.sha256((nodelayer.TEMPLATE_DIR / n).read_bytes()).hexdigest() for n in TEMPLATES}


class GpuTuning(Params):
    index: int
    lgc: str  # `nvidia-smi -lgc` value, "" when not set
    lmc: str
    ac: str
    pl: str


# What a change of a pool's node layer does to its nodes (disruptions words it)
_RELAYOUT = Effect("re-layout", "the MIG manager re-partitions each node's GPUs (nvidia.com/mig.config), node by "
                                "node once its pods are evicted", ("node-relayout",))
_TUNING = Effect("reload", "nvidia-smi -lgc/-lmc/-ac/-pl on every node, applied while serving (the tuning DaemonSet "
                           "or node-tuning-<pool>.sh)", ("clocks", "power"))
_UNREAD = Effect("none", "read by the plan's text or the rollout's pace only")


class PoolLayer(Params):
    """Each field declares what its change does to the pool's nodes (compiler/params.py Effect)."""

    name: Annotated[str, Effect("replace", "names the pool: another name is another pool")]
    nodes: Annotated[int, _RELAYOUT]  # new nodes get the layout
    selector: Annotated[dict[str, str], Effect("replace", "which nodes are the pool's: others are labelled")]
    layout: Annotated[str, _RELAYOUT]
    mig: Annotated[bool, _RELAYOUT]  # the layout enables MIG somewhere
    max_unavailable: Annotated[int, _UNREAD] = 1  # nodes re-laid out at once
    serves: Annotated[dict[str, list[str]], _UNREAD] = {}  # MIG profile -> the models its instances serve (plan text)
    gpu_count: Annotated[int, _TUNING] = 0  # GPUs of a node (the tuning script covers every one)
    tuning: Annotated[list[GpuTuning], _TUNING]  # GPUs with clocks or power set; [] for none


class NodeLayerParams(Params):
    spec_name: Annotated[str, plan.IDENTITY]  # names the tuning DaemonSets and the ConfigMap
    operator_namespace: Annotated[str, plan.IDENTITY]
    # the cluster's MIG strategy: the device plugin re-advertises every MIG pool's devices (disruptions)
    strategy: Annotated[str, Effect("re-layout", "the device plugin advertises the MIG devices under other resource "
                                                 "names (k8s-device-plugin)", ("node-relayout",))]
    layouts: Annotated[dict[str, list[dict]], _RELAYOUT]  # layout name -> mig-parted entries
    pools: Annotated[list[PoolLayer], Effect("re-layout", "each pool's own fields (PoolLayer)",
                                             ("node-relayout", "clocks", "power"))]
    templates: Annotated[dict[str, str], _UNREAD]  # the scripts' text
    relayout_image: Annotated[str | None, _UNREAD] = None  # the Job's image (kubernetes.relayout_image); None: no Job
    namespace: Annotated[str, plan.IDENTITY] = ""  # of the workloads
    workloads: Annotated[list[str], _UNREAD] = []  # runtime deployment: the Deployments (label-nodes.sh retires the others)


def _tuning(host) -> list[GpuTuning]:
    """Per GPU the clocks and power the pool's nodes need, from the host's desired state (the same
    values provision.sh would set), on either runtime: a DGD carries no power annotation (k8s_dgd)."""
    out = []
    for g in desired_state(host).gpus:
        lc, ac = g.locked_clocks, g.application_clocks
        pl = g.power_limit_w
        t = GpuTuning(index=g.index, lgc=f"{lc.graphics_mhz[0]},{lc.graphics_mhz[1]}" if lc else "",
                      lmc=f"{lc.memory_mhz},{lc.memory_mhz}" if lc and lc.memory_mhz else "",
                      ac=f"{ac.memory_mhz},{ac.graphics_mhz}" if ac else "", pl=str(pl) if pl else "")
        if t.lgc or t.lmc or t.ac or t.pl:
            out.append(t)
    return out


def _serves(pool) -> dict[str, list[str]]:
    out: dict[str, set] = {}
    for w in pool.workloads:
        if w.mig_profile is not None:
            out.setdefault(w.mig_profile, set()).add(w.model)
    return {k: sorted(v) for k, v in sorted(out.items())}


def node_layer_params(ctx: LowerContext) -> NodeLayerParams:
    ir = ctx.ir
    k8s = ctx.spec.kubernetes
    dynamo = k8s is not None and k8s.runtime == "dynamo"
    layouts, pools = {}, []
    for name, pool in sorted(ir.pools.items()):
        layouts[pool.layout] = [dict(e) for e in pool.entries]
        pools.append(PoolLayer(name=name, nodes=pool.nodes, selector=dict(pool.selector), layout=pool.layout,
                               mig=any(g.mig for g in pool.gpus), tuning=_tuning(ir.hosts[name]),
                               max_unavailable=max_unavailable(ir, name), serves=_serves(pool),
                               gpu_count=len(pool.gpus)))
    return NodeLayerParams(spec_name=ctx.spec.name,
                           operator_namespace=k8s.gpu_operator_namespace if k8s else "gpu-operator",
                           strategy=cluster_strategy(ir), layouts=layouts, pools=pools, templates=template_digests(),
                           relayout_image=k8s.relayout_image if k8s is not None else None,
                           namespace=namespace_of(ctx.spec),
                           workloads=[] if dynamo else sorted(w.name for p in ir.pools.values() for w in p.workloads))


def render(params: NodeLayerParams) -> dict[str, bytes]:
    """The node-layer files (pure)."""
    config = nodelayer.mig_parted_config(params.layouts)
    problems = nodelayer.mig_parted_problems(config)
    if problems:  # K252 refuses such layouts first; this guards the file itself
        raise ValueError("mig-parted would refuse the layout config: " + "; ".join(problems))
    cm = nodelayer.configmap(params.spec_name, params.operator_namespace, params.layouts)
    patch_header = (f"# Merge patch of the GPU Operator's ClusterPolicy (the operator's object, not Kiln's): the MIG\n"
                    f"# strategy and the layouts ConfigMap of spec {params.spec_name}. Apply once, and again when it changes:\n"
                    "#   kubectl patch clusterpolicies.nvidia.com " + nodelayer.CLUSTER_POLICY +
                    " --type merge --patch-file node-layer/clusterpolicy-patch.yaml\n")
    pools = [{"name": p.name, "selector": ",".join(f"{k}={v}" for k, v in sorted(p.selector.items())),
              "layout": p.layout, "nodes": p.nodes, "max_unavailable": p.max_unavailable} for p in params.pools]
    script = nodelayer.label_script(params.spec_name, params.operator_namespace, pools, params.namespace,
                                    params.workloads)
    ns = params.operator_namespace
    resources = ["mig-parted-config.yaml", "relayout-rbac.yaml"]
    files = {
        "mig-parted-config.yaml": tree.documents([cm, nodelayer.live_configmap(
            params.spec_name, params.operator_namespace, params.layouts)]).encode(),
        "relayout-rbac.yaml": tree.documents(nodelayer.rbac(params.spec_name, ns,
                                                            params.namespace if params.workloads else None)).encode(),
        "clusterpolicy-patch.yaml": (patch_header + tree.dump(
            nodelayer.cluster_policy_patch(params.spec_name, params.strategy))).encode(),
        "label-nodes.sh": script.encode(),
    }
    if params.relayout_image is not None:
        digest = hashlib.sha256((script + params.relayout_image).encode()).hexdigest()[:8]
        files["relayout-job.yaml"] = tree.documents([
            nodelayer.script_configmap(params.spec_name, ns, script, digest),
            nodelayer.relayout_job(params.spec_name, ns, params.relayout_image, digest,
                                   nodelayer.relayout_deadline_s(pools))]).encode()
        resources.append("relayout-job.yaml")
    files["kustomization.yaml"] = tree.dump(tree.kustomization(resources)).encode()
    files["gpu-operator-values.yaml"] = (
        "# GPU Operator Helm values for spec " + params.spec_name + ": the MIG strategy and the layouts ConfigMap.\n"
        "#   helm upgrade gpu-operator nvidia/gpu-operator -n " + ns + " --reuse-values -f node-layer/gpu-operator-values.yaml\n"
        "# These are cluster-wide: on a cluster shared with other MIG users, their nodes' layouts must be in\n"
        "# the same ConfigMap and their pods must ask for the same strategy's resource names. On a cloud\n"
        "# provider's nodes (e.g. GKE) the GPU Operator's MIG guide adds migManager.env WITH_REBOOT=true.\n"
        + tree.dump(nodelayer.helm_values(params.spec_name, params.strategy))).encode()
    tuning_objects = []
    for p in params.pools:
        by_index = {t.index: t for t in p.tuning}
        gpus = []
        for i in range(p.gpu_count):
            t = by_index.get(i)
            row = t.to_json() if t is not None else {"index": i, "lgc": "", "lmc": "", "ac": "", "pl": ""}
            gpus.append(row)
        tuning = nodelayer.tuning_script(params.spec_name, p.name, gpus)
        files[f"node-tuning-{p.name}.sh"] = tuning.encode()
        if params.relayout_image is not None:
            tuning_objects += nodelayer.tuning_daemonset(params.spec_name, ns, p.name, p.selector,
                                                         params.relayout_image, tuning)
    if tuning_objects:
        files["gpu-tuning.yaml"] = tree.documents(nodelayer.tuning_rbac(params.spec_name, ns) + tuning_objects).encode()
        resources.append("gpu-tuning.yaml")
        files["kustomization.yaml"] = tree.dump(tree.kustomization(resources)).encode()
    return files


class NodeLayer(ActionKind[NodeLayerParams]):
    kind, version, Params = "k8s-node-layer", 1, NodeLayerParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        if not ctx.ir.pools:
            return []
        cause = {"hosts": {n: ctx.spec.hosts[n].model_dump(mode="json") for n in sorted(ctx.ir.pools)},
                 "kubernetes": ctx.spec.kubernetes.model_dump(mode="json") if ctx.spec.kubernetes else None}
        return [self.action(self.kind, node_layer_params(ctx), cause=cause)]

    def run(self, params: NodeLayerParams, ctx: RunContext) -> None:
        if template_digests() != params.templates:
            raise RuntimeError("a k8s template changed after the plan was made; run the build again")
        for name, data in render(params).items():
            path = ctx.out / name
            path.write_bytes(data)
            if name.endswith(".sh"):
                path.chmod(0o755)
        ctx.log.info("%d layout(s) for %d node pool(s), MIG strategy %s", len(params.layouts), len(params.pools),
                     params.strategy)


KIND = NodeLayer()


# --- what a new node layer does to the pools ---------------------------------------------------------
def _gpu_profiles(entries: list[dict]) -> dict:
    """GPU index (or "all") -> Counter of profiles, from mig-parted entries."""
    out: dict = {}
    for e in entries:
        devices = e["devices"] if isinstance(e["devices"], list) else ["all"]
        for d in devices:
            out[d] = Counter(e.get("mig-devices") or {})
    return out


def _layout_change(old_entries: list[dict], new_entries: list[dict]) -> str:
    """`GPUs 0-7: -1g.10gb +1g.20gb`, grouping GPUs with the same change."""
    before, after = _gpu_profiles(old_entries), _gpu_profiles(new_entries)
    if "all" in before or "all" in after:
        gpus = sorted({g for g in list(before) + list(after) if g != "all"})
        b_all, a_all = before.get("all"), after.get("all")
        before = {g: before.get(g, b_all if b_all is not None else Counter()) for g in gpus} if gpus else before
        after = {g: after.get(g, a_all if a_all is not None else Counter()) for g in gpus} if gpus else after
    changes: dict[str, list] = {}
    for g in sorted(set(before) | set(after), key=str):
        b, a = before.get(g, Counter()), after.get(g, Counter())
        if b == a:
            continue
        parts = [f"-{p}" + (f"x{n}" if n > 1 else "") for p, n in sorted((b - a).items())]
        parts += [f"+{p}" + (f"x{n}" if n > 1 else "") for p, n in sorted((a - b).items())]
        changes.setdefault(" ".join(parts) or "MIG mode", []).append(g)
    return "; ".join(f"GPU{'s' * (len(gs) > 1)} {_ranges(gs)}: {what}" for what, gs in changes.items())


def _ranges(values: list) -> str:
    if any(not isinstance(v, int) for v in values):
        return ",".join(map(str, values))
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ",".join(out)


def _tuning_text(tuning: list[GpuTuning], what: str) -> str:
    values = sorted({_clocks_text(t) if what == "clocks" else t.pl for t in tuning} - {""})
    return "; ".join(values) if values else "not set"


def _mhz(pair: str) -> str:
    """nvidia-smi's "min,max" lock as the spec gave it: one clock when both are the same."""
    lo, _, hi = pair.partition(",")
    return f"{lo} MHz" if lo == hi or not hi else f"{lo}-{hi} MHz"


def _clocks_text(t: GpuTuning) -> str:
    parts = ([f"locked graphics {_mhz(t.lgc)}"] if t.lgc else []) + ([f"locked memory {_mhz(t.lmc)}"] if t.lmc else [])
    if t.ac:
        memory, _, graphics = t.ac.partition(",")
        parts.append(f"application clocks memory {memory} MHz, graphics {graphics} MHz")
    return ", ".join(parts)


def _destroyed(old_entries: list[dict], new_entries: list[dict], serves: dict[str, list[str]]) -> str:
    """Every instance mig-parted destroys on a node: all of each GPU whose layout changes, the
    neighbours of a changed profile included (pkg/mig/config/config.go ClearMigConfig)."""
    before, after = _gpu_profiles(old_entries), _gpu_profiles(new_entries)
    gpus = sorted({g for g in list(before) + list(after) if g != "all"}) or ["all"]
    groups: dict[str, list] = {}
    for g in gpus:
        b = before.get(g, before.get("all", Counter()))
        if b == after.get(g, after.get("all", Counter())) or not b:
            continue
        what = ", ".join(f"{prof}" + (f" x{n}" if n > 1 else "") + (f" ({'/'.join(serves[prof])})" if prof in serves else "")
                         for prof, n in sorted(b.items()))
        groups.setdefault(what, []).append(g)
    return "; ".join(f"GPU{'s' * (len(gs) > 1)} {_ranges(gs)}: {what}" for what, gs in groups.items()) or "none"


def _procedure(p: PoolLayer, job: bool) -> str:
    how = "the Job node-layer/relayout-job.yaml (Argo CD sync wave -1)" if job else "sh node-layer/label-nodes.sh"
    return (f"{p.nodes} node(s), {p.max_unavailable} at a time: cordon, evict the node's GPU pods "
            "(PodDisruptionBudgets hold), relabel, wait for the MIG manager's success, uncordon; run by " + how)


def disruptions(old: NodeLayerParams | None, new: NodeLayerParams) -> list[Disruption]:
    """Per node pool: MIG re-layouts (node by node: the MIG manager does not evict user pods, the
    re-layout script does), a new MIG strategy, and clocks or power that only the node-tuning
    script applies: the kinds its changed fields declare (PoolLayer; the strategy is the cluster's),
    each worded where it changes anything. Pure."""
    before = {p.name: p for p in (old.pools if old is not None else [])}
    # what the cluster's own fields declare (the MIG strategy re-advertises every MIG pool's devices)
    # concerns every pool; `pools` is compared pool by pool
    cluster = changed_kinds(old, new, but=("pools",)) if old is not None else []
    out: list[Disruption] = []
    for p in new.pools:
        prev = before.get(p.name)
        kinds = cluster + [k for k in changed_kinds(prev, p) if k not in cluster]
        out += [Disruption(p.name, POOL, kind, detail) for kind, detail in worded(kinds, _WORDS, old, new, prev, p)]
    # a pool that leaves the spec: its workloads are pruned (k8s-release); its nodes keep their layout,
    # which stays in the live ConfigMap while a node carries it (label-nodes.sh), so nothing fails
    return out


def _relayout(old: NodeLayerParams | None, new: NodeLayerParams, prev: PoolLayer | None, p: PoolLayer) -> str | None:
    """The pool's layout change, and the MIG strategy's beside it: a strategy flip with a new layout
    changes both what the nodes carry and the resource names the pods request (review N4)."""
    layout = _layout_step(old, new, prev, p)
    strategy = (f"MIG strategy {old.strategy} -> {new.strategy}: apply node-layer/clusterpolicy-patch.yaml; the device "
                "plugin advertises the MIG devices under new resource names"
                if prev is not None and old is not None and old.strategy != new.strategy and p.mig else None)
    return "; ".join(x for x in (layout, strategy) if x) or None


def _layout_step(old: NodeLayerParams | None, new: NodeLayerParams, prev: PoolLayer | None, p: PoolLayer) -> str | None:
    job = new.relayout_image is not None
    if prev is None and p.layout == ALL_DISABLED:  # label-nodes.sh leaves a node already at it alone
        return (f"layout {ALL_DISABLED}: a node already at it (MIG off, the GPU Operator's default) is left "
                f"alone; the others of its {_procedure(p, job)}")
    if prev is None:
        had = sorted(q.name for q in (old.pools if old is not None else []) if q.layout == p.layout)
        if had:  # e.g. a renamed pool: its nodes are already at the layout, which label-nodes.sh skips
            return (f"layout {p.layout}, the layout of {', '.join(had)} in the base revision: a node already at it "
                    f"(mig.config.state success, as that pool's nodes are) is left alone, nothing evicted; the "
                    f"others of its {_procedure(p, job)}")
        return f"layout {p.layout}: {_procedure(p, job)}"
    if prev.layout != p.layout:
        old_entries = old.layouts.get(prev.layout, [])
        change = _layout_change(old_entries, new.layouts[p.layout])
        return (f"layout {prev.layout} -> {p.layout} ({change}): {_procedure(p, job)}; destroyed on each "
                f"node: {_destroyed(old_entries, new.layouts[p.layout], prev.serves)}")
    if prev.nodes < p.nodes and p.mig:
        return (f"{p.nodes - prev.nodes} new node(s) get layout {p.layout}; the {prev.nodes} already at it are left "
                f"alone: {_procedure(p, job)}")
    if prev.nodes > p.nodes:
        return _scale_in(prev, p)
    return None


def _scale_in(prev: PoolLayer, p: PoolLayer) -> str:
    """Fewer nodes: the tree takes no node out. The workloads scale down at the sync; which pods go is
    the ReplicaSet controller's choice, pods on the nodes that hold most of them first
    (kubernetes pkg/controller/replicaset/replica_set.go getPodsToDelete, controller_utils.go
    ActivePodsWithRanks), not one node's; so a leaving node still runs pods until it is drained."""
    gone = prev.nodes - p.nodes
    label = ", ".join(f"{k}={v}" for k, v in sorted(p.selector.items()))
    return (f"{prev.nodes} -> {p.nodes} node(s): the tree removes no node; after the sync (the workloads scale "
            f"down; the ReplicaSet controller picks the pods it removes across the nodes, not from one) choose "
            f"{gone} node(s) to leave, drain them "
            f"(kubectl drain: PodDisruptionBudgets hold, their pods move into the room the scale-down left on the "
            f"others) and remove the label {label}; until then label-nodes.sh reports {prev.nodes} node(s) "
            f"matching where the spec says {p.nodes}")


def _tuning_change(what: str):
    def word(old: NodeLayerParams | None, new: NodeLayerParams, prev: PoolLayer | None, p: PoolLayer) -> str | None:
        b = _tuning_text(prev.tuning, what) if prev is not None else "not set"
        a = _tuning_text(p.tuning, what)
        if a == b:
            return None
        how = (f"the DaemonSet {new.spec_name}-gpu-tuning-{p.name} applies it on every node through the "
               "driver's nvidia-smi and re-applies it after a driver restart (node label kiln.io/gpu-tuning)"
               if new.relayout_image is not None else
               f"not applied by the manifests (no GPU Operator setting, no relayout_image for the tuning "
               f"DaemonSet); run node-layer/node-tuning-{p.name}.sh on the pool's nodes")
        return f"{b} -> {a}: " + (how if a != "not set" else how.replace("applies it", "restores the default"))
    return word


# how the Kubernetes target words each kind a PoolLayer field declares
_WORDS = {"node-relayout": _relayout, "clocks": _tuning_change("clocks"), "power": _tuning_change("power")}
