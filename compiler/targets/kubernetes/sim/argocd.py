"""The order in which Argo CD applies and prunes a tree's objects, ported from argoproj/gitops-engine
(v0.7.x, the engine of Argo CD 2.11+):

  pkg/sync/sync_tasks.go    tasks sort by phase, then wave (argocd.argoproj.io/sync-wave, default 0),
                            then kind (kindOrder: Namespace ... ConfigMap, ServiceAccount, Role,
                            RoleBinding ... Service, Deployment ... Job), then name; here a wave's
                            applies come before its prunes (not read upstream: an assumption)
  pkg/sync/sync_context.go  one wave at a time: the next starts once every resource of this one is
                            healthy (Degraded fails the operation, 484-487); prune tasks run in
                            reversed wave order (911-938, 5fd9f44, 2024-01), PruneLast=true prunes
                            after every other wave
  pkg/health                Deployment Progressing until updated == available == replicas with no old
                            pod, Degraded on ProgressDeadlineExceeded (health_deployment.go); Job
                            Progressing while running, Degraded when failed (health_job.go); PDB
                            Healthy, also with InsufficientPods (resource_customizations health.lua)

Left out: hooks (Kiln emits none), the 2 s wave delay, selective sync, server-side apply diffs.
"""

from __future__ import annotations

from dataclasses import dataclass

WAVE = "argocd.argoproj.io/sync-wave"
OPTIONS = "argocd.argoproj.io/sync-options"
# sync_tasks.go kindOrder (the kinds a Kiln tree holds, in the upstream's order)
KIND_ORDER = ("Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
              "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
              "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
              "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList",
              "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController",
              "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
              "IngressClass", "Ingress", "APIService")


@dataclass(frozen=True)
class Task:
    key: tuple  # (kind, namespace, name)
    wave: int
    prune: bool
    prune_last: bool = False


def wave_of(obj: dict) -> int:
    return int(((obj.get("metadata") or {}).get("annotations") or {}).get(WAVE, "0"))


def prune_last(obj: dict) -> bool:
    return "PruneLast=true" in ((obj.get("metadata") or {}).get("annotations") or {}).get(OPTIONS, "")


def key_of(obj: dict) -> tuple:
    md = obj.get("metadata") or {}
    return (obj["kind"], md.get("namespace", ""), md["name"])


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def plan(live: dict[tuple, dict], desired: dict[tuple, dict]) -> list[tuple[int, list[Task]]]:
    """The sync's waves in order: [(wave, tasks)], applies of every desired object that is new or
    differs, prunes of live objects the tree no longer holds."""
    tasks = [Task(k, wave_of(o), False) for k, o in desired.items() if live.get(k) != o]
    prunes = [Task(k, wave_of(o), True, prune_last(o)) for k, o in live.items() if k not in desired]
    waves = sorted({t.wave for t in prunes if not t.prune_last})
    flipped = {w: waves[len(waves) - 1 - i] for i, w in enumerate(waves)}  # reversed prune waves
    tasks += [Task(t.key, flipped[t.wave], True) for t in prunes if not t.prune_last]
    last = [t for t in prunes if t.prune_last]
    out: dict[int, list[Task]] = {}
    for t in tasks:
        out.setdefault(t.wave, []).append(t)
    ordered = [(w, sorted(ts, key=lambda t: (t.prune, _kind_rank(t.key[0]), t.key[2]))) for w, ts in sorted(out.items())]
    if last:
        ordered.append((max([w for w, _ in ordered] + [0]), sorted(last, key=lambda t: t.key)))
    return ordered
