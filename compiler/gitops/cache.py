"""The registry as a shared build cache: on a local miss, the executor asks here for the action's
key; a published artifact is fetched, verified blob by blob against its digests and imported
into the local store, so the action counts as cached instead of running.

A registry that cannot be reached or holds a bad artifact is a cache miss with a warning (the
action is built locally), never a failed build. What a registry sends is not trusted: a tree
manifest is checked (compiler/store/records.py: relative, normalized paths only) before anything of
it is stored, so an artifact that names '../../x' is refused and built here.

Time is bounded: each request waits at most KILN_CACHE_TIMEOUT_S (default 10 s) per socket
operation, the first request that gets no answer makes the cache give up on that registry for the
rest of the build, and KILN_CACHE_BUDGET_S (default 3600 s) is the most time the cache may take in
all: a deadline that holds during a transfer too (a registry that drips a byte at a time is cut off
when it passes), after which no new request starts. Each of these is said once. Every read is
bounded by what the artifact's manifest and tree say (compiler/gitops/oci.py).
"""

from __future__ import annotations

import math
import os
import sys
import time

from compiler.store.local import ActionRecord, LocalStore, StoreError
from compiler.store.records import is_digest, parse_tree

from . import artifacts as oa
from .oci import (Client, Registry, RegistryDeadline, RegistryError, RegistryServerError, RegistryUnreachable,
                  json_object, redact)

CACHE_TIMEOUT_S = 10.0
CACHE_BUDGET_S = 3600.0
MAX_TREE_BYTES = 64 << 20  # a tree manifest lists files by path and digest: a few MB for the largest model


MAX_SECONDS = 30 * 86400.0  # "no limit" in practice: inf or 1e308 would overflow the deadline arithmetic


def _seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment (a bad value: the default; inf and values
    past MAX_SECONDS: MAX_SECONDS)."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    if math.isnan(value) or value <= 0:
        return default
    return min(value, MAX_SECONDS)


class RemoteCache:
    def __init__(self, registry: Registry, store: LocalStore, warn=None, timeout: float | None = None,
                 budget: float | None = None) -> None:
        self.registry = registry
        self.client = Client(registry, timeout if timeout is not None else _seconds("KILN_CACHE_TIMEOUT_S",
                                                                                    CACHE_TIMEOUT_S))
        self.repo = registry.repo(oa.ARTIFACTS_REPO)
        self.store = store
        self._warn = warn or (lambda line: print(f"kiln: warning: {line}", file=sys.stderr))
        self.budget = budget if budget is not None else _seconds("KILN_CACHE_BUDGET_S", CACHE_BUDGET_S)
        self.spent = 0.0
        self.given_up: str | None = None  # why this cache no longer asks its registry
        self.fetched: list[str] = []
        self.trust = None  # compiler/gitops/signing.Trust: who must have signed what is imported
        self.refused: list[str] = []  # "<action id>: [code] why", artifacts not imported for their signature

    def require(self, spec, spec_dir) -> None:
        """Import only what the spec's publish.signed_by signed (when it names a signer)."""
        signed_by = spec.publish.signed_by if spec.publish is not None else None
        if signed_by is not None:
            from .signing import trust_of

            self.trust = trust_of(signed_by, spec_dir)

    def warn(self, line: str) -> None:
        self._warn(redact(line))

    def _give_up(self, why: str) -> None:
        if self.given_up is None:
            self.given_up = why
            self.warn(f"cache {self.registry}: {why}; not asking it again in this run (what it would have "
                      "provided is built here)")

    def _over_budget(self) -> None:
        self._give_up(f"{self.budget:g}s spent on the cache (KILN_CACHE_BUDGET_S)")

    def _usable(self) -> bool:
        if self.given_up is None and self.spent >= self.budget:
            self._over_budget()
        if self.given_up is None:  # what is left of the budget bounds every read of this call
            self.client.deadline = time.monotonic() + (self.budget - self.spent)
        return self.given_up is None

    def _unreachable(self, e: RegistryUnreachable) -> None:
        if isinstance(e, RegistryDeadline):
            self._over_budget()
        else:
            self._give_up(str(e))

    def has(self, key: str, kind: str) -> bool:
        if not self._usable():
            return False
        start = time.monotonic()
        try:
            return self.client.manifest_digest(self.repo, oa.artifact_tag(kind, key)) is not None
        except RegistryUnreachable as e:
            self._unreachable(e)
            return False
        except RegistryServerError as e:  # failing or busy after its retries: not asked again per action
            self._give_up(str(e))
            return False
        except RegistryError as e:
            self.warn(f"cache {self.registry}: {e}")
            return False
        finally:
            self.spent += time.monotonic() - start

    def __call__(self, graph, aid: str, spec_name: str) -> ActionRecord | None:
        """The executor's hook: import the artifact for `aid` from the registry, or None."""
        if not self._usable():
            return None
        action, key = graph.actions[aid], graph.keys[aid]
        start = time.monotonic()
        from .signing import SignatureError

        try:
            record = self._fetch(action.kind, key, aid)
        except SignatureError as e:  # never imported; the build says so and fails (compiler/cli/build.py)
            self.refused.append(f"{aid}: {e}")
            self.warn(f"cache {self.registry}: {aid}: refused: {e}")
            return None
        except RegistryUnreachable as e:
            self._unreachable(e)
            return None
        except RegistryServerError as e:  # failing or busy after its retries: not asked again per action
            self._give_up(f"{aid}: {e}")
            return None
        except (RegistryError, StoreError, ValueError, KeyError, TypeError, OSError) as e:
            self.warn(f"cache {self.registry}: {aid}: {e}; building it here")
            return None
        finally:
            self.spent += time.monotonic() - start
        if record is not None:
            self.store.set_ref(spec_name, aid, key, action.record(graph.keys))
            self.fetched.append(aid)
        return record

    def _fetch(self, kind: str, key: str, aid: str) -> ActionRecord | None:
        got = self.client.get_manifest(self.repo, oa.artifact_tag(kind, key))
        if got is None:
            return None
        doc = json_object(got[0], "the artifact's manifest")
        if not isinstance(doc.get("config"), dict):
            raise ValueError("the artifact's manifest is not an OCI manifest")
        notes = doc.get("annotations") or {}
        if not isinstance(notes, dict) or notes.get(oa.A_KEY) != key or notes.get(oa.A_KIND) != kind:
            raise ValueError(f"the artifact tagged for {key} carries another key or kind")
        tree, size = doc["config"].get("digest"), doc["config"].get("size")
        if not is_digest(tree):
            raise ValueError("the artifact's config is not a tree digest")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_TREE_BYTES:
            raise ValueError(f"the artifact's config size is not a number of bytes up to {MAX_TREE_BYTES}")
        tree_bytes = self.client.read_blob(self.repo, tree, size)  # bounded, verified against its digest
        try:
            entries = parse_tree(tree_bytes)  # before anything of it is stored
        except StoreError as e:
            raise ValueError(f"refused: {e}") from None
        if self.trust is not None:  # before anything of it is stored
            from .attest import verify_artifact

            verify_artifact(self.client, self.repo, self.trust, got[1], aid, [(e.path, e.digest) for e in entries])
        self.store.put_bytes(tree_bytes)
        for entry in entries:
            if self.store.has_valid_blob(entry.digest, entry.size):
                continue
            with self.store.workdir("fetch-") as work:
                part = work / "blob"
                with open(part, "wb") as f:  # stops at the tree's size + 1 byte
                    self.client.fetch_blob(self.repo, entry.digest, f, entry.size)
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
