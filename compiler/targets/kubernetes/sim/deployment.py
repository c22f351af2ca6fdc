"""The Deployment controller's rolling update, ported from kubernetes/kubernetes at commit 95f0849
(release-1.3x line; the arithmetic is unchanged since apps/v1):

  pkg/controller/deployment/rolling.go        rolloutRolling, reconcileNewReplicaSet,
                                              reconcileOldReplicaSets, cleanupUnhealthyReplicas,
                                              scaleDownOldReplicaSetsForRollingUpdate
  pkg/controller/deployment/util/deployment_util.go (277391e)
                                              NewRSNewReplicas, ResolveFenceposts, MaxUnavailable,
                                              MaxSurge
  staging/src/k8s.io/apimachinery/pkg/util/intstr/intstr.go
                                              GetScaledValueFromIntOrPercent

Pure functions over ReplicaSet counts (spec replicas and available replicas), as the upstream
functions are over ReplicaSet objects; the engine (engine.py) owns the pods. Left out: proportional
scaling of a Deployment resized mid-rollout (sync.go scale), pausing, rollback, minReadySeconds
(Kiln emits none: a Ready pod is Available at once), the Recreate strategy (Kiln emits none).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass
class RS:
    """A ReplicaSet as the rolling update sees it: `replicas` (spec) and `available` (status)."""
    name: str
    replicas: int
    available: int = 0
    created: int = 0  # creation order (ReplicaSetsByCreationTimestamp)


def scaled_value(value: int | str, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as it is, "N%" of `total` rounded up or down."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(\d+)%", value)
    if m is None:
        raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}")
    exact = int(m.group(1)) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def resolve_fenceposts(max_surge: int | str, max_unavailable: int | str, desired: int) -> tuple[int, int]:
    """deployment_util.go ResolveFenceposts: surge rounds up, unavailable down; both 0 -> unavailable 1
    (a rollout must be able to progress)."""
    surge = scaled_value(max_surge, desired, True)
    unavailable = scaled_value(max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable(replicas: int, max_surge: int | str, max_unavail: int | str) -> int:
    """deployment_util.go MaxUnavailable: 0 for a Deployment of 0 replicas, at most `replicas`."""
    if replicas == 0:
        return 0
    _, unavailable = resolve_fenceposts(max_surge, max_unavail, replicas)
    return min(unavailable, replicas)


def max_surge(replicas: int, max_surge_: int | str, max_unavail: int | str) -> int:
    surge, _ = resolve_fenceposts(max_surge_, max_unavail, replicas)
    return surge


def new_rs_new_replicas(replicas: int, surge: int | str, unavail: int | str, all_rss: list[RS], new: RS) -> int:
    """deployment_util.go NewRSNewReplicas (RollingUpdate): the new ReplicaSet grows until all
    ReplicaSets together hold replicas + maxSurge pods, never past `replicas`."""
    max_total = replicas + max_surge(replicas, surge, unavail)
    current = sum(r.replicas for r in all_rss)
    if current >= max_total:
        return new.replicas
    return new.replicas + min(max_total - current, replicas - new.replicas)


def reconcile_new(replicas: int, surge: int | str, unavail: int | str, all_rss: list[RS], new: RS) -> int | None:
    """rolling.go reconcileNewReplicaSet: the new ReplicaSet's replicas, or None when unchanged."""
    if new.replicas == replicas:
        return None
    if new.replicas > replicas:
        return replicas
    count = new_rs_new_replicas(replicas, surge, unavail, all_rss, new)
    return count if count != new.replicas else None


def cleanup_unhealthy(olds: list[RS], max_cleanup: int) -> int:
    """rolling.go cleanupUnhealthyReplicas: scale old ReplicaSets down by their unavailable pods,
    oldest first, at most `max_cleanup` in all; mutates `olds`, returns the count."""
    total = 0
    for rs in sorted(olds, key=lambda r: r.created):
        if total >= max_cleanup:
            break
        if rs.replicas == 0 or rs.replicas == rs.available:
            continue
        down = min(max_cleanup - total, rs.replicas - rs.available)
        rs.replicas -= down
        total += down
    return total


def scale_down_old(replicas: int, surge: int | str, unavail: int | str, all_rss: list[RS], olds: list[RS]) -> int:
    """rolling.go scaleDownOldReplicaSetsForRollingUpdate: available pods above
    replicas - maxUnavailable are taken from old ReplicaSets, oldest first; mutates `olds`."""
    min_available = replicas - max_unavailable(replicas, surge, unavail)
    available = sum(r.available for r in all_rss)
    if available <= min_available:
        return 0
    total, target = 0, available - min_available
    for rs in sorted(olds, key=lambda r: r.created):
        if total >= target:
            break
        if rs.replicas == 0:
            continue
        down = min(rs.replicas, target - total)
        rs.replicas -= down
        total += down
    return total


def reconcile_old(replicas: int, surge: int | str, unavail: int | str, all_rss: list[RS], olds: list[RS],
                  new: RS) -> int:
    """rolling.go reconcileOldReplicaSets: how many old pods go now (0: none may). Mutates `olds`."""
    if sum(r.replicas for r in olds) == 0:
        return 0
    all_pods = sum(r.replicas for r in all_rss)
    min_available = replicas - max_unavailable(replicas, surge, unavail)
    new_unavailable = new.replicas - new.available
    max_scaled_down = all_pods - min_available - new_unavailable
    if max_scaled_down <= 0:
        return 0
    cleaned = cleanup_unhealthy(olds, max_scaled_down)
    scaled = scale_down_old(replicas, surge, unavail, olds + [new], olds)
    return cleaned + scaled


def rollout_rolling(replicas: int, surge: int | str, unavail: int | str, olds: list[RS], new: RS) -> str:
    """rolling.go rolloutRolling, one pass: scale the new ReplicaSet up if it may, else old ones
    down. Mutates the ReplicaSets; returns "up", "down" or "" (nothing could move)."""
    all_rss = olds + [new]
    count = reconcile_new(replicas, surge, unavail, all_rss, new)
    if count is not None:
        new.replicas = count
        return "up"
    active = [r for r in olds if r.replicas > 0]  # controller.FilterActiveReplicaSets
    if reconcile_old(replicas, surge, unavail, all_rss, active, new) > 0:
        return "down"
    return ""


def complete(replicas: int, olds: list[RS], new: RS) -> bool:
    """deployment_util.go DeploymentComplete: every replica updated and available, no old pod."""
    return new.replicas == replicas and new.available == replicas and all(r.replicas == 0 for r in olds)
