"""Argo CD's sync of a tree over the live objects, ported from argoproj/gitops-engine (the engine of
Argo CD 2.11+; read at 5baed56, 2025-12, the rules below unchanged since 5fd9f44, 2024-01) and
argoproj/argo-cd (controller/sync.go, read at 9fb385d):

  pkg/sync/reconcile.go     Reconcile: a live object the Application tracks (the cluster cache's
                            GetManagedLiveObjs, pkg/cache/cluster.go) that no desired object
                            matches by (group, kind, namespace, name) becomes a prune task; a
                            desired object is never pruned, whoever wrote its live fields
  pkg/sync/sync_tasks.go    tasks sort by phase, then wave (argocd.argoproj.io/sync-wave of the
                            desired object, of the LIVE one for a prune; default 0), then kind
                            (kindOrder), then name
  pkg/sync/sync_context.go  getSyncTasks: prune tasks' waves are swapped symmetrically over the
                            sorted distinct prune waves (reversed order); a prune task whose LIVE
                            object's sync-options hold PruneLast=true moves to the last sync wave + 1
                            (over every Sync-phase task, 0 at least). Sync() recomputes the tasks
                            from the live state each round and runs one wave at a time: the next
                            starts once every resource of this one is healthy (Degraded fails the
                            operation). runTasks: a wave's prunes run first, then its applies.
                            pruneObject: a prune is skipped ("ignored (no prune)") when the LIVE
                            object's sync-options hold Prune=false, read when its wave runs
  pkg/sync/resource/annotations.go  HasAnnotationOption: the annotation split on ',', each trimmed,
                            compared whole
  argo-cd controller/sync.go  SyncAppState with RespectIgnoreDifferences=true: normalizeTargetResources
                            copies the ignored fields' live values into the desired object before it
                            is applied; with no live object the desired one is applied as it is
  pkg/health                Deployment Progressing until updated == available == replicas with no old
                            pod, Degraded on ProgressDeadlineExceeded (health_deployment.go); Job
                            Progressing while running, Degraded when failed (health_job.go); PDB
                            Healthy, also with InsufficientPods (resource_customizations health.lua)

Left out: hooks (Kiln emits none), the 2 s wave delay, selective sync, server-side apply diffs, the
applies of unchanged objects (a no-op `kubectl apply`), ignoreDifferences other than whole
jsonPointers, and kubectl's three-way merge of an object written by another client.
"""

from __future__ import annotations

from dataclasses import dataclass

WAVE = "argocd.argoproj.io/sync-wave"
OPTIONS = "argocd.argoproj.io/sync-options"
DISABLE_PRUNE, PRUNE_LAST = "Prune=false", "PruneLast=true"  # pkg/sync/common/types.go
RESPECT_IGNORE = "RespectIgnoreDifferences=true"
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


def _annotations(obj: dict) -> dict:
    return ((obj.get("metadata") or {}).get("annotations") or {})


def has_option(obj: dict, option: str) -> bool:
    """resource/annotations.go HasAnnotationOption on the sync-options annotation."""
    return option in {v.strip() for v in str(_annotations(obj).get(OPTIONS, "")).split(",") if v.strip()}


def wave_of(obj: dict) -> int:
    return int(_annotations(obj).get(WAVE, "0"))


def prune_last(obj: dict) -> bool:
    return has_option(obj, PRUNE_LAST)


def prune_result(live: dict, prune: bool = True) -> tuple[str, str]:
    """sync_context.go pruneObject: (result code, message) for the live object a prune task holds."""
    if not prune:
        return "PruneSkipped", "ignored (requires pruning)"
    if has_option(live, DISABLE_PRUNE):
        return "PruneSkipped", "ignored (no prune)"
    return "Pruned", "pruned"


def key_of(obj: dict) -> tuple:
    md = obj.get("metadata") or {}
    return (obj["kind"], md.get("namespace", ""), md["name"])


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def plan(live: dict[tuple, dict], desired: dict[tuple, dict], tracked: set | None = None,
         app: dict | None = None) -> list[tuple[int, list[Task]]]:
    """The sync's waves in order: [(wave, tasks)], applies of every desired object that is new or
    differs (outside the Application's ignoreDifferences), prune tasks for the live objects the
    Application tracks (`tracked`, default all of `live`) that the tree no longer holds; in a wave
    the prunes come first (runTasks)."""
    tracked = set(live) if tracked is None else tracked
    tasks = [Task(k, wave_of(o), False) for k, o in desired.items()
             if k not in live or _compared(app, live[k]) != _compared(app, o)]
    prunes = [Task(k, wave_of(o), True, prune_last(o)) for k, o in live.items() if k in tracked and k not in desired]
    waves = sorted({t.wave for t in prunes})  # getSyncTasks: over every prune task, PruneLast ones included
    flipped = {w: waves[len(waves) - 1 - i] for i, w in enumerate(waves)}  # reversed prune waves
    swapped = [Task(t.key, flipped[t.wave], True, t.prune_last) for t in prunes]
    # the last Sync-phase wave + 1, over every desired object (each is a task) and the swapped prunes
    last = max([0] + [wave_of(o) for o in desired.values()] + [t.wave for t in swapped]) + 1
    tasks += [t if not t.prune_last else Task(t.key, last, True, True) for t in swapped]
    out: dict[int, list[Task]] = {}
    for t in tasks:
        out.setdefault(t.wave, []).append(t)
    return [(w, sorted(ts, key=lambda t: (not t.prune, _kind_rank(t.key[0]), t.key[2]))) for w, ts in sorted(out.items())]


def ignored_pointers(app: dict | None, obj: dict) -> list[str]:
    """The Application's ignoreDifferences jsonPointers that match `obj` (group, kind, name, namespace)."""
    out = []
    md = obj.get("metadata") or {}
    group = obj.get("apiVersion", "").rpartition("/")[0]
    for rule in ((app or {}).get("spec") or {}).get("ignoreDifferences") or []:
        if rule.get("kind") == obj.get("kind") and rule.get("group", "") == group \
                and rule.get("name", md.get("name")) == md.get("name") \
                and rule.get("namespace", md.get("namespace")) == md.get("namespace"):
            out += rule.get("jsonPointers") or []
    return out


def _compared(app: dict | None, obj: dict) -> dict:
    """The fields the diff compares: ignoreDifferences' top-level fields left out."""
    fields = {p.strip("/").split("/")[0] for p in ignored_pointers(app, obj)}
    return {k: v for k, v in obj.items() if k not in fields}


def prunes(app: dict | None) -> bool:
    """An automated sync prunes when syncPolicy.automated.prune says so (Kiln's Application does);
    with no Application read, as Kiln writes it."""
    if app is None:
        return True
    return bool((((app.get("spec") or {}).get("syncPolicy") or {}).get("automated") or {}).get("prune"))


def respects_ignored(app: dict | None) -> bool:
    return RESPECT_IGNORE in ((((app or {}).get("spec") or {}).get("syncPolicy") or {}).get("syncOptions") or [])


def applied(app: dict | None, desired: dict, live: dict | None) -> dict:
    """The object a sync applies (argo-cd controller/sync.go normalizeTargetResources): with
    RespectIgnoreDifferences and a live object, each ignored top-level field keeps its live value."""
    if live is None or not respects_ignored(app):
        return desired
    out = dict(desired)
    for pointer in ignored_pointers(app, desired):
        field = pointer.strip("/").split("/")[0]  # Kiln ignores whole top-level fields (/data)
        if field in live:
            out[field] = live[field]
        else:
            out.pop(field, None)
    return out
