"""What replacing a workload's objects does to its pool, for `kiln plan` (pure).

A workload's pods are replaced (rolled, as many at a time as its maxSurge/maxUnavailable let the
controller: `pace`, the arithmetic the simulator runs) when anything in their template changes:
the device they request, the command, ports, probes, image repository or node selection; a change
of replica count adds or removes pods without touching the others. A new image of the same
repository also rolls the pods; the image kind reports that (`container-restart` of the pool).
"""

from __future__ import annotations

from typing import Mapping

from compiler.targets.disruption import POOL, Disruption
from compiler.params import Effect

from .runtime import PROGRESS_DEADLINE_S

RECREATE_CODE = "K855"  # compiler/checks/kubernetes.py KubernetesUpdateForbidden

# What a workload's parameters do when they change (declared on each field of DeploymentParams and
# the DGD's Worker; workload_disruptions derives the plan's lines from them)
ROLL = Effect("roll", "in the pod template: the controller replaces the pods as maxSurge/maxUnavailable "
                      "allow (k8s.io/kubernetes pkg/controller/deployment/sync.go getNewReplicaSet: a new ReplicaSet "
                      "per pod-template-hash; "
                      "Dynamo's worker hash over the workers' templates, docs rolling-update.md)", ("workload-roll",))
SCALE = Effect("scale", "spec.replicas: pods added or removed, the others untouched", ("replicas",))
IDENTITY = Effect("replace", "names the object or where it lives: another value is another object")
UNREAD = Effect("none", "no pod reads it: a field another one carries into the template")
# A Deployment's spec.strategy: outside the pod template, so its change alone replaces no pod; it paces
# the next rollout. The controller makes a new ReplicaSet (and replaces pods) only for a .spec.template
# no ReplicaSet runs: kubernetes/kubernetes pkg/controller/deployment/sync.go getNewReplicaSet (95f0849,
# as sim/deployment.py) finds it with util/deployment_util.go (277391e) FindNewReplicaSet, which
# compares each ReplicaSet's Spec.Template with the Deployment's (EqualIgnoreHash: pod-template-hash
# aside); the strategy and replicas are not in it
STRATEGY = Effect("none", "spec.strategy, outside the pod template: the Deployment controller replaces pods only "
                          "for a new .spec.template (kubernetes sync.go getNewReplicaSet 95f0849, deployment_util.go "
                          "FindNewReplicaSet and EqualIgnoreHash 277391e); it paces the next rollout",
                  ("rollout-settings",))


def down_for() -> str:
    """How long a deleted and re-created workload serves nothing, at most: a pull and a load."""
    return f"~{PROGRESS_DEADLINE_S // 60} min"


def recreate(pools: list[str], model: str, reasons: list[str]) -> list[Disruption]:
    """`recreate: <model> down for ~T`, once per pool the model runs on: a controller refuses the
    update, so the object must be deleted and created anew (never planned as `new`)."""
    text = f"recreate: {model} down for {down_for()} ({RECREATE_CODE}: {'; '.join(reasons)})"
    return [Disruption(p, POOL, "recreate", text) for p in sorted(set(pools))]


def moved(pool: str, name: str, old_ns: str, new_ns: str, before: int, after: int) -> Disruption:
    """A workload whose namespace changes: a namespace is part of an object's identity (no update moves
    it), so Argo CD deletes the workload in the old one and creates it in the new one; no roll, whatever
    else changed with it (K956 refuses the move, gitops/planbase.py moved_namespace)."""
    return Disruption(pool, POOL, "workload-move",
                      f"{name}: moves from namespace {old_ns} to {new_ns}: deleted in {old_ns} (Argo CD prunes it, "
                      f"its {before} pod(s) stop at once) and created in {new_ns} ({after} new pod(s), ready after "
                      f"a pull and a load, up to {down_for()}); no rollout")


def short(value) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def pace(replicas: int, surge: int | str = 0, unavailable: int | str = 1) -> str:
    """How a rolling update of `replicas` pods replaces them, from the Deployment controller's own
    arithmetic (sim/deployment.py, ported from rolling.go: ResolveFenceposts, MaxSurge, MaxUnavailable),
    the numbers the simulated rollout moves by. Dynamo's workers carry the same two settings as
    annotations (dynamo.py worker: 0 and 1)."""
    # here, not at the top: importing sim/ runs the whole simulator (sim/__init__.py), which a plan
    # of hosts only, importing this module through the kind registry, never calls
    from .sim import deployment as dc

    s = dc.max_surge(replicas, surge, unavailable)
    u = dc.max_unavailable(replicas, surge, unavailable)
    keep = f"at least {replicas - u} of {replicas} stay ready"
    if s == 0:
        return (f"pods replaced {u} at a time, each old pod stopped before its replacement is scheduled "
                f"(maxSurge 0, maxUnavailable {u}: {keep})")
    if u == 0:
        return (f"{s} new pod(s) at a time started before old ones stop (maxSurge {s}, maxUnavailable 0: "
                f"all {replicas} stay ready)")
    return (f"up to {s} new pod(s) started and {u} old one(s) stopped at a time (maxSurge {s}, "
            f"maxUnavailable {u}: {keep})")


def workload_disruptions(pool: str, name: str, old: Mapping | None, new: Mapping, rolls: tuple[str, ...],
                         replicas_key: str = "replicas", device: str = "", pushed: tuple[str, ...] = ()) -> list[Disruption]:
    """`old`/`new`: the workload's parameters as JSON; `rolls`: the keys whose change replaces the
    pods; `device`: what one replica requests, e.g. `1 x nvidia.com/mig-3g.40gb`; `pushed`: the
    images its pods run that were pushed anew (pushed_images), which roll them too. The rollout's
    pace reads `max_surge`/`max_unavailable` of `new` (absent: Dynamo's 0 and 1)."""
    if old is None:
        return [Disruption(pool, POOL, "workload-roll",
                           f"{name}: new, {new[replicas_key]} replica(s) of {device}")]
    out = []
    changed = [k for k in rolls if old.get(k) != new.get(k)]
    if changed or pushed:
        what = ", ".join([f"{k} {short(old.get(k))} -> {short(new.get(k))}" for k in changed] + list(pushed))
        out.append(Disruption(pool, POOL, "workload-roll", f"{name}: {_pace_of(new, replicas_key)} ({what})"))
    b, a = old.get(replicas_key), new[replicas_key]
    if b != a:
        delta = a - (b or 0)
        out.append(Disruption(pool, POOL, "replicas", f"{name}: {b} -> {a} replicas ({delta:+d} x {device})"))
    return out


def pod_images(params, model: str) -> dict[str, str]:
    """The images a workload's pods run (a Deployment's or a DGD worker's parameters: its pool's
    serving image, its model's weights image where the pool mounts it), by action, as the plan names
    them: their pushed digests are in the pod template. Each model has its own serving image on a pool
    (image/<pool>/<model>), so the line names both."""
    out = {params.image_action: f"{model}'s serving image on {params.pool}"}
    if params.weights_action:
        out[params.weights_action] = f"weights image of {model}"
    return out


def pushed_images(images: Mapping[str, str], inputs: frozenset[str] | None) -> tuple[str, ...]:
    """What the plan says of each image a workload's pods run (`images`: its action -> what it is,
    e.g. "chat's serving image on h100-pool") whose action was rebuilt (`inputs`, the rebuilt dependencies;
    None, not known: every one): its pushed digest is in the pod template, so the pods roll."""
    return tuple(f"{what} rebuilt" for aid, what in images.items() if inputs is None or aid in inputs)


def settings_changed(pool: str, name: str, old: Mapping, new: Mapping, fields: Mapping[str, str],
                     replicas_key: str = "replicas") -> Disruption:
    """A change of a Deployment's rollout strategy alone (`fields`: its keys -> the names the
    manifest gives them; STRATEGY): no pod is replaced, the next rollout goes at the new pace."""
    what = ", ".join(f"{shown} {old.get(k)} -> {new.get(k)}" for k, shown in fields.items() if old.get(k) != new.get(k))
    return Disruption(pool, POOL, "rollout-settings",
                      f"{name}: rollout settings changed ({what}): no pod replaced (the pod template is unchanged: "
                      f"the Deployment controller rolls only for a new .spec.template); its next rollout: "
                      f"{_pace_of(new, replicas_key)}")


def _pace_of(params: Mapping, replicas_key: str = "replicas") -> str:
    return pace(params[replicas_key], params.get("max_surge", 0), params.get("max_unavailable", 1))


def roll(pool: str, name: str, why: str, params: Mapping | None = None) -> Disruption:
    """A roll whose cause is outside the workload's own parameters; `params` (its JSON) gives the
    pace (None: Dynamo's 0/1 on one replica's worth, `pace(1)`)."""
    text = _pace_of(params) if params is not None else pace(1)
    return Disruption(pool, POOL, "workload-roll", f"{name}: {text} ({why})")
