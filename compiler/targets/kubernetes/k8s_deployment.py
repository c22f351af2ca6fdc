"""`k8s-deployment/<workload>` (runtime `deployment`): the Deployment of one
workload, i.e. the replicas of one model on one device shape of one node pool
(compiler/targets/kubernetes/workloads.py). It depends on the pool's serving image (`image/<pool>`) and, where the
pool mounts weights (node_pool.weights: image-volume), on its model's weights image
(`weights-image/<model>`), whose pushed digests it pins; everything else is in its parameters, so a
change elsewhere in the spec leaves its key and its file alone, and a weight change rolls only the
model's workloads.

Output: <workload>.yaml (the tree's workloads/ directory). Its PodDisruptionBudget is the release's
(k8s-release): the budget follows the pool's re-layout batch, not the pods' template.
"""

from __future__ import annotations

import json
from typing import Annotated

from compiler.actions import image, runtimes, weights_image
from compiler.actions.base import ActionKind, Disruption, LowerContext, Params, RunContext
from compiler.actions.image_context import part
from compiler.catalog import k8s_controllers
from compiler.graph.model import Action
from compiler.ir.pools import cluster_strategy, mounts_weights, resource_name, shape_slug
from compiler.params import changed_kinds, effect, fields_that

from . import plan, tree, workloads
from . import runtime as runtime_
from .runtime import ServingContainer

class DeploymentParams(Params):
    """Each field declares what its change does to the running pool (plan.ROLL, SCALE, ...)."""

    name: Annotated[str, plan.IDENTITY]
    spec_name: Annotated[str, plan.ROLL]  # the pod template's app.kubernetes.io/part-of label (meta.labels)
    namespace: Annotated[str, plan.IDENTITY]
    pool: Annotated[str, plan.IDENTITY]
    model: Annotated[str, plan.IDENTITY]
    replicas: Annotated[int, plan.SCALE]
    image_action: Annotated[str, plan.ROLL]  # image/<pool>: its image.json holds the pushed reference
    # weights-image/<model>, mounted at the model's directory; None: the checkpoint is in the pool's
    # serving image (node_pool.weights: in-image)
    weights_action: Annotated[str | None, plan.ROLL] = None
    runtime: Annotated[str, plan.UNREAD]  # `command` carries what runs
    command: Annotated[list[str], plan.ROLL]
    ports: Annotated[list[tuple[str, int]], plan.ROLL]
    liveness: Annotated[str, plan.ROLL]
    readiness: Annotated[str, plan.ROLL]
    resource: Annotated[str, plan.ROLL]
    count: Annotated[int, plan.ROLL]
    selector: Annotated[dict[str, str], plan.ROLL]
    gpu_product: Annotated[str | None, plan.ROLL]
    # CPU and memory requests and limits (compiler/targets/kubernetes/runtime.pod_resources)
    pod_resources: Annotated[dict, plan.ROLL]
    # the rolling update's strategy, outside the pod template (plan.STRATEGY): pods it takes out at
    # once (rollout_unavailable), pods it may add on devices no workload holds (rollout_surge)
    max_unavailable: Annotated[int, plan.STRATEGY.naming("maxUnavailable")] = 1
    max_surge: Annotated[int, plan.STRATEGY.naming("maxSurge")] = 0


ROLLS = fields_that(DeploymentParams, "roll")  # what replaces the pods, as the fields declare it
# what only paces the next rollout, by the names the manifest gives them (plan.STRATEGY)
STRATEGY = {f: e.named for f in DeploymentParams.model_fields
            if "rollout-settings" in (e := effect(DeploymentParams, f)).shows_as}


def namespace_of(spec) -> str:
    k8s = spec.kubernetes
    return k8s.namespace if k8s is not None and k8s.namespace else spec.name


def gfd_product(pool, strategy: str, mig_profile: str | None) -> str | None:
    """The nvidia.com/gpu.product value GPU Feature Discovery gives the pool's nodes under the
    cluster's MIG strategy (`<product>-MIG-<profile>` under `single`), which the nodeSelector must
    match; None when the spec names no product."""
    if not pool.gpu_product:
        return None
    return k8s_controllers.gpu_product_label(pool.gpu_product, strategy, mig_profile)


def pod_resources(ir, w) -> dict:
    """CPU and memory of a workload's pods: from the checkpoint its unit loads (capacity pass),
    unless `kubernetes.pod_resources.<model>` sets them."""
    unit = next((u for u in ir.units if u.id == w.units[0]), None)
    fig = unit.figures if unit is not None else None
    weights = fig.capacity.weight_bytes * (fig.gpus if fig.gpus else 1) if fig is not None else 0.0
    k8s = ir.spec.kubernetes
    override = (k8s.pod_resources or {}).get(w.model) if k8s is not None else None
    return runtime_.pod_resources(weights, w.gpus, w.mig_profile is not None,
                                  cpu=override.cpu if override else None,
                                  memory_gib=override.memory_gib if override else None)


def slots_per_node(pool, w) -> int:
    """How many of a workload's pods one node can hold: every device of its shape on the node, its
    own and those of other workloads of the same shape (the scheduler may pack them on one node)."""
    return sum(x.per_node for x in pool.workloads if (x.mig_profile, x.gpus) == (w.mig_profile, w.gpus))


def max_unavailable(ir, pool: str) -> int:
    """Nodes of the pool a re-layout batch takes out (`node_pool.max_unavailable`, at most the pool)."""
    np = ir.hosts[pool].spec.node_pool
    return min(np.max_unavailable, np.nodes) if np is not None else 1


def rollout_unavailable(ir, pool: str, w) -> int:
    """The rolling update's maxUnavailable: the workload's pods on the pool's `max_unavailable` nodes,
    what its PodDisruptionBudget already lets a re-layout batch take (at most its replicas). With
    maxSurge 0 on a full pool, 1 rolls a 32-replica workload one pod per load."""
    return max(1, min(w.replicas, slots_per_node(ir.pools[pool], w) * max_unavailable(ir, pool)))


def reshape_unavailable(ir, pool: str, w) -> int | None:
    """The maxUnavailable that lets a workload whose device shape changed (tp 8 -> 4: 2 x 8 GPUs ->
    4 x 4) roll on a pool with no room to surge, from its pods as kiln.lock last recorded them
    (lock_pods); None when the lock has no entry for it or its shape is the same.

    Kubernetes' arithmetic (kubernetes/kubernetes pkg/controller/deployment, ported in
    sim/deployment.py): with maxSurge 0, NewRSNewReplicas gives the new ReplicaSet `replicas - old`
    pods, all Pending (no device of the new shape is free), and reconcileOldReplicaSets may then
    remove `allPods - minAvailable - newRSUnavailable = old - (replicas - maxUnavailable)` old pods
    (scaleDownOldReplicaSetsForRollingUpdate: the same count). A node frees for the new shape only
    when those are the old pods on the pool's `max_unavailable` nodes, so maxUnavailable =
    replicas - (old - old per node x max_unavailable): the controller's minAvailable is then exactly
    the old pods outside that batch, the floor the pool declares (node_pool.max_unavailable), and
    it never takes more. A value at most the usual one (the new shape has no more pods) changes
    nothing: None."""
    old = ir.locked_pods.get(pool, {}).get(w.name)
    if old is None or old["shape"] == shape_slug(w.mig_profile, w.gpus):
        return None
    wanted = unavailable_to_free_nodes(w.replicas, old["replicas"], old["per_node"], max_unavailable(ir, pool))
    return wanted if wanted > rollout_unavailable(ir, pool, w) else None


def unavailable_to_free_nodes(replicas: int, old: int, old_per_node: int, nodes: int) -> int:
    """reshape_unavailable's arithmetic: the maxUnavailable whose minAvailable is the old pods outside
    `nodes` nodes (at least 0, at most `replicas`)."""
    keep = max(0, old - old_per_node * nodes)
    return max(0, min(replicas, replicas - keep))


def strategy_unavailable(ir, pool: str, w) -> int:
    """The Deployment's maxUnavailable: 0 beside a surge (with room, surge alone: maxUnavailable 1
    beside maxSurge 1 lets rolling.go take an old pod out at once too, reconcileOldReplicaSets);
    a shape change's (reshape_unavailable) on a full pool; else a node batch's (rollout_unavailable)."""
    if rollout_surge(ir, pool, w):
        return 0
    reshape = reshape_unavailable(ir, pool, w)
    return reshape if reshape is not None else rollout_unavailable(ir, pool, w)


def lock_pods(ir) -> dict[str, dict[str, dict[str, int | str]]]:
    """pool -> Deployment workload -> its shape slug, replicas and pods per node: what `kiln lock`
    writes under "pods" (compiler/ir/lockfile.py) for reshape_unavailable; {} unless the cluster
    runs Deployments."""
    k8s = ir.spec.kubernetes
    if k8s is not None and k8s.runtime != "deployment":
        return {}
    return {p.name: {w.name: {"shape": shape_slug(w.mig_profile, w.gpus), "replicas": w.replicas,
                              "per_node": w.per_node} for w in p.workloads}
            for p in ir.pools.values() if p.workloads}


def free_slots(pool, w) -> int:
    """Pods of the workload's device shape the pool's nodes can hold beyond every workload's own:
    GPUs without MIG that serve nothing (whole-GPU pods), or MIG instances of its profile that no
    workload holds."""
    if w.mig_profile is None:
        free = sum(1 for g in pool.gpus if not g.mig) - sum(x.per_node * x.gpus for x in pool.workloads
                                                            if x.mig_profile is None)
        return max(0, free) // w.gpus * pool.nodes
    have = sum(dict(g.profiles).get(w.mig_profile, 0) for g in pool.gpus)
    return max(0, have - slots_per_node(pool, w)) * pool.nodes


def rollout_surge(ir, pool: str, w) -> int:
    """The rolling update's maxSurge: new pods on the pool's free devices of the workload's shape (a
    node's worth at most), so a pool with room rolls without taking a pod out first; 0 on a full pool."""
    return min(free_slots(ir.pools[pool], w), rollout_unavailable(ir, pool, w))


def weights_deps(weights_action: str | None) -> set[str]:
    return {weights_action} if weights_action else set()


def image_reference(tree_dir) -> tuple[str, str]:
    """(repository@digest, digest) of a built `image/<host>` artifact."""
    doc = json.loads((tree_dir / image.OUTPUT).read_text(encoding="utf-8"))
    return doc["reference"], doc["digest"]


def serving_container(runtime: str, target: str, model: str, ports: dict[str, int], par,
                      gpus: int) -> ServingContainer:
    """The container of a model's pods: the unit command of its runtime (the same argv a host
    runs), every port it listens on, and the runtime's probe paths."""
    serving = runtimes.unit_serving(runtime, target, model, ports, tp=par.tp, pp=par.pp, ep=par.ep, gpus=gpus)
    return ServingContainer(tuple(serving.command), named_ports(runtime, ports),
                            liveness=runtimes.get(runtime).live, readiness=serving.ready[0])


def named_ports(runtime: str, ports: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """(name, port) of each port the runtime listens on: Triton http, grpc, metrics; trtllm-serve http."""
    return tuple((name, ports[name]) for name in runtimes.get(runtime).ports)


def workload_params(ctx: LowerContext) -> list[DeploymentParams]:
    ir, spec = ctx.ir, ctx.spec
    strategy = cluster_strategy(ir)
    out = []
    for pname, pool in sorted(ir.pools.items()):
        for w in pool.workloads:
            rm = ir.models[w.model]
            runtime = rm.spec.serving.runtime
            c = serving_container(runtime, ir.target, w.model, rm.spec.serving.ports.model_dump(),
                                  rm.spec.parallelism, w.gpus)
            resource = resource_name(strategy, w.mig_profile)
            if resource is None:  # K251 refuses the strategy first
                continue
            out.append(DeploymentParams(
                name=w.name, spec_name=spec.name, namespace=namespace_of(spec), pool=pname, model=w.model,
                replicas=w.replicas, image_action=f"{image.KIND.kind}/{part(pname, w.model)}", runtime=runtime,
                command=list(c.command), ports=list(c.ports), liveness=c.liveness, readiness=c.readiness,
                resource=resource, count=w.gpus, selector=dict(pool.selector),
                gpu_product=gfd_product(pool, strategy, w.mig_profile), pod_resources=pod_resources(ir, w),
                weights_action=weights_image.action_id(w.model) if mounts_weights(ir, pname) else None,
                max_unavailable=strategy_unavailable(ir, pname, w),
                max_surge=rollout_surge(ir, pname, w)))
    return out


def render(params: DeploymentParams, image_ref: str, image_digest: str,
           weights: tuple[str, str] | None = None) -> bytes:
    """`weights`: (reference, digest) of the model's weights image, with `params.weights_action`."""
    artifacts = {params.image_action: image_digest}
    if weights is not None:
        artifacts[params.weights_action] = weights[1]
    container = ServingContainer(tuple(params.command), tuple(tuple(p) for p in params.ports), params.liveness,
                                 params.readiness)
    objects = [
        workloads.deployment(name=params.name, spec_name=params.spec_name, namespace=params.namespace,
                             pool=params.pool, model=params.model, replicas=params.replicas, image=image_ref,
                             container=container, resource=params.resource, count=params.count,
                             selector=params.selector, gpu_product=params.gpu_product,
                             artifacts=artifacts, pod_resources=params.pod_resources,
                             weights=weights[0] if weights is not None else None,
                             max_unavailable=params.max_unavailable, max_surge=params.max_surge),
    ]
    return tree.documents(objects).encode()


class K8sDeployment(ActionKind[DeploymentParams]):
    kind, version, Params = "k8s-deployment", 1, DeploymentParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        k8s = ctx.spec.kubernetes
        if not ctx.ir.pools or (k8s is not None and k8s.runtime != "deployment"):
            return []
        return [self.action(f"{self.kind}/{p.name}", p, deps=sorted({p.image_action} | weights_deps(p.weights_action)))
                for p in workload_params(ctx)]

    def run(self, params: DeploymentParams, ctx: RunContext) -> None:
        ref, digest = image_reference(ctx.deps[params.image_action])
        weights = weights_image.reference(ctx.deps[params.weights_action]) if params.weights_action else None
        (ctx.out / f"{params.name}.yaml").write_bytes(render(params, ref, digest, weights))
        ctx.log.info("%s: %d replica(s) of %d x %s, image %s", params.name, params.replicas, params.count,
                     params.resource, ref)


KIND = K8sDeployment()


def disruptions(old: DeploymentParams | None, new: DeploymentParams,
                inputs: frozenset[str] | None = None) -> list[Disruption]:
    """What its fields' change does (their declared effects: a roll, a scale, the rollout settings
    alone) and a roll for each image it runs that was pushed anew (`inputs`: the dependencies
    rebuilt; None, not known: every image it runs is taken for pushed anew, the safe side)."""
    device = f"{new.count} x {new.resource}"
    if old is None:
        return plan.workload_disruptions(new.pool, new.name, None, new.to_json(), ROLLS, device=device)
    if old.namespace != new.namespace:
        return [plan.moved(new.pool, new.name, old.namespace, new.namespace, old.replicas, new.replicas)]
    out = plan.workload_disruptions(new.pool, new.name, old.to_json(), new.to_json(), ROLLS, device=device,
                                    pushed=plan.pushed_images(plan.pod_images(new, new.model), inputs))
    if "rollout-settings" in changed_kinds(old, new) and not any(d.kind == "workload-roll" for d in out):
        out.append(plan.settings_changed(new.pool, new.name, old.to_json(), new.to_json(), STRATEGY))
    return out
