"""The lock file beside a spec (`kiln.yaml` -> `kiln.lock`): the MIG placements of its last accepted
layout, so that a layout change keeps every unchanged instance where it is.

Placements are derived, so left alone they could move when a neighbour changes (a smaller profile
frees slots, and the search packs towards slot 0). Keeping them from the store's last build would
make a host's plan depend on a machine's history, and a `git revert` would not give the earlier
plan back. The lock is a committed input instead: the placement pass prefers its starts, the
result is a function of the files in the repository, and reverting the spec and its lock together
restores the earlier placements byte for byte. `kiln lock SPEC` writes it from what the spec gets.

Format (JSON, canonical): {"kind": "kiln.lock/v1", "spec": name,
  "placements": {host: {gpu index: [{"profile", "serves", "start"}, ...]}},
  "workloads": {node pool: {model[/role]: [shape of <model>-<pool>, shapes named <model>-<pool>-<shape>...]}},
  "surges": {node pool: {workload: maxSurge}},
  "pods": {node pool: {workload: {"shape", "replicas", "per_node"}}}}.
"workloads" (every model on a node pool) keeps a Kubernetes workload's name when a sibling shape
comes or goes (review M7): a Deployment's name is its identity, and a name that moved to the
remaining shape would prune that shape's Deployment and roll the other onto it. A model with
several shapes that the lock does not record is warned (K953).
"surges" (runtime dynamo) keeps each Dynamo worker's surge while the pool still has the room for it
(k8s_dgd.worker_surge): the surge is in the worker's pod template, which Dynamo's worker hash covers,
so a surge that followed the pool's free room would roll one model's workers on another model's edit.
"pods" (runtime deployment) is each Deployment's device shape, replicas and pods per node as last
locked: when an edit changes a workload's shape on a pool with no room to surge (tp 8 -> 4), its
rolling update must remove a node's worth of the old pods before any new pod fits, which only the
old counts tell (k8s_deployment.reshape_unavailable).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from compiler.boundedjson import BoundedJSONError, loads_bounded
from compiler.store.canonical import pretty_json

KIND = "kiln.lock/v1"


@dataclass(frozen=True)
class LockedInstance:
    profile: str
    serves: str
    start: int


class LockError(ValueError):
    """The lock file is not a Kiln lock file; `line` and `column` are 1-based (1 when unknown)."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


# What the format needs, with room: a placed instance takes about 150 bytes of the canonical form,
# and a spec of at most 1 MiB places at most about 100,000 of them (a GPU index list repeats its
# instances on every GPU). The document nests 6 levels; a start is a slot number (< 100).
MAX_LOCK_BYTES = 16 << 20
MAX_DEPTH = 8
MAX_NUMBER_CHARS = 20


def lock_path(spec_path: Path) -> Path:
    return spec_path.with_suffix(".lock")


def parse_lock(text: str) -> dict[str, dict[int, tuple[LockedInstance, ...]]]:
    """host -> GPU index -> its locked instances."""
    try:
        doc = loads_bounded(text, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS, max_chars=MAX_LOCK_BYTES)
    except BoundedJSONError as e:
        raise LockError(e.message, e.line, e.column) from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or not isinstance(doc.get("placements"), dict):
        raise LockError(f"not a Kiln lock file (it must be a JSON object with \"kind\": \"{KIND}\" and "
                        "\"placements\")")
    out: dict[str, dict[int, tuple[LockedInstance, ...]]] = {}
    for host, gpus in doc["placements"].items():
        if not isinstance(gpus, dict):
            raise LockError(f"placements.{_name(host)} is not an object")
        out[host] = {}
        for index, instances in gpus.items():
            # ASCII digits only: str.isdigit() takes "²" and "٣" too
            if not (index.isascii() and index.isdigit() and len(index) <= 4 and isinstance(instances, list)):
                raise LockError(f"placements.{_name(host)}.{_name(index)}: expected a GPU index and a list of instances")
            out[host][int(index)] = tuple(_instance(i, f"placements.{_name(host)}.{index}") for i in instances)
    return out


def parse_lock_workloads(text: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """pool -> model[/role] -> its shapes as the lock names them (the bare name's first); {} without
    the key. Call after parse_lock accepted the text."""
    doc = loads_bounded(text, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS, max_chars=MAX_LOCK_BYTES)
    names = doc.get("workloads", {})
    ok = isinstance(names, dict) and all(
        isinstance(models, dict) and all(isinstance(v, list) and v and all(isinstance(x, str) and len(x) <= 64
                                                                          for x in v) for v in models.values())
        for models in names.values())
    if not ok:
        raise LockError("workloads: expected {pool: {model: [shape, ...]}}")
    return {pool: {m: tuple(v) for m, v in models.items()} for pool, models in names.items()}


def parse_lock_surges(text: str) -> dict[str, dict[str, int]]:
    """pool -> workload -> its locked maxSurge; {} without the key. Call after parse_lock accepted the text."""
    doc = loads_bounded(text, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS, max_chars=MAX_LOCK_BYTES)
    surges = doc.get("surges", {})
    ok = isinstance(surges, dict) and all(
        isinstance(ws, dict) and all(len(w) <= 253 and type(n) is int and 0 <= n < 10000 for w, n in ws.items())
        for ws in surges.values())
    if not ok:
        raise LockError("surges: expected {pool: {workload: a number of pods}}")
    return {pool: dict(ws) for pool, ws in surges.items()}


def parse_lock_pods(text: str) -> dict[str, dict[str, dict[str, int | str]]]:
    """pool -> workload -> {"shape", "replicas", "per_node"} as last locked; {} without the key. Call
    after parse_lock accepted the text."""
    doc = loads_bounded(text, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS, max_chars=MAX_LOCK_BYTES)
    pods = doc.get("pods", {})
    ok = isinstance(pods, dict) and all(
        isinstance(ws, dict) and all(
            len(w) <= 253 and isinstance(e, dict) and set(e) == {"shape", "replicas", "per_node"}
            and isinstance(e["shape"], str) and len(e["shape"]) <= 64
            and all(type(e[k]) is int and 0 <= e[k] < 100000 for k in ("replicas", "per_node"))
            for w, e in ws.items())
        for ws in pods.values())
    if not ok:
        raise LockError("pods: expected {pool: {workload: {shape, replicas, per_node}}}")
    return {pool: {w: dict(e) for w, e in ws.items()} for pool, ws in pods.items()}


def _name(key: str) -> str:
    return key if len(key) <= 64 else key[:61] + "..."


def _instance(item: Any, where: str) -> LockedInstance:
    if not (isinstance(item, dict) and isinstance(item.get("profile"), str) and isinstance(item.get("serves"), str)
            and type(item.get("start")) is int and 0 <= item["start"] < 1000):
        raise LockError(f"{where}: each instance needs profile and serves (strings) and start (a slot number)")
    return LockedInstance(item["profile"], item["serves"], item["start"])


def render_lock(spec_name: str, placements: Mapping[str, Mapping[int, list[LockedInstance]]],
                workloads: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
                surges: Mapping[str, Mapping[str, int]] | None = None,
                pods: Mapping[str, Mapping[str, Mapping[str, int | str]]] | None = None) -> bytes:
    doc: dict[str, Any] = {"kind": KIND, "spec": spec_name, "placements": {
        host: {str(i): [{"profile": x.profile, "serves": x.serves, "start": x.start} for x in insts]
               for i, insts in sorted(gpus.items())}
        for host, gpus in sorted(placements.items()) if gpus}}
    if workloads:
        doc["workloads"] = {p: {m: list(v) for m, v in sorted(ms.items())} for p, ms in sorted(workloads.items()) if ms}
    if surges:
        doc["surges"] = {p: dict(sorted(ws.items())) for p, ws in sorted(surges.items()) if ws}
    if pods:
        doc["pods"] = {p: {w: dict(sorted(e.items())) for w, e in sorted(ws.items())}
                       for p, ws in sorted(pods.items()) if ws}
    return pretty_json(doc)



def lock_entries(ir) -> dict[str, dict[int, tuple[LockedInstance, ...]]]:
    """host -> GPU index -> the instances as the analysed IR places them (what `kiln lock` writes)."""
    out: dict[str, dict[int, tuple[LockedInstance, ...]]] = {}
    for name, host in ir.hosts.items():
        gpus = {}
        for a_idx, slots in host.assignment_slots.items():
            for g in host.spec.gpus[a_idx].indexes:
                result = host.gpu_placements.get(g)
                if result is None or not result.ok:
                    continue
                gpus[g] = tuple(LockedInstance(slots[p.request_index].instance.profile,
                                               slots[p.request_index].instance.serves, p.start)
                                for p in sorted(result.placed, key=lambda p: p.request_index))
        if gpus:
            out[name] = gpus
    return out
