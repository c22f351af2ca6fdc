"""PodDisruptionBudgets and the Eviction API, ported from kubernetes/kubernetes (release-1.3x):

  pkg/controller/disruption/disruption.go   getExpectedPodCount (maxUnavailable: the scale of the
                                            pods' controllers, each once; desiredHealthy =
                                            expected - maxUnavailable, not below 0), countHealthyPods
                                            (Ready pods), updatePdbStatus (disruptionsAllowed =
                                            currentHealthy - desiredHealthy, not below 0)
  pkg/registry/core/pod/storage/eviction.go EvictionREST.Create: a Pending pod ignores its budget
                                            (canIgnorePDB); more than one budget is an error; a
                                            Running pod that is not Ready may go while the budget is
                                            healthy (unhealthyPodEvictionPolicy IfHealthyBudget, the
                                            default); else checkAndDecrement: 429 while
                                            disruptionsAllowed is 0, otherwise one fewer allowed

Left out: percentages in maxUnavailable/minAvailable (Kiln emits integers), DisruptedPods' two-minute
expiry (a pod's deletion is seen at once here), the AlwaysAllow policy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Budget:
    name: str  # namespace/name
    selector: dict  # matchLabels
    max_unavailable: int

    def selects(self, pod: PodView) -> bool:
        return self.name.split("/", 1)[0] == pod.namespace and all(
            pod.labels.get(k) == v for k, v in self.selector.items())


@dataclass
class PodView:
    name: str
    namespace: str
    labels: dict
    controller_scale: tuple[str, int]  # (its Deployment, that Deployment's spec.replicas)
    phase: str  # Pending or Running
    ready: bool


def status(budget: Budget, pods: list[PodView]) -> tuple[int, int, int]:
    """(currentHealthy, desiredHealthy, disruptionsAllowed) of one budget."""
    mine = [p for p in pods if budget.selects(p)]
    expected = sum(dict(p.controller_scale for p in mine).values())
    desired = max(0, expected - budget.max_unavailable)
    healthy = sum(1 for p in mine if p.ready)
    return healthy, desired, max(0, healthy - desired)


def evict(pod: PodView, budgets: list[Budget], pods: list[PodView], seen: dict[str, list[int]]) -> str | None:
    """None when the eviction is accepted (the caller deletes the pod), else the API's refusal.
    `seen`: budget name -> [currentHealthy, desiredHealthy, disruptionsAllowed] as the status holds
    them in this round (computed once, decremented by each accepted eviction)."""
    if pod.phase == "Pending":
        return None
    mine = [b for b in budgets if b.selects(pod)]
    if not mine:
        return None
    if len(mine) > 1:
        return "500: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    b = mine[0]
    if b.name not in seen:
        seen[b.name] = list(status(b, pods))
    healthy, desired, left = seen[b.name]
    if not pod.ready and healthy >= desired:
        return None
    if left <= 0:
        return f"429: Cannot evict pod as it would violate the pod's disruption budget ({b.name})"
    seen[b.name][2] = left - 1
    return None



def devices(w) -> int:
    """The devices (GPUs or MIG slices, nvidia.com/*) one pod of a workload takes; 1 for none."""
    return sum(w.requests.values()) or 1


def declared_floor(workloads: list, budgets: list[Budget]) -> dict[str, dict[str, int]]:
    """node pool -> model -> the devices (devices() per pod) of the ready pods the tree declares it
    keeps there during a voluntary disruption: per budget, its desiredHealthy (status() above: the
    replicas of the workloads it selects, less its maxUnavailable, which Kiln derives from
    node_pool.max_unavailable), summed over the budgets of the model's workloads on the pool. In
    devices, so that a change of pod shape (tp 4 -> 8: 4 pods -> 2) compares its revisions' floors.
    `workloads`: the revision's (model, pool, namespace, replicas, pod labels, requests); a workload
    no budget selects declares no floor."""
    out: dict[str, dict[str, int]] = {}
    for b in budgets:
        ns = b.name.split("/", 1)[0]
        mine = [w for w in workloads if w.namespace == ns and all(w.labels.get(k) == v for k, v in b.selector.items())]
        for pool, model in sorted({(w.pool, w.model) for w in mine}):
            of = [w for w in mine if (w.pool, w.model) == (pool, model)]
            expected = sum(w.replicas for w in of)
            per_pod = sum(w.replicas * devices(w) for w in of) // max(1, expected)
            floors = out.setdefault(pool, {})
            floors[model] = floors.get(model, 0) + max(0, expected - b.max_unavailable) * per_pod
    return out
