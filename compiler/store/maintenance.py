"""`kiln store verify` and `kiln store gc`."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from .local import LocalStore, StoreError, sha256_file
from .records import is_digest, parse_action, parse_digest_cache, parse_ref, release_artifacts, release_keys

DIGEST_CACHE = "digest-cache.json"  # compiler/graph/inputs.py DigestCache, kept at the store's root


def verify(store: LocalStore, repair: bool = False) -> list[str]:
    """Every problem found: corrupt or unreadable objects, action records of the wrong shape or naming
    missing objects, refs and release histories that cannot be read, releases whose manifest is gone
    or whose artifacts are missing, a digest cache of the wrong shape. Leftover files in tmp/ (from a
    crash) are not problems.

    With `repair`, what is bad is removed so that the next build rebuilds exactly that: corrupt
    objects and the records that need them, bad records and refs, history lines that hold no
    readable release, and the digest cache (it is only a cache). Releases whose artifacts are
    missing are kept: the rebuild restores them."""
    with store.lock(exclusive=repair):
        problems: list[str] = []
        _verify_objects(store, repair, problems)
        _verify_records(store, repair, problems)
        _verify_refs(store, repair, problems)
        _verify_releases(store, repair, problems)
        _verify_digest_cache(store, repair, problems)
        return problems


def _verify_objects(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for blob in sorted((store.root / "objects" / "sha256").glob("*/*")):
        digest = "sha256:" + blob.name
        if not is_digest(digest) or blob.parent.name != blob.name[:2] or not blob.is_file():
            problems.append(f"stray file objects/sha256/{blob.parent.name}/{blob.name}")
            continue
        try:
            ok = sha256_file(blob) == digest
        except OSError as e:
            ok = False
            problems.append(f"object {digest} cannot be read: {e.strerror or e}")
        else:
            if not ok:
                problems.append(f"object {digest} is corrupt")
        if not ok and repair:
            blob.unlink(missing_ok=True)


def _verify_records(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for rec_path in sorted((store.root / "actions").glob("*/*.json")):
        key = "sha256:" + rec_path.stem
        try:
            rec = parse_action(rec_path.read_bytes(), key)
            entries = store.tree(rec.tree)
        except (OSError, StoreError) as e:
            problems.append(f"action record {rec_path.name}: {getattr(e, 'strerror', None) or e}")
            if repair:
                rec_path.unlink(missing_ok=True)
            continue
        for entry in entries:
            if not store.has_blob(entry.digest):  # (a corrupt one is gone already with `repair`)
                problems.append(f"action {rec.action_id} ({rec.key[:19]}): file {entry.path} is missing")
                if repair:
                    rec_path.unlink(missing_ok=True)
                break


def _verify_refs(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for ref in sorted(p for p in (store.root / "refs").glob("*/*") if p.is_file()):
        try:
            parse_ref(ref.read_bytes())
        except (OSError, StoreError) as e:
            problems.append(f"ref {ref.parent.name}/{ref.name}: {getattr(e, 'strerror', None) or e}")
            if repair:
                ref.unlink(missing_ok=True)


def _verify_releases(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for spec in store.all_release_specs():
        try:
            history, bad = store.release_history(spec)
        except StoreError as e:
            problems.append(str(e))
            continue
        for line in bad:
            problems.append(f"release history of {spec}: line {line} is not a release digest")
        readable = []
        for digest in history:
            try:
                artifacts = release_artifacts(store.read_bytes(digest))
            except StoreError as e:
                problems.append(f"release {digest[:19]} of {spec}: {e}")
                continue
            readable.append(digest)
            for art in artifacts:
                if "pending" in art:
                    continue  # a partial release: a builder with what it needs has yet to build it
                if store.get_action(art["key"]) is None:
                    problems.append(f"release {digest[:19]} of {spec}: artifact {art['id']} is missing")
        if repair and (bad or len(readable) != len(history)):
            store.set_releases(spec, readable)


def _verify_digest_cache(store: LocalStore, repair: bool, problems: list[str]) -> None:
    path = store.root / DIGEST_CACHE
    try:
        _, bad = parse_digest_cache(path.read_bytes())
        problem = f"digest cache: {bad} entr{'y is' if bad == 1 else 'ies are'} not [size, mtime, digest]" if bad else None
    except FileNotFoundError:
        return
    except (OSError, StoreError) as e:
        problem = f"digest cache: {getattr(e, 'strerror', None) or e}"
    if problem is not None:
        problems.append(problem)
        if repair:
            path.unlink(missing_ok=True)


@dataclass
class GcStats:
    kept_releases: int
    removed_actions: int
    removed_objects: int
    removed_tmp: int


def gc(store: LocalStore, keep: int) -> GcStats:
    """Keep what the last `keep` releases of every spec reference; remove everything else.

    Runs with the store alone: a build holds its shared lock until its release is recorded, so
    nothing a running build may still reference is ever removed. A kept release whose manifest
    cannot be read stops gc before it removes anything (it cannot know what that release needs);
    `kiln store verify --repair` drops such a release."""
    with store.lock(exclusive=True):
        live_keys: set[str] = set()
        live_objects: set[str] = set()
        histories: dict[str, list[str]] = {}
        for spec in store.all_release_specs():
            history = store.releases(spec)[-keep:]  # lines that hold no release are dropped below
            for digest in history:
                try:
                    live_keys.update(release_keys(store.read_bytes(digest)))
                except StoreError as e:
                    raise StoreError(f"release {digest[:19]} of {spec}: {e}; nothing was removed: run "
                                     "`kiln store verify --repair`, then gc again") from None
                live_objects.add(digest)
            histories[spec] = history
        for spec, history in histories.items():
            store.set_releases(spec, history)
        removed_actions = 0
        for rec_path in sorted((store.root / "actions").glob("*/*.json")):
            key = "sha256:" + rec_path.stem
            try:
                rec = parse_action(rec_path.read_bytes(), key)
                files = store.tree(rec.tree) if key in live_keys else None
            except (OSError, StoreError):
                rec, files = None, None  # unreadable, or its tree is gone: the build rebuilds it
            if rec is not None and files is not None:
                live_objects.add(rec.tree)
                live_objects.update(e.digest for e in files)
                if rec.log:
                    live_objects.add(rec.log)
                continue
            rec_path.unlink(missing_ok=True)
            removed_actions += 1
            if is_digest(key):
                store.log_path(key).unlink(missing_ok=True)
        removed_objects = 0
        for blob in (store.root / "objects" / "sha256").glob("*/*"):
            if "sha256:" + blob.name not in live_objects:
                shutil.rmtree(blob, ignore_errors=True) if blob.is_dir() else blob.unlink(missing_ok=True)
                removed_objects += 1
        removed_tmp = 0
        for item in (store.root / "tmp").iterdir():
            shutil.rmtree(item, ignore_errors=True) if item.is_dir() and not item.is_symlink() \
                else item.unlink(missing_ok=True)
            removed_tmp += 1
        return GcStats(sum(len(h) for h in histories.values()), removed_actions, removed_objects, removed_tmp)
