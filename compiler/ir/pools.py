"""Node pools: the Kubernetes view of the hosts with `deploy: kubernetes`, derived once (pools pass).

A `deploy: kubernetes` host stands for `node_pool.nodes` identical nodes, each with the host's
GPUs laid out as its `gpus` say, so its serving units (units pass) describe one node. From them
this pass derives what the Kubernetes target needs and the checks read:

  - each GPU's MIG layout as mig-parted counts it (profile -> instances; mig-parted has no
    placement), and the node's named layout: `all-disabled` (the GPU Operator's own name for a
    node without MIG) or `kiln-<10 hex>` from the sha256 of the layout's mig-parted entries, so one
    name stands for one layout wherever it is used and a changed layout is a new name;
  - the MIG strategy the node needs to have its devices advertised (GPU Operator / device plugin:
    `single` only when every GPU of the node is MIG-enabled with one profile, `mixed` otherwise);
  - the workloads: one per (model, device shape) of the pool, whose replicas are the node's units
    of that shape times the node count (one per role and shape for a disaggregated model). Names are stable identities (a rename is a delete and a
    create, i.e. an outage): the model's largest shape on the pool is `<model>-<pool>` whatever
    order the spec lists them in, further shapes are `<model>-<pool>-<shape>`; the lock file's names
    (lock_workloads) win where it has them. Without them a change of the set of shapes can move a
    name (unlocked_shapes: K953; shape_moves: what a change renames, K954).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from compiler import deploy
from compiler.spec.models import DEFAULT_KUBERNETES_VERSION
from compiler.store.canonical import canonical_json

from .migparted import grouped_entries
from .types import Resolved, ServingUnit

ALL_DISABLED = "all-disabled"
POOL_LABEL = "kiln.io/pool"
STRATEGIES = ("none", "single", "mixed")  # in the order each one advertises more layouts


@dataclass(frozen=True)
class GpuLayout:
    """One GPU of a node: its MIG instances as mig-parted counts them; () = MIG disabled."""

    index: int
    profiles: tuple[tuple[str, int], ...]

    @property
    def mig(self) -> bool:
        return bool(self.profiles)


@dataclass(frozen=True)
class PoolWorkload:
    """The replicas of one model on one device shape of a pool."""

    name: str  # object name: <model>-<pool>; -<shape> appended for the model's further shapes there
    pool: str
    model: str
    mig_profile: str | None  # None: whole GPUs
    gpus: int  # devices per replica: 1 for a MIG instance, tp*pp whole GPUs otherwise
    per_node: int
    replicas: int
    units: tuple[str, ...]  # the node's units this workload replicates
    path: tuple  # spec path of its first unit (diagnostics)
    role: str | None = None  # disaggregated serving: the role of its units (prefill or decode)


@dataclass(frozen=True)
class NodePool:
    name: str
    nodes: int
    selector: Mapping[str, str]
    gpu_product: str | None
    gpus: tuple[GpuLayout, ...]  # every GPU of a node, 0..count-1
    entries: tuple[Mapping, ...]  # the layout as mig-parted `mig-configs` entries
    layout: str  # the mig-parted config name the nodes are labelled with
    needs_strategy: str  # none | single | mixed
    workloads: tuple[PoolWorkload, ...] = field(default=())

    @property
    def selector_text(self) -> str:
        """The selector as `kubectl -l` takes it."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))


def layout_entries(gpus: tuple[GpuLayout, ...]) -> list[dict]:
    """mig-parted `mig-configs` entries for a node (api/spec/v1 MigConfigSpec): GPUs with the same
    layout grouped by index; a node without MIG is one `devices: all` entry."""
    if not any(g.mig for g in gpus):
        return [{"devices": "all", "mig-enabled": False}]
    return grouped_entries((g.index, g.profiles) for g in gpus)


def layout_name(entries: list[dict]) -> str:
    if entries == [{"devices": "all", "mig-enabled": False}]:
        return ALL_DISABLED
    return "kiln-" + hashlib.sha256(canonical_json(entries)).hexdigest()[:10]


def needed_strategy(gpus: tuple[GpuLayout, ...]) -> str:
    """The least MIG strategy under which the device plugin advertises every device of the node:
    with `single` every GPU must be MIG-enabled and all instances share one profile
    (NVIDIA/k8s-device-plugin internal/rm: single maps every MIG device to nvidia.com/gpu and
    refuses a node whose MIG devices differ)."""
    if not any(g.mig for g in gpus):
        return "none"
    profiles = {p for g in gpus for p, _ in g.profiles}
    return "single" if all(g.mig for g in gpus) and len(profiles) == 1 else "mixed"


def resource_name(strategy: str, mig_profile: str | None) -> str | None:
    """The extended resource a replica requests: whole GPUs and MIG devices under `single` are
    `nvidia.com/gpu`; under `mixed` a MIG device is `nvidia.com/mig-<profile>` with `+` written `.`
    (NVIDIA/k8s-device-plugin internal/rm/rm.go AddDefaultResourcesToConfig). None: the strategy
    does not advertise MIG devices (`none`)."""
    if mig_profile is None or strategy == "single":
        return "nvidia.com/gpu"
    if strategy == "mixed":
        return "nvidia.com/mig-" + mig_profile.replace("+", ".")
    return None


def shape_slug(mig_profile: str | None, gpus: int) -> str:
    """A name fragment for a device shape: 3g.40gb -> 3g-40gb, 1g.10gb+me -> 1g-10gb-me, 8 GPUs -> 8gpu."""
    if mig_profile is None:
        return f"{gpus}gpu"
    return "".join(c if c.isalnum() else "-" for c in mig_profile.lower())


def _largest_first(shape: tuple) -> tuple:
    """(model, role, MIG profile or None, GPUs): whole GPUs first (more first), then MIG profiles by
    memory, then compute slices (3g.40gb before 1g.10gb), then by name."""
    _, _, profile, gpus = shape
    if profile is None:
        return (*shape[:2], 0, -gpus, 0, 0, "")
    m = re.match(r"(\d+)g\.(\d+)gb", profile)
    compute, memory = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    return (*shape[:2], 1, 0, -memory, -compute, profile)


def _gpu_layouts(ir: Resolved, host) -> tuple[GpuLayout, ...]:
    per_gpu: dict[int, Counter] = {}
    for a_idx, slots in host.assignment_slots.items():
        for g in host.spec.gpus[a_idx].indexes:
            per_gpu[g] = Counter(s.instance.profile for s in slots)
    return tuple(GpuLayout(i, tuple(sorted(per_gpu.get(i, Counter()).items()))) for i in range(host.spec.count))


def _workloads(pool: str, nodes: int, units: list[ServingUnit], known_models,
               locked: Mapping[str, tuple[str, ...]] | None = None) -> tuple[PoolWorkload, ...]:
    """`locked`: the lock file's names on this pool (lock_workloads)."""
    # a disaggregated model's roles are workloads of their own: <model>-<pool>-<role>[-<shape>]
    groups: dict[tuple[str, str, str | None, int], list[ServingUnit]] = {}
    for u in units:
        if u.model not in known_models:
            continue
        profile = u.mig.instance.profile if u.mig is not None else None
        groups.setdefault((u.model, u.role or "", profile, 1 if profile else len(u.gpu_indexes)), []).append(u)
    # (model, role) -> the shape whose workload has the bare name: the largest device (review M7), a
    # function of the set of shapes, so reordering the spec's entries renames nothing
    primary: dict[tuple[str, str], tuple] = {}
    for shape in sorted(groups, key=_largest_first):
        primary.setdefault(shape[:2], shape)
    for (model, role), shape in list(primary.items()):
        # the lock keeps names where shapes come and go: its bare shape keeps the bare name; while it
        # is gone, a shape the lock names with its suffix keeps that, a new shape takes the bare name
        # (a changed profile: the workload rolls)
        names = (locked or {}).get(f"{model}/{role}" if role else model)
        if names is None:
            continue
        mine = {shape_slug(s[2], s[3]): s for s in groups if s[:2] == (model, role)}
        new = sorted((s for slug, s in mine.items() if slug not in names), key=_largest_first)
        primary[(model, role)] = mine.get(names[0]) or (new[0] if new else None)
    out = []
    for (model, role, profile, gpus), members in sorted(groups.items(),
                                                        key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "", kv[0][3])):
        first = primary[(model, role)] == (model, role, profile, gpus)
        base = f"{model}-{pool}-{role}" if role else f"{model}-{pool}"
        name = base if first else f"{base}-{shape_slug(profile, gpus)}"
        out.append(PoolWorkload(name, pool, model, profile, gpus, len(members), len(members) * nodes,
                                tuple(u.id for u in members), members[0].path, role or None))
    return tuple(out)


def pools_pass(ir: Resolved) -> Resolved:
    """The node pools of the hosts that deploy to Kubernetes."""
    pools = {}
    for name, host in ir.hosts.items():
        if not deploy.of(host.spec).node_pool:
            continue
        np = host.spec.node_pool
        nodes = np.nodes if np is not None else 1
        selector = dict(sorted((np.selector if np is not None and np.selector else {POOL_LABEL: name}).items()))
        gpus = _gpu_layouts(ir, host)
        entries = layout_entries(gpus)
        pools[name] = NodePool(name, nodes, selector, np.gpu_product if np is not None else None, gpus,
                               tuple(entries), layout_name(entries), needed_strategy(gpus),
                               _workloads(name, nodes, ir.host_units(name), ir.models,
                                          ir.locked_workloads.get(name, {})))
    return dataclasses.replace(ir, pools=pools)


def cluster_strategy(ir: Resolved) -> str:
    """The MIG strategy of the cluster: the spec's, or the least that serves every pool."""
    k8s = ir.spec.kubernetes
    if k8s is not None and k8s.mig_strategy is not None:
        return k8s.mig_strategy
    return max((p.needs_strategy for p in ir.pools.values()), key=STRATEGIES.index, default="none")


def mounts_weights(ir: Resolved, pool: str) -> bool:
    """The pool's pods mount each model's weights image (`node_pool.weights: image-volume`, the
    default) instead of finding the checkpoints in the pool's serving image."""
    if pool not in ir.pools:
        return False  # a host: its serving image carries the checkpoints
    np = ir.hosts[pool].spec.node_pool
    return np is None or np.weights == "image-volume"


def kubernetes_version(ir: Resolved) -> str:
    k8s = ir.spec.kubernetes
    return k8s.version if k8s is not None else DEFAULT_KUBERNETES_VERSION


def lock_workloads(ir) -> dict[str, dict[str, tuple[str, ...]]]:
    """pool -> model[/role] -> [the shape of its bare-named workload, its suffixed shapes], for every
    model on a pool (the lock file's "workloads", compiler/ir/lockfile.py, as `kiln lock` writes it). A one-shape model is recorded too: a larger shape it gains later
    would otherwise take the bare name from it. A model whose bare-named shape left keeps that
    shape first: the name stays free for it."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for pname, pool in ir.pools.items():
        shapes: dict[str, tuple[str | None, list[str]]] = {}
        for w in pool.workloads:
            key = f"{w.model}/{w.role}" if w.role else w.model
            bare, rest = shapes.get(key, (None, []))
            slug = shape_slug(w.mig_profile, w.gpus)
            bare_name = f"{w.model}-{pname}-{w.role}" if w.role else f"{w.model}-{pname}"
            shapes[key] = (slug, rest) if w.name == bare_name else (bare, rest + [slug])
        old = ir.locked_workloads.get(pname, {})
        for key, (bare, rest) in sorted(shapes.items()):
            out.setdefault(pname, {})[key] = (bare or old[key][0], *sorted(rest))
    return out


def unlocked_shapes(ir) -> list[tuple[str, str, str | None, tuple[PoolWorkload, ...]]]:
    """(pool, model, role, its workloads largest shape first) for each model with several shapes on
    a pool whose names the lock does not record: the bare name is the largest shape's, so a change
    of the set of shapes can move a name to another shape (review M7)."""
    out = []
    for pname, pool in sorted(ir.pools.items()):
        mine: dict[tuple[str, str], list[PoolWorkload]] = {}
        for w in pool.workloads:
            mine.setdefault((w.model, w.role or ""), []).append(w)
        locked = ir.locked_workloads.get(pname, {})
        for (model, role), ws in sorted(mine.items()):
            if len(ws) > 1 and (f"{model}/{role}" if role else model) not in locked:
                ws.sort(key=lambda w: _largest_first((model, role, w.mig_profile, w.gpus)))
                out.append((pname, model, role or None, tuple(ws)))
    return out


@dataclass(frozen=True)
class ShapeMove:
    """A device shape of a model whose workload has another name after a change."""

    pool: str
    model: str
    shape: str  # the MIG profile, or `<n> GPU(s)`
    before: PoolWorkload  # its workload before the change
    after: PoolWorkload  # and after
    old_name_on: str | None  # the shape the old name serves after the change; None: it is pruned
    new_name_on: str | None  # the shape the new name served before the change; None: a new workload


def shape_text(profile: str | None, gpus: int) -> str:
    return profile if profile is not None else f"{gpus} GPU(s)"


def shape_moves(before: Mapping[str, NodePool], after: Mapping[str, NodePool]) -> list[ShapeMove]:
    """The shapes whose workload is renamed from one revision's pools to the other's: a Deployment's
    name is its identity, so a moved name is a deletion and a roll, not an update."""
    out = []
    for pname in sorted(set(before) & set(after)):
        old = {(w.model, w.role or "", w.mig_profile or "", w.gpus): w for w in before[pname].workloads}
        new = {(w.model, w.role or "", w.mig_profile or "", w.gpus): w for w in after[pname].workloads}
        old_named = {w.name: shape_text(w.mig_profile, w.gpus) for w in before[pname].workloads}
        new_named = {w.name: shape_text(w.mig_profile, w.gpus) for w in after[pname].workloads}
        for key in sorted(set(old) & set(new)):
            a, b = old[key], new[key]
            if a.name != b.name:
                out.append(ShapeMove(pname, a.model, shape_text(a.mig_profile, a.gpus), a, b,
                                     new_named.get(a.name), old_named.get(b.name)))
    return out
