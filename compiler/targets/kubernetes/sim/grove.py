"""Grove rolling a PodClique: a DynamoGraphDeployment's worker on the Grove pathway (the spec's
kubernetes.dynamo.grove; nvidia.com/enable-grove on the DGD). Ported from ai-dynamo/grove main
(fcc3b3bb) operator/internal/controller/podclique/components/pod/rollingupdate.go (851af949)
processPendingUpdates, with the replica sync of syncflow.go runSyncFlow; the rule and its sources
are data in catalog/data/k8s_controllers.json rolling_update.grove_rollout.

One reconcile of a PodClique under update:

  deleteOldNonReadyPods      old-hash pods that are not Ready are deleted at once
  isCurrentPodUpdateComplete the Ready pod selected last must be replaced by a Ready new-hash pod
                             (new-hash Ready pods >= pods selected so far) before another is taken
  processPendingUpdates      while old-hash pods remain: wait while status.readyReplicas <
                             spec.minAvailable, else delete the oldest Ready old-hash pod
  runSyncFlow                create the missing pods, from the current template (new hash)

So maxUnavailable 1 and maxSurge 0 whatever the pool's room. The engine keeps the old-hash pods as
old generations (`deployment.RS`, oldest first) and the new-hash pods as the newest; `selected`
(ReadyPodsSelectedToUpdate, current and completed) lives on the engine's Deploy and is reset with
each new template (podclique/reconcilespec.go initOrResetUpdate). Left out: PodCliqueScalingGroups
(multinode), the OnDelete strategy, the PodGang scheduling gates (Kiln's workers are one pod each).
"""

from __future__ import annotations

from .deployment import RS


def rollout(desired: int, min_available: int, olds: list[RS], new: RS, selected: int) -> tuple[bool, int]:
    """One reconcile. Mutates the generations' replicas (their pods); returns (whether any changed,
    the pods selected for update so far)."""
    moved = False
    for rs in olds:  # deleteOldNonReadyPods
        if rs.replicas > rs.available:
            rs.replicas, moved = rs.available, True
    pending = sum(r.replicas for r in olds)
    # isCurrentPodUpdateComplete: the engine removes a deleted pod at once, so the count decides
    if pending and (selected == 0 or new.available >= selected):
        ready = new.available + sum(r.available for r in olds)  # status.readyReplicas, old and new
        if ready >= min_available:  # else wait: "ready replicas lesser than minAvailable, requeuing"
            oldest = next(r for r in sorted(olds, key=lambda r: (r.created, r.name)) if r.replicas)
            oldest.replicas -= 1  # getNextPodToUpdate: the oldest Ready old-hash pod
            oldest.available = min(oldest.available, oldest.replicas)
            selected, moved = selected + 1, True
    # runSyncFlow: the PodClique holds `desired` pods; what is missing is created with the new hash,
    # what is over (a scale-in) goes from the old hash first (DeletionSorter)
    over = sum(r.replicas for r in olds) + new.replicas - desired
    for rs in sorted(olds, key=lambda r: (r.created, r.name)):
        take = min(max(over, 0), rs.replicas)
        rs.replicas -= take
        over -= take
        moved |= take > 0
    target = max(0, desired - sum(r.replicas for r in olds))
    if target != new.replicas:
        new.replicas, moved = target, True
    return moved, selected
