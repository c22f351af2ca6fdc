"""Dynamo's operator rolling a DynamoGraphDeployment's workers (its managed rolling update), ported
from ai-dynamo/dynamo deploy/operator/internal/controller/dgd_worker_rollout_reconciler.go
(main at 03dfed81; the same arithmetic in the index's earlier v1beta1 revision with the v1/v2
worker hashes that the ai-dynamo 1.6.1 release reads, see catalog/data/k8s_controllers.json
dynamo_webhook.rolling_update):

  resolveRollingUpdateParams   the surge/unavailable annotations of a component's pod template
  buildRollingUpdateContext    per worker component, one pass: the old generations' and the new
                               generation's replica targets (its RollingUpdate branch)
  allocateOldWorkerDCDReplicas the old target spread over several old generations

A worker generation is one DynamoComponentDeployment (its own Deployment) per component, named by
the worker hash; the engine keeps each generation as a ReplicaSet-like `deployment.RS` (`replicas`
is the DCD's spec.replicas, `available` its pods Ready). Unlike the Deployment controller
(deployment.py), both targets come from the same observation in one pass, and when surge and
unavailable both resolve to 0 the operator forces surge 1 (Kubernetes forces unavailable 1).
Left out: the Recreate strategy annotation (Kiln writes none), the drain-then-delete of old DCDs at
completion (they are at 0 replicas by then), the LWS pathway (multinode: Kiln writes none). A DGD
on the Grove pathway has no managed rolling update: Grove rolls its PodCliques (grove.py).
"""

from __future__ import annotations

from .deployment import RS, scaled_value


def resolve_params(max_surge: int | str, max_unavailable: int | str, desired: int) -> tuple[int, int]:
    """resolveRollingUpdateParams: percentages of `desired`, surge rounded up and unavailable down
    (intstr.GetScaledValueFromIntOrPercent); both 0 -> surge 1 "to guarantee progress"."""
    surge = scaled_value(max_surge, desired, True)
    unavailable = scaled_value(max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        surge = 1
    return surge, unavailable


def targets(desired: int, max_surge: int | str, max_unavailable: int | str, olds: list[RS],
            new: RS) -> tuple[int, int]:
    """buildRollingUpdateContext, RollingUpdate branch: (the old generations' total target, the new
    generation's target) from their spec replicas and available pods, computed together."""
    surge, unavailable = resolve_params(max_surge, max_unavailable, desired)
    min_available = desired - unavailable
    old_spec, old_available = sum(r.replicas for r in olds), sum(r.available for r in olds)
    new_unavailable = max(0, new.replicas - new.available)
    max_scaled_down = max(0, old_spec + new.replicas - min_available - new_unavailable)
    old_unhealthy = max(0, old_spec - old_available)
    surplus = max(0, old_available + new.available - min_available)
    old_target = max(0, old_spec - min(max_scaled_down, old_unhealthy + surplus))
    # the surge budget counts spec replicas, as the Deployment controller does: the scheduler decides the rest
    budget = max(0, desired + surge - old_spec - new.replicas)
    return old_target, min(desired, new.replicas + budget)


def allocate_old(olds: list[RS], old_target: int) -> dict[str, int]:
    """allocateOldWorkerDCDReplicas: each old generation starts at min(spec, available); a surplus
    over `old_target` is taken from the oldest first, a shortfall given back to the newest first
    (up to its spec)."""
    plan = {r.name: min(r.replicas, r.available) for r in olds}
    total = sum(plan.values())
    if total > old_target:
        left = total - old_target
        for r in sorted(olds, key=lambda r: (r.created, r.name)):
            take = min(plan[r.name], left)
            plan[r.name] -= take
            left -= take
    elif total < old_target:
        left = old_target - total
        for r in sorted(olds, key=lambda r: (-r.created, r.name)):
            give = min(r.replicas - plan[r.name], left)
            plan[r.name] += give
            left -= give
    return plan


def rollout(desired: int, max_surge: int | str, max_unavailable: int | str, olds: list[RS], new: RS) -> bool:
    """One reconcile of a worker component: set the new and old generations to their targets.
    Mutates the RSs; returns whether any target changed."""
    active = [r for r in olds if r.replicas > 0]
    old_target, new_target = targets(desired, max_surge, max_unavailable, active, new)
    moved = new_target != new.replicas
    new.replicas = new_target
    allocated = allocate_old(active, old_target)
    for rs in active:
        n = allocated[rs.name]
        moved |= rs.replicas != n
        rs.replicas = n
    return moved


def complete(desired: int, olds: list[RS], new: RS) -> bool:
    """completedWorkerComponents for one component: the new generation has `desired` ready pods and
    no old one has a ready pod left (the engine removes pods at once, so none are left at all)."""
    return new.available >= desired and all(r.replicas == 0 for r in olds)
