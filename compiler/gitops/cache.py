"""The registry as a shared build cache: on a local miss, the executor asks here for the action's
key; a published artifact is fetched, verified blob by blob against its digests and imported
into the local store, so the action counts as cached instead of running.

A registry that cannot be reached or holds a bad artifact is a cache miss with a warning (the
action is built locally), never a failed build.
"""

from __future__ import annotations

import json
import sys

from compiler.store.local import ActionRecord, LocalStore, StoreError

from . import artifacts as oa
from .oci import Client, Registry, RegistryError, Unreachable


class RemoteCache:
    def __init__(self, registry: Registry, store: LocalStore, warn=None) -> None:
        self.registry = registry
        self.client = Client(registry)
        self.repo = registry.repo(oa.ARTIFACTS_REPO)
        self.store = store
        self.warn = warn or (lambda line: print(f"kiln: warning: {line}", file=sys.stderr))
        self.fetched: list[str] = []
        self.down: str | None = None  # why the registry is not asked any more (one warning, not one per action)

    def _unreachable(self, e: Unreachable) -> None:
        self.down = str(e)
        self.warn(f"cache {self.registry}: {e}; building without the cache")

    def has(self, key: str, kind: str) -> bool:
        if self.down:
            return False
        try:
            return self.client.manifest_digest(self.repo, oa.artifact_tag(kind, key)) is not None
        except Unreachable as e:
            self._unreachable(e)
            return False
        except RegistryError as e:
            self.warn(f"cache {self.registry}: {e}")
            return False

    def __call__(self, graph, aid: str, spec_name: str) -> ActionRecord | None:
        """The executor's hook: import the artifact for `aid` from the registry, or None."""
        if self.down:
            return None
        action, key = graph.actions[aid], graph.keys[aid]
        try:
            record = self._fetch(action.kind, key, aid)
        except Unreachable as e:
            self._unreachable(e)
            return None
        except (RegistryError, StoreError, ValueError, KeyError, TypeError) as e:
            self.warn(f"cache {self.registry}: {aid}: {e}; building it here")
            return None
        if record is not None:
            self.store.set_ref(spec_name, aid, key, action.record(graph.keys))
            self.fetched.append(aid)
        return record

    def _fetch(self, kind: str, key: str, aid: str) -> ActionRecord | None:
        got = self.client.get_manifest(self.repo, oa.artifact_tag(kind, key))
        if got is None:
            return None
        doc = json.loads(got[0])
        notes = doc.get("annotations") or {}
        if notes.get(oa.A_KEY) != key or notes.get(oa.A_KIND) != kind:
            raise ValueError(f"the artifact tagged for {key} carries another key or kind")
        tree = doc["config"]["digest"]
        tree_bytes = self.client.read_blob(self.repo, tree)  # verified against its digest
        if self.store.put_bytes(tree_bytes) != tree:
            raise ValueError("tree manifest digest mismatch")
        for entry in self.store.tree(tree):
            if self.store.has_blob(entry.digest) and self.store.blob_path(entry.digest).stat().st_size == entry.size:
                continue
            with self.store.workdir("fetch-") as work:
                part = work / "blob"
                with open(part, "wb") as f:
                    self.client.fetch_blob(self.repo, entry.digest, f)
                if self.store.put_file(part) != entry.digest:
                    raise ValueError(f"{entry.path}: content does not match the tree")
        record = ActionRecord(key, kind, aid, tree, 0.0, None)  # no log: it was not built here
        self.store.put_action(record)
        return record


class CacheSpecError(ValueError):
    """The cache target is not a registry reference (host[:port][/namespace])."""


def remote_for(target: str, store: LocalStore) -> RemoteCache:
    try:
        return RemoteCache(Registry.parse(target), store)
    except RegistryError as e:
        raise CacheSpecError(str(e)) from None
