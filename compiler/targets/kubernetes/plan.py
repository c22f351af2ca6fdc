"""What replacing a workload's objects does to its pool, for `kiln plan` (pure).

A workload's pods are replaced (rolled, one at a time) when anything in their template changes:
the device they request, the command, ports, probes, image repository or node selection; a change
of replica count adds or removes pods without touching the others. A new image of the same
repository also rolls the pods; the image kind reports that (`container-restart` of the pool).
"""

from __future__ import annotations

from typing import Mapping

from compiler.graph.kinds import POOL, Disruption
from compiler.params import Effect

from .runtime import PROGRESS_DEADLINE_S

RECREATE_CODE = "K855"  # compiler/checks/kubernetes.py KubernetesUpdateForbidden

# What a workload's parameters do when they change (declared on each field of DeploymentParams and
# the DGD's Worker; workload_disruptions derives the plan's lines from them)
ROLL = Effect("roll", "in the pod template: the controller replaces the pods one at a time (k8s.io/kubernetes "
                      "pkg/controller/deployment/sync.go getNewReplicaSet: a new ReplicaSet per pod-template-hash; "
                      "Dynamo's worker hash over the workers' templates, docs rolling-update.md)", ("workload-roll",))
SCALE = Effect("scale", "spec.replicas: pods added or removed, the others untouched", ("replicas",))
IDENTITY = Effect("replace", "names the object or where it lives: another value is another object")
UNREAD = Effect("none", "no pod reads it: the rollout strategy, or a field another one carries into the template")


def down_for() -> str:
    """How long a deleted and re-created workload serves nothing, at most: a pull and a load."""
    return f"~{PROGRESS_DEADLINE_S // 60} min"


def recreate(pools: list[str], model: str, reasons: list[str]) -> list[Disruption]:
    """`recreate: <model> down for ~T`, once per pool the model runs on: a controller refuses the
    update, so the object must be deleted and created anew (never planned as `new`)."""
    text = f"recreate: {model} down for {down_for()} ({RECREATE_CODE}: {'; '.join(reasons)})"
    return [Disruption(p, POOL, "recreate", text) for p in sorted(set(pools))]


def short(value) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def workload_disruptions(pool: str, name: str, old: Mapping | None, new: Mapping, rolls: tuple[str, ...],
                         replicas_key: str = "replicas", device: str = "") -> list[Disruption]:
    """`old`/`new`: the workload's parameters as JSON; `rolls`: the keys whose change replaces the
    pods; `device`: what one replica requests, e.g. `1 x nvidia.com/mig-3g.40gb`."""
    if old is None:
        return [Disruption(pool, POOL, "workload-roll",
                           f"{name}: new, {new[replicas_key]} replica(s) of {device}")]
    out = []
    changed = [k for k in rolls if old.get(k) != new.get(k)]
    if changed:
        what = ", ".join(f"{k} {short(old.get(k))} -> {short(new.get(k))}" for k in changed)
        out.append(Disruption(pool, POOL, "workload-roll", f"{name}: pods replaced one at a time ({what})"))
    b, a = old.get(replicas_key), new[replicas_key]
    if b != a:
        delta = a - (b or 0)
        out.append(Disruption(pool, POOL, "replicas", f"{name}: {b} -> {a} replicas ({delta:+d} x {device})"))
    return out


def roll(pool: str, name: str, why: str) -> Disruption:
    return Disruption(pool, POOL, "workload-roll", f"{name}: pods replaced one at a time ({why})")
