"""Kx5x: rules that exist only for the Kubernetes target (hosts with `deploy: kubernetes`).

Their codes take the tens digit 5 of the family the rule belongs to (compiler/diagnostics/rules.py):
K15x spec structure, K25x MIG, K75x parallelism, K85x toolchain, K95x references and names. They
read the node pools the pools pass derived (compiler/ir/pools.py).
"""

from __future__ import annotations

from typing import Iterable

from compiler.catalog import dynamo as dynamo_catalog
from compiler.catalog.types import WEAK_STATUSES
from compiler.diagnostics import Diagnostic, Severity
from compiler.diagnostics.rules import Rule
from compiler.ir.k8s_names import dgd_component, mig_configmap_name, name_problem, options_configmap_prefix
from compiler.ir.pools import STRATEGIES

from .base import Check, CheckContext, weak_fact_note

ORDER = 95  # after the host rules: a pool's own faults (unknown profiles, ...) are reported by them


def _runtime(ctx: CheckContext) -> str:
    k8s = ctx.ir.kubernetes
    return k8s.runtime if k8s is not None else "deployment"


class KubernetesNeedsImage(Check):
    """A node pool serves models, but the spec has no `image:`.

    The pods of a node pool run Kiln's serving image (its checkpoints and Triton repository), pinned
    by the digest `image/<pool>` pushes to `image.repository`; without a repository there is no
    image to run.
    """

    code = "K151"
    name = "kubernetes-needs-image"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.ir.image is not None:
            return
        for name, pool in ctx.ir.pools.items():
            if pool.workloads:
                yield ctx.diag(self, ("hosts", name, "deploy"),
                               f"node pool {name!r} serves models, but the spec has no `image:` for its pods to run",
                               help="add `image: {repository: registry.example.com/team/<name>}`")


class PersistenceOnKubernetes(Check):
    """`persistence` on a node pool (`deploy: kubernetes`), where it has no effect.

    On hosts Kiln's provisioning script sets the GPUs' persistence mode (`nvidia-smi -pm`). A node
    pool's tree sets none: the nodes' driver installation (the GPU Operator's driver container, or
    the node image) decides it. So `persistence: false` would change nothing on the nodes.
    """

    code = "K551"
    name = "persistence-on-kubernetes"
    severity = Severity.WARNING
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name in ctx.ir.pools:
            host = ctx.host(name)
            if host is not None and "persistence" in host.model_fields_set:
                yield ctx.diag(self, ("hosts", name, "persistence"),
                               f"persistence of node pool {name!r} has no effect: Kiln's Kubernetes tree does not "
                               "set the GPUs' persistence mode; the nodes' driver installation does",
                               help="remove `persistence`, and set it where the nodes' driver is installed")


class MigStrategyMismatch(Check):
    """The declared MIG strategy cannot advertise a node pool's MIG devices.

    The GPU Operator's device plugin advertises MIG devices by `spec.mig.strategy` of the
    ClusterPolicy: `none` advertises none, `single` maps them all to `nvidia.com/gpu` and accepts a
    node only when every GPU is MIG-enabled with one profile, `mixed` advertises each profile as
    `nvidia.com/mig-<profile>` (NVIDIA/k8s-device-plugin internal/rm). A node with several profiles,
    or MIG next to whole GPUs, needs `mixed`. Leave `kubernetes.mig_strategy` out to get the least
    strategy that serves every pool.
    """

    code = "K251"
    name = "mig-strategy-mismatch"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        k8s = ctx.ir.kubernetes
        if k8s is None or k8s.mig_strategy is None:
            return
        declared = STRATEGIES.index(k8s.mig_strategy)
        for name, pool in sorted(ctx.ir.pools.items()):
            if STRATEGIES.index(pool.needs_strategy) <= declared:
                continue
            profiles = sorted({p for g in pool.gpus for p, _ in g.profiles})
            whole = [g.index for g in pool.gpus if not g.mig]
            why = (f"its nodes have MIG profiles {', '.join(profiles)}" +
                   (f" and whole GPUs ({', '.join(map(str, whole))})" if whole else ""))
            yield ctx.diag(self, ("kubernetes", "mig_strategy"),
                           f"MIG strategy {k8s.mig_strategy!r} cannot advertise the devices of node pool {name!r}: "
                           f"{why}, which needs {pool.needs_strategy!r}",
                           help=f"set `mig_strategy: {pool.needs_strategy}`, or leave it out")


class MigProfileRefusedByMigParted(Check):
    """mig-parted, which the GPU Operator's MIG manager runs, cannot parse this MIG profile name.

    mig-parted reads profile names as `[<C>c.]<G>g.<GB>gb[+<attribute>]` with slice counts 1, 2, 3,
    4, 6, 7 or 8 and one attribute, `me` (NVIDIA/mig-parted pkg/types/mig_profile.go,
    ParseMigProfile). Profiles such as `1g.24gb+me.all`, `1g.24gb-me` or `+gfx` exist on newer GPUs
    and drivers, but a node labelled with a layout that holds one ends in state `failed`. Serve
    this model on a host (`deploy: host`: provision.sh creates the instance with nvidia-smi), or
    pick a profile mig-parted knows.
    """

    code = "K252"
    name = "mig-profile-refused-by-mig-parted"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.ir.migparted import mig_profile_problem

        for name in sorted(ctx.ir.pools):
            host = ctx.ir.hosts[name]
            for a_idx, slots in sorted(host.assignment_slots.items()):
                for slot in slots:
                    problem = mig_profile_problem(slot.instance.profile)
                    if slot.profile is not None and problem:
                        yield ctx.diag(self, ("hosts", name, "gpus", a_idx, "mig", slot.instance_index, "profile"),
                                       f"the GPU Operator's MIG manager cannot create {slot.instance.profile!r}: "
                                       f"mig-parted refuses the name ({problem})",
                                       help="mig-parted knows [<C>c.]<G>g.<GB>gb and the `+me` attribute; use such "
                                            "a profile, or `deploy: host` for this GPU")


class ParallelGroupExceedsNode(Check):
    """A model served on a node pool needs more GPUs per replica than a node of the pool has.

    A pod's devices all come from one node, and Kiln writes no multinode workloads (Dynamo's
    `multinode`, LeaderWorkerSet): a replica's tensor- and pipeline-parallel group (tp * pp GPUs)
    must fit one node's `count` GPUs.
    """

    code = "K751"
    name = "parallel-group-exceeds-node"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        reported: set[str] = set()
        for name, pool in sorted(ctx.ir.pools.items()):
            count = ctx.ir.hosts[name].spec.count
            for u in ctx.ir.host_units(name):
                m = ctx.model(u.model)
                if m is None or u.model in reported:
                    continue
                par = m.parallelism_of(u.role)  # a disaggregated role's servers take the role's
                group = par.tp * par.pp
                if group > count:
                    reported.add(u.model)
                    where = (("models", u.model, "serving", "disaggregated", u.role, "parallelism")
                             if par is not m.parallelism else ("models", u.model, "parallelism"))
                    yield ctx.diag(self, where,
                                   f"model {u.model!r} needs tp*pp = {group} GPUs per replica, more than the {count} "
                                   f"a node of pool {name!r} has: a pod's GPUs come from one node",
                                   help=f"serve it on nodes with {group} GPUs, or lower tp*pp to {count} or less")


class MixedGpuCountsOnPool(Check):
    """A node pool's pods take different numbers of whole GPUs, and the scheduler cannot keep the
    spec's per-node layout.

    Whole GPUs are one extended resource, `nvidia.com/gpu`; the device plugin hands a pod any free
    GPUs of the node the scheduler picked, and the scheduler fits a pod on any node with that many
    free (kube-scheduler NodeResourcesFit). Nothing in the tree ties a pod to the GPU indexes or the
    node the spec gives it. So pods of fewer GPUs can fill a node that a larger pod needed: two 8-GPU
    nodes, each meant for one tp=4 pod and four 1-GPU pods; five 1-GPU pods land on one node (3 GPUs
    free), the other takes a tp=4 pod and the last three (1 free), and the second tp=4 pod stays
    Pending with `Insufficient nvidia.com/gpu` (review N12). It depends on the order
    pods are created and rescheduled (a first sync, a drain, a node's restart, a rollout), so the tree
    may come up, and stops serving at full size later: a warning. `kiln plan --base` refuses a change
    that sticks this way (K858). Reported only where it can happen: a stuck pod of L GPUs needs every
    node below L free GPUs, N * (L - 1 - spare) >= L for N nodes with `spare` unassigned whole GPUs
    each; one node, or enough spare GPUs, never strands a pod.

    Fix: serve models of different GPU counts on node pools of their own, give them the same tp*pp,
    or leave GPUs of each node unassigned (the number is in the message). MIG instances are not
    affected: each profile is a resource of its own under the `mixed` strategy.
    """

    code = "K752"
    name = "mixed-gpu-counts-on-pool"
    severity = Severity.WARNING
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for pname, pool in sorted(ctx.ir.pools.items()):
            whole = [w for w in pool.workloads if w.mig_profile is None]
            counts = sorted({w.gpus for w in whole})
            if len(counts) < 2:
                continue
            largest = counts[-1]
            spare = sum(1 for g in pool.gpus if not g.mig) - sum(w.gpus * w.per_node for w in whole)
            if pool.nodes * (largest - 1 - spare) < largest:
                continue
            enough = next(n for n in range(spare, largest) if pool.nodes * (largest - 1 - n) < largest)
            names = {n: ", ".join(sorted(w.name for w in whole if w.gpus == n)) for n in counts}
            shapes = " and ".join(f"{n} GPU(s) ({names[n]})" for n in reversed(counts))
            yield ctx.diag(self, ("hosts", pname), key=True,
                           message=f"node pool {pname!r} runs pods of {shapes}: the scheduler places them by free "
                                   f"GPUs, not by the spec's per-node layout, so smaller pods can take the GPUs a "
                                   f"{largest}-GPU pod of {names[largest]} needs, which then stays Pending",
                           help=f"serve the models of different GPU counts on node pools of their own, give "
                                f"them the same tp*pp, or leave {enough} GPU(s) of each node unassigned")


class DynamoTensorrtLlmMismatch(Check):
    """The Dynamo release runs another TensorRT-LLM than `toolchain.tensorrt_llm`.

    Each Dynamo release pins one TensorRT-LLM release candidate in its tensorrtllm-runtime image
    (v1.6.x: 1.3.0rc29). Its `dynamo.trtllm` worker builds the LLM API from the options file
    Kiln writes for `toolchain.tensorrt_llm`; the options are a strict model whose fields change
    between release candidates, so an unknown field stops the worker at start on the GPU node. Pin
    the TensorRT-LLM of the Dynamo release, or pick the release that runs yours.
    """

    code = "K851"
    name = "dynamo-tensorrt-llm-mismatch"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        k8s = ctx.ir.kubernetes
        if k8s is None or k8s.runtime != "dynamo" or k8s.dynamo is None or not ctx.ir.pools:
            return
        version = k8s.dynamo.version
        rel = dynamo_catalog.release(version)
        path = ("kubernetes", "dynamo", "version")
        if rel is None:
            yield ctx.diag(self, path, f"Kiln has no record of the TensorRT-LLM that Dynamo {version} runs",
                           severity=Severity.WARNING,
                           help=f"known Dynamo lines: {', '.join(dynamo_catalog.known_lines())}; check that its "
                                f"tensorrtllm-runtime image carries TensorRT-LLM {ctx.ir.toolchain.tensorrt_llm}")
            return
        if rel.tensorrt_llm != ctx.ir.toolchain.tensorrt_llm:
            notes = [weak_fact_note(f"the TensorRT-LLM pin of Dynamo {rel.line}", rel.status,
                                    dynamo_catalog.source())] if rel.status in WEAK_STATUSES else []
            yield ctx.diag(self, path,
                           f"Dynamo {version} runs TensorRT-LLM {rel.tensorrt_llm}, but the LLM-API options are written "
                           f"for toolchain.tensorrt_llm {ctx.ir.toolchain.tensorrt_llm}",
                           help=f"set toolchain.tensorrt_llm: \"{rel.tensorrt_llm}\", or the Dynamo release that "
                                f"runs {ctx.ir.toolchain.tensorrt_llm}", notes=notes)


class DynamoNeedsLlmapiTarget(Check):
    """Runtime `dynamo` serves the `llmapi` target only.

    Dynamo's TensorRT-LLM worker (`python3 -m dynamo.trtllm`) loads a Hugging Face checkpoint with
    the LLM API and its options file; it does not run the engine target's Triton ensemble.
    """

    code = "K852"
    name = "dynamo-needs-llmapi-target"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if _runtime(ctx) == "dynamo" and ctx.ir.pools and ctx.target != "llmapi":
            yield ctx.diag(self, ("kubernetes", "runtime"),
                           f"runtime dynamo cannot serve the {ctx.target!r} target",
                           help="use `target: llmapi`, or `runtime: deployment` (Triton)")


class DynamoNeedsRuntimeImage(Check):
    """Runtime `dynamo` needs `image.base`: Dynamo's tensorrtllm-runtime image, pinned by digest.

    The worker pods run Kiln's serving image of their pool, and the `dynamo.trtllm` worker must be
    in it; the default base, `toolchain.triton_image`, has no Dynamo. The frontend runs the base
    itself.
    """

    code = "K853"
    name = "dynamo-needs-runtime-image"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if _runtime(ctx) != "dynamo" or not any(p.workloads for p in ctx.ir.pools.values()):
            return
        if ctx.ir.image is not None and ctx.ir.image.base is not None:
            return
        version = ctx.ir.kubernetes.dynamo.version if ctx.ir.kubernetes.dynamo else "<version>"
        yield ctx.diag(self, ("image",) if ctx.ir.image is not None else ("kubernetes", "runtime"),
                       "runtime dynamo needs `image.base` to be Dynamo's tensorrtllm-runtime image: the default "
                       "base (toolchain.triton_image) has no dynamo.trtllm worker",
                       help=f"image: {{repository: ..., base: nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{version}"
                            "@sha256:<digest>}")


class KubernetesNameInvalid(Check):
    """A Kubernetes object Kiln derives from the spec would get an invalid name.

    Workloads are named `<model>-<pool>` (plus the device shape for a model's further shapes on one
    pool), Services `<model>` and DynamoGraphDeployment children `<model>-<component>`; object
    names are DNS labels of at most 63 characters, and a Service name must start with a letter
    (apimachinery validation). Shorten the model or pool name.
    """

    code = "K951"
    name = "kubernetes-name-invalid"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if not ctx.ir.pools:
            return
        runtime = _runtime(ctx)
        seen: set[tuple[str, str]] = set()

        def check(name: str, kind: str, path: tuple):
            problem = name_problem(name, kind)
            if problem and (kind, name) not in seen:
                seen.add((kind, name))
                yield ctx.diag(self, path, f"the {kind} {name!r} would have an invalid name: {problem}", key=True,
                               help="rename the model so that it starts with a letter" if "start" in problem
                               else "shorten the model or node pool name")

        yield from check(mig_configmap_name(ctx.ir.name), "ConfigMap", ("name",))
        for pname, pool in sorted(ctx.ir.pools.items()):
            for w in pool.workloads:
                if runtime == "deployment":
                    yield from check(w.name, "Deployment", ("hosts", pname))
                    yield from check(w.model, "Service", ("models", w.model))
                    continue
                # the operator names a component's objects <dgd>-<component> (compiler/targets/kubernetes/k8s_dgd.py
                # names the components), and the options ConfigMap is <model>-llm-api-options-<8 hex>
                component = dgd_component(w.model, w.name)
                yield from check(f"{w.model}-{component}", "DynamoGraphDeployment component", ("hosts", pname))
                yield from check(f"{w.model}-frontend", "DynamoGraphDeployment component", ("models", w.model))
                yield from check(options_configmap_prefix(w.model) + "0" * 8, "ConfigMap", ("models", w.model))


class NodePoolsOverlap(Check):
    """Two node pools select the same nodes.

    A pool's nodes are the nodes that carry all of its selector's labels. When one pool's selector
    is part of another's, every node of the second pool is also a node of the first: the
    node-label command would give those nodes both layouts in turn, and the first pool's pods
    would land on the second pool's nodes. Give each pool a label of its own.
    """

    code = "K952"
    name = "node-pools-overlap"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        pools = sorted(ctx.ir.pools.values(), key=lambda p: p.name)
        for i, a in enumerate(pools):
            for b in pools[i + 1:]:
                sa, sb = set(a.selector.items()), set(b.selector.items())
                if sa <= sb or sb <= sa:
                    wider, narrower = (a, b) if sa <= sb else (b, a)
                    spec = ctx.host(b.name)
                    path = ("hosts", b.name, "node_pool", "selector") if spec.node_pool and spec.node_pool.selector \
                        else ("hosts", b.name)
                    yield ctx.diag(self, path,
                                   f"node pools {a.name!r} and {b.name!r} select the same nodes: every node that "
                                   f"matches {narrower.selector_text} also matches {wider.selector_text}",
                                   help="give each pool a node label of its own in `node_pool.selector`")


class DynamoGroveNameTooLong(Check):
    """A DynamoGraphDeployment component name is too long for Dynamo's Grove pathway.

    With Grove enabled, Dynamo's admission webhook refuses a DynamoGraphDeployment whose name and
    component name together exceed 45 characters (ai-dynamo/dynamo deploy/operator/internal/
    webhook/validation/dynamographdeployment.go, MaxCombinedGroveResourceNameLength; see
    catalog/data/k8s_controllers.json). Kiln names a model's DGD `<model>` and its workers
    `worker-<pool>[-<shape>]`. Without Grove the check does not apply; shorten the model or pool
    name to be safe on either pathway.
    """

    code = "K854"
    name = "dynamo-grove-name-too-long"
    severity = Severity.WARNING
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.catalog import k8s_controllers

        if _runtime(ctx) != "dynamo":
            return
        limit = k8s_controllers.grove_name_max()
        for pname, pool in sorted(ctx.ir.pools.items()):
            for w in pool.workloads:
                component = dgd_component(w.model, w.name)
                if len(w.model) + len(component) > limit:
                    yield ctx.diag(self, ("hosts", pname), key=True,
                                   message=f"DGD {w.model!r} with component {component!r} is "
                                           f"{len(w.model) + len(component)} characters together; Dynamo's webhook "
                                           f"refuses more than {limit} when the operator runs with Grove",
                                   help="shorten the model or node pool name")


class RolloutPacedByLockedShape(Check):
    """The lock file records a Deployment's pods at another device shape than the spec gives them
    (a tp or pp change: big 2 x 8 GPUs -> 4 x 4): the tree paces this change from the lock.

    On a pool with no room to surge, no pod of the new shape fits until the old pods of a node are
    gone, so the Deployment's maxUnavailable is new replicas - (old replicas - old pods on the pool's
    `node_pool.max_unavailable` nodes): Kubernetes' rolling update removes exactly those old pods
    first and keeps the rest, the floor the pool declares (README, "What a change does to the
    running fleet"). That pace suits this change only: run `kiln lock` once it has rolled out and
    commit the lock. Until then every later rollout of the workload takes that many pods at once,
    more than a node's worth of the new shape. Runtime `deployment` only.
    """

    code = "K957"
    name = "rollout-paced-by-locked-shape"
    severity = Severity.WARNING
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.ir.pools import shape_slug, shape_text

        if _runtime(ctx) != "deployment":
            return
        lock = ctx.ir.lock_file or "the lock file"
        for pname, pool in sorted(ctx.ir.pools.items()):
            for w in pool.workloads:
                old = ctx.ir.locked_pods.get(pname, {}).get(w.name)
                if old is None or old["shape"] == shape_slug(w.mig_profile, w.gpus):
                    continue
                yield ctx.diag(self, ("models", w.model), key=True,
                               message=f"{lock} records {w.name!r} as {old['replicas']} pod(s) of {old['shape']} "
                                       f"({old['per_node']} per node); the spec gives {w.replicas} of "
                                       f"{shape_text(w.mig_profile, w.gpus)}: its Deployment's pace comes from the lock (on a "
                                       "pool without room to surge, the pace that removes the old pods of the "
                                       "pool's max_unavailable nodes first)",
                               help="run `kiln lock` once this change has rolled out and commit the lock: until "
                                    "then every rollout of the workload keeps that pace")


class WorkloadNamesFollowShapes(Check):
    """A model serves several device shapes on a node pool, and no lock file records their workload
    names: a later change of the set of shapes can rename a workload, which Kubernetes carries out
    as a deletion and a roll.

    A model's workload on a pool is a Deployment per device shape (MIG profile or GPU count): its
    largest shape is `<model>-<pool>`, the others `<model>-<pool>-<shape>`. Without a lock the names
    follow the set of shapes: removing the largest shape gives the bare name to the next one, so
    Argo CD prunes that shape's Deployment (all its pods stop at once) and rolls the bare-named
    Deployment onto its shape; adding a larger shape takes the bare name from the current one.
    `kiln lock SPEC` records the names in the lock file (`workloads`), and later changes keep them:
    a shape that leaves renames no other, and a new one gets a name of its own. Commit the lock
    file with the spec. `kiln plan --base` reports a rename the change makes (K954). Runtime
    `dynamo` is not concerned: a worker component added or removed is refused by Dynamo's webhook
    whatever its name (K855).
    """

    code = "K953"
    name = "workload-names-follow-shapes"
    severity = Severity.WARNING
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.ir.pools import shape_text, unlocked_shapes

        if _runtime(ctx) != "deployment":
            return
        lock = ctx.ir.lock_file
        for pname, model, role, ws in unlocked_shapes(ctx.ir):
            named = ", ".join(f"{w.name!r} ({shape_text(w.mig_profile, w.gpus)})" for w in ws)
            first, second = ws[0], ws[1]
            who = f"model {model!r}" + (f" ({role})" if role else "")
            yield ctx.diag(self, ("models", model), key=True,
                           message=f"{who} has {len(ws)} device shapes on node pool {pname!r} and "
                                   + (f"{lock} does not record their workload names" if lock else
                                      "no lock file records their workload names")
                                   + f" ({named}): they follow the set of shapes, so removing "
                                   f"{shape_text(first.mig_profile, first.gpus)} renames {second.name!r} to "
                                   f"{first.name!r} (its Deployment pruned, {second.replicas} pod(s) at once, and "
                                   f"{first.name!r} rolled onto {shape_text(second.mig_profile, second.gpus)})",
                           help=f"run `kiln lock {ctx.doc.file}` and commit the lock file with the spec: it keeps "
                                "these names when a shape comes or goes")


class KubernetesUpdateForbidden(Rule):
    """A change cannot be applied to the live objects: a controller refuses the update.

    Reported by `kiln plan --base` (the rule needs the earlier revision), as the plan line
    `recreate: <model> down for ~T`. Dynamo's admission webhook refuses, on a live
    DynamoGraphDeployment, adding or removing a component (a node pool or device shape gained or
    lost by a model), and, from Dynamo 1.6 (read on main; the 1.6.1 release's planner states the
    same), any change of the `dynamo.nvidia.com/gpu-power-limit` annotation and of the GPU count of
    a power-capped worker (ai-dynamo/dynamo deploy/operator/internal/webhook/validation/dynamographdeployment.go; each
    rule with its source and version in catalog/data/k8s_controllers.json). Argo CD's sync then
    fails until the object is deleted and created anew, which takes the model down for a pull and
    a load. Apply such a change in a maintenance window (delete the DGD, then sync), or serve the
    model from a second spec while the first is replaced.
    """

    code = "K855"
    name = "kubernetes-update-forbidden"
    severity = Severity.WARNING


class WorkloadRenamed(Rule):
    """The change gives a model's device shape on a node pool another workload name (`kiln plan
    --base`): without a lock file the largest shape is `<model>-<pool>`, so removing it moves the
    bare name to the next shape, and adding a larger one takes it from the current one.

    A Deployment's name is its identity. When the old name leaves the tree, Argo CD prunes that
    Deployment and all its pods stop at once, while the Deployment that takes the name rolls from
    its shape onto the pruned one's. The plan's simulation shows what that does to capacity (K859
    when a model has no ready pod during it). Fix: run `kiln lock SPEC` on the base revision and
    commit the lock file first (K953 says which models need it): the next change then keeps the
    names, and a shape that leaves renames no other.
    """

    code = "K954"
    name = "workload-renamed"
    severity = Severity.WARNING


class RolloutDoesNotComplete(Rule):
    """The change would not complete on the cluster: played through the controllers that decide it
    (compiler/targets/kubernetes/sim/: the Deployment controller's rolling update, the scheduler, the
    Eviction API under the PodDisruptionBudgets, the MIG manager, Argo CD's sync waves and the
    re-layout Job's script), a rollout or the re-layout reaches a state where nothing can move: new
    pods Pending while the rolling update may remove no old one, an eviction refused past the
    Job's bound, a node left `failed`, a forbidden API call, a DaemonSet's pods refused by the
    namespace's Pod Security level. Argo CD then reports the Application Degraded and retries the
    same failure. Also a change whose node-tuning pods run but lack what their commands need (root,
    CAP_SYS_CHROOT, /dev/nvidia* through privileged): every node of the pool ends
    `kiln.io/gpu-tuning=failed` and its clocks and power are never set.

    Reported by `kiln plan --base` with the simulated timeline and the cause; the fix is worded
    from the cause (sim/report.py STUCK_FIX). New pods without a free device: give the rollout room
    (fewer replicas per node, a pool with a free node), or split the edit in two merges. A change of
    a Deployment's pod shape on a full pool (tp 8 -> 4) completes only when kiln.lock, written on
    the base revision, records the old pods (k8s_deployment.reshape_unavailable): run `kiln lock`
    there first (under Dynamo's managed rolling update it stays refused). A selector no node
    carries, a PodDisruptionBudget that refuses the re-layout's evictions, a Pod Security level or
    Dynamo's webhook that refuses: each its own fix.
    """

    code = "K858"
    name = "rollout-does-not-complete"
    severity = Severity.ERROR


class RolloutTakesModelToZero(Rule):
    """During the change a model served before and after it has no ready pod (the simulated rollout
    of `kiln plan --base`), e.g. when the re-layout evicts pods that can only come back on slices
    that do not exist yet. The plan says from when and for how long.
    """

    code = "K859"
    name = "rollout-takes-model-to-zero"
    severity = Severity.ERROR


class RolloutBelowDeclaredFloor(Rule):
    """During the change a model's ready pods on a node pool fall below the floor the tree declares
    for it there, but not to zero (K859 says that): the simulated rollout of `kiln plan --base`
    keeps fewer pods than the model's PodDisruptionBudgets promise a voluntary disruption leaves.
    The floor is, per budget, the replicas of the workloads it selects less its maxUnavailable
    (Kiln derives that from `node_pool.max_unavailable`: a node batch's pods), summed over the
    model's workloads on the pool; where the two revisions differ, the lesser, compared in devices
    (a change of pod shape, tp 4 -> 8, halves the pods, not the floor) and counted in the base's pods. The message says
    the lowest, the floor, from when and for how long, and the step that took the pods there.

    A warning: the change completes, and serving at the lower capacity for that time is the
    platform team's call. The fix follows the cause: the re-layout Job evicting a node batch
    beside the roll (serve part of the model from another shape or pool, or raise
    node_pool.max_unavailable knowingly), a Deployment's change of pod shape (commit `kiln lock`
    on the base revision first), a Dynamo or Grove worker roll (room to surge), a pruned workload
    (the lock keeps the names); otherwise a maintenance window.
    """

    code = "K450"
    name = "rollout-below-declared-floor"
    severity = Severity.WARNING


class SpecRenamedOnCluster(Rule):
    """The spec's `name` changed while its Kubernetes tree runs (`kiln plan --base`). The name is in
    the tree's identities: the Argo CD Application (`kubernetes.argocd`) is named after it, so the
    renamed tree makes a second Application over the same objects, and the live MIG layouts
    ConfigMap is `<name>-mig-layouts`, which the GPU Operator's helm values name (migManager.config),
    so the re-layout Job would write a ConfigMap mig-manager does not read. No order of a sync
    fixes either, and the plan refuses the rename.

    Keep the name; or retire the old deployment first (delete its Application without cascading:
    `argocd app delete <old> --cascade=false`, then `helm upgrade` the GPU Operator with
    node-layer/gpu-operator-values.yaml of the new tree) and plan the renamed spec as a new one.
    """

    code = "K955"
    name = "spec-renamed-on-cluster"
    severity = Severity.ERROR


class NamespaceMovedOnCluster(Rule):
    """`kubernetes.namespace` changed while the spec's Kubernetes tree runs (`kiln plan --base`). A
    namespace is part of every object's identity: no update moves a Deployment, a
    DynamoGraphDeployment or a Service to another one. Argo CD prunes each workload in the old
    namespace (all its pods stop at once) and creates it in the new one, so every model serves nothing
    until its new pods have pulled and loaded; and each Service gets a new DNS name
    (`<service>.<namespace>.svc`), so clients that name the old one stop resolving it. The plan's
    simulation shows how long each model has no ready pod.

    Keep the namespace; or move in steps: serve the models from the new namespace beside the old
    (a second spec with its own name and the new namespace, on nodes of its own), move the clients to
    the new Service names, then retire the old deployment (delete its Argo CD Application).
    """

    code = "K956"
    name = "namespace-moved-on-cluster"
    severity = Severity.ERROR


class SpecRenamedOnClusterOld(Rule):
    """Retired: renumbered K955. A rule of the Kubernetes target about the spec's name belongs to the
    names family (K95x); the tens digit 6 is disaggregated serving's, so `kiln explain` filed K860
    there. The code stays registered so `kiln explain K860` still answers for old outputs; it is
    never given to another rule.
    """

    code = "K860"
    name = "spec-renamed-on-cluster-retired"


class DynamoPathwayChanged(Rule):
    """`kubernetes.dynamo.grove` changed while the models' DynamoGraphDeployments run (`kiln plan
    --base`). Dynamo's operator fixes a DGD's workload provider, Grove or its own components, when it
    first admits it: on main it records `nvidia.com/workload-provider` on creation, reuses it without
    reading `nvidia.com/enable-grove` again, and its webhook refuses to change it (catalog
    k8s_controllers.json rolling_update.pathway, with the files and functions). The annotation Kiln
    would write changes nothing there, and the plan, played on the new pathway, would not hold; an
    earlier operator, which read the annotation on every reconcile, would switch the live DGD to the
    other family of workloads. Keep the value while the models run, or delete each DGD and let the
    sync create it anew (the model serves nothing meanwhile).
    """

    code = "K850"
    name = "dynamo-pathway-changed"
    severity = Severity.ERROR


class RelayoutTakesModelDown(Check):
    """A MIG re-layout of a node pool would leave a model with no serving replica.

    The re-layout (node-layer/label-nodes.sh, or its Job) takes `node_pool.max_unavailable` nodes
    of a pool out at once: it cordons them and evicts their GPU pods, which cannot run elsewhere
    while every slice of the other nodes is assigned. When that is every node of the pool and no
    other pool serves the model, the model serves nothing until the first batch is back (the MIG
    manager's re-slice, then a load). The workloads' PodDisruptionBudgets are sized to let the batch
    go (pods per node times max_unavailable), so they do not stop it. Lower `max_unavailable`, add
    a node, or serve the model from a second pool. (A one-node pool is not reported: it has no
    other choice, and `kiln plan` names what its re-layout destroys.)
    """

    code = "K856"
    name = "relayout-takes-model-down"
    severity = Severity.WARNING
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        pools_of: dict[str, set[str]] = {}
        for pname, pool in ctx.ir.pools.items():
            for w in pool.workloads:
                pools_of.setdefault(w.model, set()).add(pname)
        for pname, pool in sorted(ctx.ir.pools.items()):
            if not any(g.mig for g in pool.gpus):
                continue
            np = ctx.host(pname).node_pool
            batch = min(np.max_unavailable, pool.nodes) if np is not None else 1
            if batch < pool.nodes or pool.nodes == 1:  # one node: nothing to choose, the plan says it
                continue
            for model in sorted({w.model for w in pool.workloads}):
                if pools_of[model] == {pname}:
                    path = ("hosts", pname, "node_pool", "max_unavailable") if np is not None and \
                        "max_unavailable" in np.model_fields_set else ("hosts", pname)
                    yield ctx.diag(self, path, key=True,
                                   message=f"a MIG re-layout of node pool {pname!r} takes all {pool.nodes} node(s) "
                                           f"out at once, and no other pool serves {model!r}: it serves nothing "
                                           "until the first node is back",
                                   help="lower node_pool.max_unavailable, add a node, or serve the model from "
                                        "another pool")


class ImageVolumesUnsupported(Check):
    """A node pool mounts its models' weights as image volumes, which the cluster's Kubernetes
    release does not take (or takes only behind a feature gate).

    With `node_pool.weights: image-volume` (the default) each model's checkpoint is an image of its
    own (`weights-image/<model>`), mounted read-only at the model's directory through a pod's
    `volumes[].image`, so the pool's serving image holds the runtime alone and a weight change pulls
    only the weights. Image volumes (KEP-4639) are alpha in Kubernetes 1.31-1.32, beta but off by
    default in 1.33-1.34 (the `ImageVolume` feature gate must be on for the API server and every
    kubelet of the pool), and on by default from 1.35; the container runtime must support them too
    (containerd 2.1 or later). Sources and versions: catalog/data/k8s_controllers.json
    `kubernetes.image_volume`. On an older release the API server drops the field and the pods are
    refused. Error below 1.33; warning on 1.33-1.34, where it works once the gate is on. Fix: set
    `kubernetes.version` to the cluster's release, enable the gate, or set `node_pool.weights:
    in-image` to keep the checkpoints in the pool's serving image (every weight change then rebuilds
    the pool image and rolls every workload of the pool).
    """

    code = "K857"
    name = "image-volumes-unsupported"
    order = ORDER

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.catalog import k8s_controllers
        from compiler.ir.pools import kubernetes_version, mounts_weights

        version = kubernetes_version(ctx.ir)
        support = k8s_controllers.image_volume_support(version)
        if support == "default":
            return
        iv = k8s_controllers.image_volume()
        for pname, pool in sorted(ctx.ir.pools.items()):
            if not pool.workloads or not mounts_weights(ctx.ir, pname):
                continue
            np = ctx.host(pname).node_pool
            path = ("hosts", pname, "node_pool", "weights") if np is not None and "weights" in np.model_fields_set \
                else ("hosts", pname)
            if support == "gate":
                yield ctx.diag(self, path, key=True, severity=Severity.WARNING,
                               message=f"node pool {pname!r} mounts its weights as image volumes, which Kubernetes "
                                       f"{version} takes only with the {iv['feature_gate']} feature gate on (beta, off "
                                       f"by default until {iv['on_by_default']})",
                               help=f"enable {iv['feature_gate']}=true on the API server and the pool's kubelets, "
                                    "or set `node_pool.weights: in-image`")
            else:
                yield ctx.diag(self, path, key=True,
                               message=f"node pool {pname!r} mounts its weights as image volumes, which Kubernetes "
                                       f"{version} does not take (beta from {iv['beta_off_by_default']}, on by default "
                                       f"from {iv['on_by_default']})",
                               help="set `node_pool.weights: in-image` to keep the checkpoints in the pool's serving "
                                    f"image, or upgrade the cluster to {iv['on_by_default']}")
