"""`k8s-dgd/<model>` (runtime `dynamo`): the DynamoGraphDeployment of one model and the ConfigMap
of its LLM-API options (compiler/targets/kubernetes/dynamo.py): a frontend and one worker component per node pool
and device shape that serves the model. It depends on the options file (`llmapi-options/<model>`,
the file `--extra-engine-args` reads), on the serving image of every pool its workers run on and,
where a pool mounts weights, on the model's weights image (`weights-image/<model>`).

Output: <model>.yaml (the tree's workloads/ directory).

Disruptions name the component a change is for; Dynamo's worker hash then rolls every other worker
of the model too, and under disaggregated serving it rolls prefill and decode in no order
(catalog/data/k8s_controllers.json, rolling_update).
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from pydantic import Field

from compiler.actions import disaggregated, image, llmapi, weights_image
from compiler.actions.base import ActionKind, Disruption, LowerContext, Params, RunContext
from compiler.actions.image_context import part
from compiler.targets.disruption import POOL
from compiler.catalog import k8s_controllers
from compiler.graph.model import Action
from compiler.ir.k8s_names import dgd_component
from compiler.ir.pools import cluster_strategy, mounts_weights, resource_name
from compiler.params import Effect, effect, fields_that
from compiler.store.canonical import canonical_json

from . import dynamo, plan, tree
from .k8s_deployment import free_slots, gfd_product, image_reference, namespace_of, pod_resources, rollout_surge

class Worker(Params):
    """Each field declares what its change does to the running pool (plan.ROLL, SCALE, ...); what
    Dynamo's webhook refuses on a live DGD is forbidden_changes' (catalog k8s_controllers.json)."""

    component: Annotated[str, plan.IDENTITY]
    pool: Annotated[str, plan.IDENTITY]
    replicas: Annotated[int, plan.SCALE]
    image_action: Annotated[str, plan.ROLL]
    # weights-image/<model> mounted at --model-path; None: in the pool image
    weights_action: Annotated[str | None, plan.ROLL] = None
    resource: Annotated[str, plan.ROLL]
    count: Annotated[int, plan.ROLL]
    selector: Annotated[dict[str, str], plan.ROLL]
    gpu_product: Annotated[str | None, plan.ROLL]
    # dynamo.POWER_ANNOTATION: None, power is the node tuning's (a DGD from an earlier Kiln may carry
    # it: forbidden_changes plans the recreate that removing it needs)
    power_limit_w: Annotated[int | None, plan.ROLL]
    pod_resources: Annotated[dict, plan.ROLL]  # CPU and memory (compiler/targets/kubernetes/runtime.pod_resources)
    role: Annotated[str | None, plan.IDENTITY] = None  # disaggregated serving: prefill or decode (the component's type)
    # disaggregated serving: the digest of its role's options (its own ConfigMap), so that a change to
    # one role's options is that role's component's change (left out when unset: other DGDs keep their keys)
    options: Annotated[str | None, plan.ROLL] = Field(default=None, exclude_if=lambda v: v is None)
    # the rolling update's pace (Dynamo's surge/unavailable annotations, k8s_deployment.rollout_surge):
    # surge alone where the pool has room (review N10); 0/1 on a full pool, left out then so that
    # DGDs of full pools keep their keys. Unlike a Deployment's strategy they are in the pod template,
    # which Dynamo's worker hash covers whole: a change of the pace alone rolls every worker
    # (catalog k8s_controllers.json rolling_update.hash_source)
    max_surge: Annotated[int, plan.ROLL] = Field(default=0, exclude_if=lambda v: v == 0)
    max_unavailable: Annotated[int, plan.ROLL] = Field(default=1, exclude_if=lambda v: v == 1)


# what replaces a worker's pods, as its fields declare it (the model's options and UCX environment,
# DGD-wide, are compared per worker under the names "options" and "environment")
WORKER_ROLLS = tuple(f for f in fields_that(Worker, "roll") if f != "options")


class Planner(Params):
    """Dynamo's planner component of a disaggregated model (catalog/data/disaggregated.json)."""

    image: str
    config: dict  # its --config JSON


# the DGD's components that are not workers: Dynamo updates them in place, outside the worker hash
_FRONTEND = Effect("restart", "the frontend is replaced in place, the workers keep running (Dynamo's rolling update "
                              "hashes the workers only: catalog k8s_controllers.json)", ("workload-roll",))
_PLANNER = Effect("restart", "the planner is replaced in place, outside the worker hash", ("workload-roll",))
# the operator fixes a DGD's workload provider when it first admits it (catalog k8s_controllers.json
# rolling_update.pathway): a change on a live DGD is refused before the plan (K850, gitops/planbase.py)
_PATHWAY = Effect("none", "nvidia.com/enable-grove: read when the operator first admits the DGD, fixed after it "
                          "(nvidia.com/workload-provider); a change on a live DGD is refused (K850)")


class DgdParams(Params):
    """Each field declares what its change does (the workers' own: Worker); what Dynamo's webhook
    refuses on a live DGD is forbidden_changes' (catalog k8s_controllers.json)."""

    model: Annotated[str, plan.IDENTITY]
    spec_name: Annotated[str, plan.IDENTITY]
    namespace: Annotated[str, plan.IDENTITY]
    # the frontend's, in the order a plan lists their changes (disaggregated serving: its router's arguments)
    frontend_args: Annotated[list[str], _FRONTEND.naming("router arguments")] = []
    frontend_image: Annotated[str, _FRONTEND.naming("image")]  # image.base: Dynamo's tensorrtllm-runtime image, by digest
    version: Annotated[str, _FRONTEND.naming("Dynamo")]  # Dynamo release (runtimeVersionOverride)
    options_action: Annotated[str, plan.UNREAD]  # options_digest carries what the workers read
    options_digest: Annotated[str, plan.ROLL]  # of the options the file holds: new options roll every worker
    # one worker's roll rolls them all: the plan says so by this name (the operator's worker hash: rolling-update.md)
    workers: Annotated[list[Worker], Effect("roll", "each worker's own fields (Worker) and Dynamo's worker hash, "
                                                    "which covers all of them", ("workload-roll", "replicas"),
                                            named="Dynamo's worker hash covers every worker")]
    # disaggregated serving (options_action is then disagg-options/<model>, one options file per role)
    environment: Annotated[dict[str, str], plan.ROLL] = {}  # the workers' UCX settings, in every pod template
    planner: Annotated[Planner | None, _PLANNER.naming("its image or config")] = None
    # the workers publish their KV-cache events (the frontend routes by KV; absent: not disaggregated)
    kv_events: Annotated[bool, plan.ROLL] = Field(default=False, exclude_if=lambda v: not v)
    # the operator's pathway the spec declares (kubernetes.dynamo.grove): Grove rolls each worker 1 at a
    # time and reads no pace annotation (catalog rolling_update.grove_rollout)
    grove: Annotated[bool, _PATHWAY] = False


# the fields of the frontend a plan names when they change (their declarations: _FRONTEND), in declaration order
_FRONTEND_FIELDS = tuple(f for f in DgdParams.model_fields if effect(DgdParams, f).why == _FRONTEND.why)


def worker_surge(ir, pool, w) -> int:
    """A Dynamo worker's maxSurge: the lock's (kiln.lock "surges") while the pool still has that many
    free devices of its shape, else the pool's room now (rollout_surge). The surge annotation is in
    the pod template, which the operator's worker hash covers (ComputeDGDWorkersSpecHash), and it is
    read from nowhere the hash does not see on a v1beta1 DGD (catalog k8s_controllers.json
    rolling_update.read_from): a surge that followed the room would roll every worker of a model when
    another model's edit freed or took a device. Pinned, only a room too small for the surge flips it
    (a surge the pool cannot hold leaves the new worker Pending: the rollout would stick)."""
    locked = ir.locked_surges.get(pool.name, {}).get(w.name)
    if locked is not None and locked <= free_slots(pool, w):
        return locked
    return rollout_surge(ir, pool.name, w)


def lock_surges(ir) -> dict[str, dict[str, int]]:
    """pool -> Dynamo worker workload -> its surge (worker_surge): what `kiln lock` writes under
    "surges" (compiler/ir/lockfile.py); {} unless the cluster runs Dynamo (a Deployment's surge is
    in its strategy, outside the pod template: it follows the room without rolling a pod)."""
    k8s = ir.spec.kubernetes
    if k8s is None or k8s.runtime != "dynamo" or k8s.dynamo.grove:  # Grove reads no surge (grove_rollout)
        return {}
    return {p.name: {w.name: worker_surge(ir, p, w) for w in p.workloads} for p in ir.pools.values() if p.workloads}


def dgd_params(ctx: LowerContext) -> list[DgdParams]:
    ir, spec = ctx.ir, ctx.spec
    strategy = cluster_strategy(ir)
    grove = spec.kubernetes.dynamo.grove
    by_model: dict[str, list] = {}
    for pool in ir.pools.values():
        for w in pool.workloads:
            by_model.setdefault(w.model, []).append((pool, w))
    out = []
    for model, items in sorted(by_model.items()):
        workers = []
        for pool, w in sorted(items, key=lambda pw: pw[1].name):
            resource = resource_name(strategy, w.mig_profile)
            if resource is None:  # K251
                continue
            # power is the node's (the tuning DaemonSet, node-layer/gpu-tuning.yaml): Dynamo's Power
            # Agent is a separate chart nothing installs, and its annotation cannot change on a live DGD
            power = None
            component = dgd_component(model, w.name)
            # Dynamo's guide warns that 0/1 leaves a moment with no routable worker (review N10): with
            # room, new workers come first and none is taken out until they serve; the lock keeps it.
            # Grove's PodClique rolls 1 at a time with no surge whatever the room (grove_rollout)
            surge = 0 if grove else worker_surge(ir, pool, w)
            workers.append(Worker(component=component, pool=pool.name, replicas=w.replicas,
                                  image_action=f"{image.KIND.kind}/{part(pool.name, model)}", resource=resource, count=w.gpus,
                                  selector=dict(pool.selector), gpu_product=gfd_product(pool, strategy, w.mig_profile),
                                  power_limit_w=power, pod_resources=pod_resources(ir, w),
                                  weights_action=(weights_image.action_id(model) if mounts_weights(ir, pool.name)
                                                  else None), role=w.role,
                                  max_surge=surge, max_unavailable=0 if surge else 1))
        rm = ir.models[model]
        if rm.spec.serving.disaggregated is None:
            out.append(DgdParams(model=model, spec_name=spec.name, namespace=namespace_of(spec),
                                 version=spec.kubernetes.dynamo.version, frontend_image=spec.image.base,
                                 options_action=f"{llmapi.KIND.kind}/{model}",
                                 options_digest="sha256:" + hashlib.sha256(
                                     canonical_json(llmapi.options(rm))).hexdigest(),
                                 workers=workers, grove=grove))
            continue
        version = spec.toolchain.tensorrt_llm
        role_options = {r: disaggregated.role_options(rm, r, version) for r in disaggregated.ROLES}
        workers = [w.model_copy(update={"options": "sha256:" + hashlib.sha256(
            canonical_json(role_options[w.role])).hexdigest()}) if w.role else w for w in workers]
        d = rm.spec.serving.disaggregated
        planner = None
        if d.planner is not None:
            planner = Planner(image=d.planner.image, config=disaggregated.planner_config(rm))
        out.append(DgdParams(model=model, spec_name=spec.name, namespace=namespace_of(spec),
                             version=spec.kubernetes.dynamo.version, frontend_image=spec.image.base,
                             options_action=f"{disaggregated.KIND.kind}/{model}",
                             options_digest="sha256:" + hashlib.sha256(canonical_json(role_options)).hexdigest(),
                             workers=workers, frontend_args=disaggregated.frontend_args(rm),
                             environment=disaggregated.ucx_environment(rm), planner=planner,
                             kv_events=d.router.kv_aware, grove=grove))
    return out


def render(params: DgdParams, options: bytes | dict[str, bytes], images: dict[str, tuple[str, str]]) -> bytes:
    """`options`: the options file, or under disaggregated serving role -> its options file;
    `images`: image or weights-image action -> (reference, digest)."""
    by_role = options if isinstance(options, dict) else {None: options}
    cm_names = {r: dynamo.options_configmap_name(params.model, data) for r, data in by_role.items()}
    components = [dynamo.frontend(image=params.frontend_image, version=params.version, args=params.frontend_args)]
    if params.planner is not None:
        components.append(dynamo.planner(image=params.planner.image, version=params.version,
                                         config=params.planner.config))
    for w in params.workers:
        components.append(dynamo.worker(
            name=w.component, model=params.model, spec_name=params.spec_name, pool=w.pool, replicas=w.replicas,
            image=images[w.image_action][0], version=params.version, resource=w.resource, count=w.count,
            selector=w.selector, gpu_product=w.gpu_product, options_configmap_=cm_names[w.role],
            power_limit_w=w.power_limit_w, pod_resources=w.pod_resources,
            weights=images[w.weights_action][0] if w.weights_action else None, role=w.role, env=params.environment,
            kv_events=params.kv_events, max_surge=None if params.grove else w.max_surge,
            max_unavailable=w.max_unavailable))
    artifacts = {a: d for a, (_, d) in images.items()}
    artifacts[params.options_action] = "sha256:" + hashlib.sha256(b"".join(
        by_role[r] for r in sorted(by_role, key=str))).hexdigest()
    objects = [dynamo.options_configmap(model=params.model, spec_name=params.spec_name, namespace=params.namespace,
                                        options=by_role[r]) for r in sorted(by_role, key=str)]
    objects.append(dynamo.graph_deployment(model=params.model, spec_name=params.spec_name, namespace=params.namespace,
                                           components=components, artifacts=artifacts, grove=params.grove))
    return tree.documents(objects).encode()


def forbidden_changes(old: DgdParams | None, new: DgdParams) -> list[str]:
    """What in going from `old` to `new` Dynamo's webhook refuses on the live DGD (its version's
    rules, catalog/data/k8s_controllers.json); [] when the update is admitted."""
    if old is None:
        return []
    rules = k8s_controllers.forbidden_updates(new.version)
    out = []
    before = {w.component: w for w in old.workers}
    after = {w.component: w for w in new.workers}
    if set(before) != set(after) and "component-set" in rules:
        added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
        what = ", ".join([f"+{c}" for c in added] + [f"-{c}" for c in removed])
        out.append(f"{rules['component-set'].cite(new.version)}: {what}")
    for name in sorted(set(before) & set(after)):
        b, a = before[name], after[name]
        if b.power_limit_w != a.power_limit_w and "power-annotation" in rules:
            out.append(f"{rules['power-annotation'].cite(new.version)}: {name} {b.power_limit_w} -> {a.power_limit_w} W")
        elif b.power_limit_w is not None and b.count != a.count and "power-gpu-count" in rules:
            out.append(f"{rules['power-gpu-count'].cite(new.version)}: {name} {b.count} -> {a.count} GPU(s)")
    return out


class K8sDgd(ActionKind[DgdParams]):
    kind, version, Params = "k8s-dgd", 1, DgdParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        k8s = ctx.spec.kubernetes
        if not ctx.ir.pools or k8s is None or k8s.runtime != "dynamo":
            return []
        return [self.action(f"{self.kind}/{p.model}", p,
                            deps=sorted({p.options_action} | {w.image_action for w in p.workers}
                                        | {w.weights_action for w in p.workers if w.weights_action}))
                for p in dgd_params(ctx)]

    def run(self, params: DgdParams, ctx: RunContext) -> None:
        deps = ctx.deps[params.options_action]
        if params.options_action.startswith(f"{disaggregated.KIND.kind}/"):
            options = {r: (deps / r / llmapi.OUTPUT).read_bytes() for r in disaggregated.ROLES}
        else:
            options = (deps / llmapi.OUTPUT).read_bytes()
        images = {w.image_action: image_reference(ctx.deps[w.image_action]) for w in params.workers}
        images |= {w.weights_action: weights_image.reference(ctx.deps[w.weights_action])
                   for w in params.workers if w.weights_action}
        (ctx.out / f"{params.model}.yaml").write_bytes(render(params, options, images))
        ctx.log.info("%s: frontend and %d worker component(s)", params.model, len(params.workers))


def _non_workers(old: DgdParams, new: DgdParams, workers_roll: bool = False) -> list[Disruption]:
    """The frontend (the router of a disaggregated model) and the planner: not workers, so Dynamo
    updates them in place, outside the worker hash (catalog k8s_controllers.json, rolling_update).
    They take no GPU: each pool of the model's workers names them, as a host's router names the
    GPUs it serves."""
    pools = sorted({w.pool for w in new.workers})
    changed = []
    frontend = [(effect(DgdParams, f).named, getattr(old, f), getattr(new, f)) for f in _FRONTEND_FIELDS
                if getattr(old, f) != getattr(new, f)]
    if frontend:
        def text(v) -> str:
            return plan.short((" ".join(v) or "(none)") if isinstance(v, list) else v)

        what = ", ".join(f"{k} {text(a)} -> {text(b)}" for k, a, b in frontend)
        role = "router/frontend" if new.frontend_args or old.frontend_args else "frontend"
        # a KV-routing change also changes what the workers publish: then they roll for it too
        rest = "" if workers_roll else "; the workers keep running"
        changed.append((f"{new.model}/frontend", f"{role} replaced in place ({what}){rest}"))
    if old.planner != new.planner:
        changed.append((f"{new.model}/planner", f"planner replaced in place ({effect(DgdParams, 'planner').named} "
                                                "changed)"))
    return [Disruption(p, POOL, "workload-roll", f"{name}: {text}") for name, text in changed for p in pools]


def _unordered_roles(params: DgdParams, out: list[Disruption]) -> list[Disruption]:
    """Where both roles of a disaggregated model roll, say that one DGD cannot order them: Dynamo rolls
    prefill and decode independently (no decode-before-prefill order; catalog rolling_update)."""
    roles = {f"{params.model}/{w.component}": w.role for w in params.workers if w.role}
    rolling = {roles[d.detail.split(":", 1)[0]] for d in out
               if d.kind == "workload-roll" and d.detail.split(":", 1)[0] in roles}
    if len(rolling) < 2 or k8s_controllers.dynamo_rollout()["roles_ordered"]:
        return out
    note = ("; Dynamo rolls prefill and decode independently, in no order: a new prefill worker may be ready "
            "before any new decode worker (rolling-update.md, Future Work)")
    return [Disruption(d.host, d.gpu_index, d.kind, d.detail + note)
            if d.kind == "workload-roll" and roles.get(d.detail.split(":", 1)[0]) == "prefill" else d for d in out]


KIND = K8sDgd()

# why a worker's surge changed (worker_surge): the reviewer learns it rolls the model for that alone
_PACE = ("; its surge follows the pool's free room (no kiln.lock entry, or the room no longer holds the locked "
         "surge), and a pace change alone rolls every worker (Dynamo's worker hash)")


def disruptions(old: DgdParams | None, new: DgdParams, inputs: frozenset[str] | None = None) -> list[Disruption]:
    """Each worker's own fields (Worker), the images it runs that were pushed anew (`inputs`: the
    dependencies rebuilt; None, not known: every one), then the workers the hash rolls with them and
    the components updated in place. A rebuilt options action whose options are the same (the
    digest a field carries) changes no pod template: it rolls nothing."""
    if old is not None and old.namespace != new.namespace:  # another object: deleted and created, no update
        before = {w.component: w.replicas for w in old.workers}
        return [plan.moved(w.pool, f"{new.model}/{w.component}", old.namespace, new.namespace,
                           before.get(w.component, 0), w.replicas) for w in new.workers]
    refused = forbidden_changes(old, new)
    if refused:
        return plan.recreate([w.pool for w in new.workers + old.workers], new.model, refused)
    before = {w.component: w for w in (old.workers if old is not None else [])}
    out = []
    for w in new.workers:
        prev = before.get(w.component)
        old_json = prev.to_json() if prev is not None else None
        new_json = w.to_json()
        if old_json is not None:
            if w.options is None or prev.options is None:  # one options file (or a DGD from an earlier
                # Kiln, whose workers carry no digest of their own): compare the model's options
                old_json["options"], new_json["options"] = old.options_digest, new.options_digest
            old_json["options"], new_json["options"] = (str(old_json.get("options"))[:19],
                                                        str(new_json["options"])[:19])
            # the UCX settings are in every worker's pod template: the plan names the ones that changed
            env = sorted(k for k in set(old.environment) | set(new.environment)
                         if old.environment.get(k) != new.environment.get(k))
            old_json["environment"], new_json["environment"] = (
                " ".join(f"{k}={p.environment.get(k, '(unset)')}" for k in env) for p in (old, new))
        items = plan.workload_disruptions(w.pool, f"{new.model}/{w.component}", old_json, new_json,
                                          WORKER_ROLLS + ("options", "environment"),
                                          device=f"{w.count} x {w.resource}",
                                          pushed=plan.pushed_images(plan.pod_images(w, new.model), inputs))
        if prev is not None and prev.max_surge != w.max_surge:
            items = [Disruption(d.host, d.gpu_index, d.kind, d.detail + _PACE) if d.kind == "workload-roll" else d
                     for d in items]
        out += items
    if old is None:
        return out
    out += _non_workers(old, new, workers_roll=any(d.kind == "workload-roll" for d in out))
    rolled = {d.detail.split(":", 1)[0] for d in out if d.kind == "workload-roll"
              and d.detail.split(":", 1)[0] in {f"{new.model}/{w.component}" for w in new.workers}}
    if not rolled:
        return out
    why = f"{effect(DgdParams, 'workers').named}: rolled with {', '.join(sorted(rolled))}"
    for w in new.workers:  # the operator's worker hash covers all workers (rolling-update.md)
        name = f"{new.model}/{w.component}"
        if name not in rolled and w.component in before:
            out.append(plan.roll(w.pool, name, why + ", its own pod template unchanged", w.to_json()))
    return _unordered_roles(new, out)
