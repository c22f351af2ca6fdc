"""The release manifest: every artifact by digest, the spec digest, toolchain pins and the per-host
plan. It contains nothing that depends on the machine, the time or the store's location, so the
same spec gives the same bytes anywhere."""

from __future__ import annotations

import hashlib

from compiler.store.canonical import canonical_json, pretty_json

from .model import Graph


def spec_digest(spec) -> str:
    """Digest of the parsed spec (defaults filled in): comments and formatting do not count."""
    return "sha256:" + hashlib.sha256(canonical_json(spec.model_dump(mode="json"))).hexdigest()


def build_manifest(graph: Graph, trees: dict[str, str | None], spec, resolved,
                   pending: dict[str, str] | None = None) -> bytes:
    """`pending`: action id -> why it was deferred. A manifest with pending artifacts says
    `complete: false`; a builder that can run them completes it (same keys, same bytes otherwise)."""
    pending = pending or {}
    artifacts = []
    for aid in sorted(graph.actions):
        entry = {"id": aid, "kind": graph.actions[aid].kind, "key": graph.keys[aid], "tree": trees.get(aid)}
        if aid in pending:
            entry["pending"] = pending[aid]
            entry["needs"] = list(graph.actions[aid].needs)
        artifacts.append(entry)
    hosts = {}
    for name, rh in sorted(resolved.hosts.items()):
        units = [{"id": u.id, "model": u.model, "gpus": list(u.gpu_indexes),
                  "mig_profile": u.mig.profile.name if u.mig else None} for u in resolved.units if u.host == name]
        plan_id = f"host-plan/{name}"
        hosts[name] = {"gpu": rh.gpu.name, "gpu_count": rh.spec.count, "units": units,
                       "host_plan": trees.get(plan_id)}
    doc = {
        "kind": "kiln.release/v1",
        "complete": not pending,
        "spec": {"name": spec.name, "digest": spec_digest(spec), "target": spec.target},
        "toolchain": spec.toolchain.model_dump(mode="json"),
        "artifacts": artifacts,
        "hosts": hosts,
    }
    return pretty_json(doc)
