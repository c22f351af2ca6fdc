"""The release manifest: every artifact by digest, the spec digest, toolchain pins and the per-host
plan. It contains nothing that depends on the machine, the time or the store's location, so the
same spec gives the same bytes anywhere."""

from __future__ import annotations

import hashlib
from typing import Any

from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.ir import Resolved
from compiler.store.canonical import canonical_json, pretty_json
from compiler.store.local import LocalStore


def spec_digest(spec) -> str:
    """Digest of the parsed spec (defaults filled in): comments and formatting do not count."""
    return "sha256:" + hashlib.sha256(canonical_json(spec.model_dump(mode="json"))).hexdigest()


class _StoreTree:
    """A built artifact's files, read from the store (what ActionKind.manifest_entry reads)."""

    def __init__(self, store: LocalStore, tree: str) -> None:
        self._store, self._files = store, {e.path: e.digest for e in store.tree(tree)}

    def read(self, path: str) -> bytes | None:
        digest = self._files.get(path)
        return None if digest is None else self._store.read_bytes(digest)


def manifest_sections(graph: Graph, trees: dict[str, str | None], store: LocalStore,
                      kinds: KindRegistry) -> dict[str, dict[str, Any]]:
    """What the kinds add to the manifest about their built artifacts (`quality`: the figures each
    quality gate compared; `images`: each host's serving image by digest), by section and name."""
    out: dict[str, dict[str, Any]] = {}
    for aid in graph.order:
        action, tree = graph.actions[aid], trees.get(aid)
        if not tree:
            continue
        entry = kinds[action.kind].manifest_entry(action.params, _StoreTree(store, tree))
        if entry is not None:
            section, name, value = entry
            out.setdefault(section, {})[name] = value
    return out


def build_manifest(graph: Graph, trees: dict[str, str | None], ir: Resolved,
                   pending: dict[str, str] | None = None, sections: dict[str, dict[str, Any]] | None = None) -> bytes:
    """`pending`: action id -> why it was deferred. A manifest with pending artifacts says
    `complete: false`; a builder that can run them completes it (same keys, same bytes otherwise).
    `sections`: from `manifest_sections`, each written sorted by name."""
    pending = pending or {}
    spec = ir.spec
    artifacts = []
    for aid in sorted(graph.actions):
        entry = {"id": aid, "kind": graph.actions[aid].kind, "key": graph.keys[aid], "tree": trees.get(aid)}
        if aid in pending:
            entry["pending"] = pending[aid]
            entry["needs"] = list(graph.actions[aid].needs)
        artifacts.append(entry)
    hosts = {}
    for name, rh in sorted(ir.hosts.items()):
        units = [{"id": u.id, "model": u.model, "gpus": list(u.gpu_indexes),
                  "mig_profile": u.mig.profile.name if u.mig else None} for u in ir.host_units(name)]
        hosts[name] = {"gpu": rh.gpu.name, "gpu_count": rh.spec.count, "units": units,
                       "host_plan": trees.get(f"host-plan/{name}")}
    doc: dict[str, Any] = {
        "kind": "kiln.release/v1",
        "complete": not pending,
        "spec": {"name": spec.name, "digest": spec_digest(spec), "target": spec.target},
        "toolchain": spec.toolchain.model_dump(mode="json"),
        "artifacts": artifacts,
        "hosts": hosts,
    }
    for section, entries in sorted((sections or {}).items()):
        if entries:
            doc[section] = dict(sorted(entries.items()))
    return pretty_json(doc)
