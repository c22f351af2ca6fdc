"""`kiln store verify` and `kiln store gc`."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass

from .local import LocalStore, StoreError, sha256_file


def verify(store: LocalStore, repair: bool = False) -> list[str]:
    """Every problem found: corrupt objects, records naming missing objects, releases naming
    missing artifacts. Leftover files in tmp/ (from a crash) are not problems.

    With `repair`, corrupt objects and the action records that need them are removed, so that the
    next build rebuilds exactly those artifacts (releases are kept: the rebuild restores them)."""
    problems: list[str] = []
    for blob in sorted((store.root / "objects" / "sha256").glob("*/*")):
        if sha256_file(blob) != "sha256:" + blob.name:
            problems.append(f"object sha256:{blob.name} is corrupt")
            if repair:
                blob.unlink()
    for rec_path in sorted((store.root / "actions").glob("*/*.json")):
        try:
            rec = json.loads(rec_path.read_text(encoding="utf-8"))
            for entry in store.tree(rec["tree"]):
                if not store.has_blob(entry.digest):
                    problems.append(f"action {rec['action_id']} ({rec['key'][:19]}): file {entry.path} is missing")
                    if repair:
                        rec_path.unlink(missing_ok=True)
        except (ValueError, KeyError, StoreError) as e:
            problems.append(f"action record {rec_path.name}: {e}")
            if repair:
                rec_path.unlink(missing_ok=True)
    for spec in store.all_release_specs():
        for digest in store.releases(spec):
            try:
                manifest = json.loads(store.read_bytes(digest))
            except StoreError as e:
                problems.append(f"release {digest[:19]} of {spec}: {e}")
                continue
            for art in manifest.get("artifacts", []):
                if "pending" in art:
                    continue  # a partial release: a builder with what it needs has yet to build it
                if store.get_action(art["key"]) is None:
                    problems.append(f"release {digest[:19]} of {spec}: artifact {art['id']} is missing")
    return problems


@dataclass
class GcStats:
    kept_releases: int
    removed_actions: int
    removed_objects: int
    removed_tmp: int


def gc(store: LocalStore, keep: int) -> GcStats:
    """Keep what the last `keep` releases of every spec reference; remove everything else."""
    with store.lock(exclusive=True):
        live_keys: set[str] = set()
        live_objects: set[str] = set()
        kept = 0
        for spec in store.all_release_specs():
            history = store.releases(spec)[-keep:]
            store.set_releases(spec, history)
            for digest in history:
                kept += 1
                live_objects.add(digest)
                manifest = json.loads(store.read_bytes(digest))
                for art in manifest.get("artifacts", []):
                    live_keys.add(art["key"])
        removed_actions = 0
        for rec_path in sorted((store.root / "actions").glob("*/*.json")):
            try:
                rec = json.loads(rec_path.read_text(encoding="utf-8"))
            except ValueError:
                rec = {}
            if rec.get("key") in live_keys:
                live_objects.add(rec["tree"])
                live_objects.update(e.digest for e in store.tree(rec["tree"]))
                if rec.get("log"):
                    live_objects.add(rec["log"])
                continue
            rec_path.unlink()
            removed_actions += 1
            if rec.get("key"):
                store.log_path(rec["key"]).unlink(missing_ok=True)
        removed_objects = 0
        for blob in (store.root / "objects" / "sha256").glob("*/*"):
            if "sha256:" + blob.name not in live_objects:
                blob.unlink()
                removed_objects += 1
        removed_tmp = 0
        for item in (store.root / "tmp").iterdir():
            shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink(missing_ok=True)
            removed_tmp += 1
        return GcStats(kept, removed_actions, removed_objects, removed_tmp)
