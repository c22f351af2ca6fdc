"""`kiln store verify` and `kiln store gc`.

Both walk the store's folders themselves (compiler/store/safeio.py), never through a link: a store
restored from a shared disk or a CI cache may hold a link to any directory, and following one would
verify, or worse delete, files outside the store. What they remove is only what Kiln writes (objects,
records, refs, logs, history lines, the digest cache, tmp/'s scratch) or an entry that cannot be
Kiln's where one of those belongs: a link (the link itself, never its target), a FIFO or a device
node. A directory where a file belongs, or a file Kiln does not name, is reported and left alone.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field

from . import safeio
from .local import FOLDERS, MAX_DIGEST_CACHE_BYTES, MAX_RECORD_BYTES, MAX_REF_BYTES, LocalStore, StoreError
from .records import is_digest, parse_action, parse_digest_cache, parse_ref, release_artifacts, release_keys

DIGEST_CACHE = "digest-cache.json"  # compiler/store/digests.py DigestCache, kept at the store's root


def _is_special(mode: int) -> bool:
    """A link, FIFO, socket or device node: never Kiln's, removable as an entry (never followed)."""
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _bad_entry(store: LocalStore, rel: str, mode: int, what: str, fix: bool, problems: list[str]) -> None:
    """Report root/rel, which is `mode` where `what` belongs; with `fix`, remove it if it is a link or
    special file (the entry itself). A directory or a regular file of another name is left alone."""
    kind = safeio.kind_of(mode)
    shown = store.root / rel
    if fix and _is_special(mode):
        safeio.remove_entry(store.root, rel)
        problems.append(f"{shown} was {kind} where {what} belongs: removed it (its target was not touched)")
    elif stat.S_ISDIR(mode) or not fix:
        keep = "; Kiln did not write it, so it is left for you to remove" if fix else ""
        problems.append(f"{shown} is {kind} where {what} belongs{keep}")
    else:
        problems.append(f"{shown} is a file Kiln does not name where {what} belongs; left alone")


def _check_folders(store: LocalStore, repair: bool, problems: list[str]) -> list[str]:
    """The store's folders that are not real folders (reported; with `repair`, a link or special file
    is replaced by an empty folder). Returns the ones still unusable."""
    unusable = []
    for rel in FOLDERS:
        if any(rel.startswith(u + "/") for u in unusable):
            continue
        try:
            st = safeio.lstat(store.root, rel)
        except StoreError:
            continue  # its parent is reported already
        if st is None or stat.S_ISDIR(st.st_mode):
            if st is None and repair:
                safeio.ensure_dir(store.root, rel)
            continue
        kind = safeio.kind_of(st.st_mode)
        if repair and _is_special(st.st_mode):
            safeio.remove_entry(store.root, rel)
            safeio.ensure_dir(store.root, rel)
            problems.append(f"{store.root / rel} was {kind} where the store has a folder: replaced it by an empty "
                            "folder (its target was not touched)")
            continue
        problems.append(f"{store.root / rel} is {kind} where the store has a folder; Kiln never follows it"
                        + ("; remove it by hand" if repair else ""))
        unusable.append(rel)
    return unusable


def verify(store: LocalStore, repair: bool = False) -> list[str]:
    """Every problem found: corrupt or unreadable objects, action records of the wrong shape or naming
    missing objects, refs and release histories that cannot be read, releases whose manifest is gone
    or whose artifacts are missing, a digest cache of the wrong shape, and anything in the store's
    folders that Kiln does not write (links, FIFOs, devices, a directory where a file belongs).
    Leftover files in tmp/ (from a crash) are not problems.

    With `repair`, what is bad is removed so that the next build rebuilds exactly that: corrupt
    objects and the records that need them, bad records and refs, history lines that hold no
    readable release, the digest cache (it is only a cache), and links and special files (the entry,
    never what it points to). Releases whose artifacts are missing are kept: the rebuild restores them."""
    with store.lock(exclusive=repair):
        problems: list[str] = []
        unusable = _check_folders(store, repair, problems)
        if "objects" not in unusable and "objects/sha256" not in unusable:
            _verify_objects(store, repair, problems)
        if "actions" not in unusable:
            _verify_records(store, repair, problems)
        if "refs" not in unusable:
            _verify_refs(store, repair, problems)
        if "releases" not in unusable:
            _verify_releases(store, repair, problems)
        for folder in ("logs", "tmp"):
            if folder not in unusable:
                _verify_plain_folder(store, folder, repair, problems)
        _verify_digest_cache(store, repair, problems)
        return problems


def _objects(store: LocalStore, fix: bool, problems: list[str]) -> list[tuple[str, str]]:
    """(digest, rel path) of every regular file in objects/sha256 named as Kiln names objects; every
    other entry is reported (and with `fix` removed when it is a link or special file)."""
    found = []
    for name, mode in safeio.listdir(store.root, "objects"):
        if name != "sha256":
            if _is_special(mode):
                _bad_entry(store, f"objects/{name}", mode, "the folder of objects", fix, problems)
            else:
                problems.append(f"stray entry {store.root / 'objects' / name} (Kiln did not write it; left alone)")
    for shard, mode in safeio.listdir(store.root, "objects/sha256"):
        rel_shard = f"objects/sha256/{shard}"
        if not stat.S_ISDIR(mode):
            _bad_entry(store, rel_shard, mode, "a folder of objects", fix, problems)
            continue
        for name, mode in safeio.listdir(store.root, rel_shard):
            rel = f"{rel_shard}/{name}"
            if not stat.S_ISREG(mode):
                _bad_entry(store, rel, mode, "an object", fix, problems)
            elif not is_digest("sha256:" + name) or name[:2] != shard:
                problems.append(f"stray file {store.root / rel} (not an object Kiln wrote; left alone)")
            else:
                found.append(("sha256:" + name, rel))
    return found


def _verify_objects(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for digest, rel in _objects(store, repair, problems):
        try:
            ok = store.blob_digest(digest) == digest
        except StoreError as e:
            ok = False
            problems.append(f"object {digest}: {e}")
        else:
            if not ok:
                problems.append(f"object {digest} is corrupt ({store.root / rel})")
        if not ok and repair:
            safeio.remove_entry(store.root, rel)


def _files_in_shards(store: LocalStore, folder: str, what: str, fix: bool, problems: list[str]) -> list[str]:
    """Rel paths of the regular files two levels down `folder` (actions/<xx>/<key>.json,
    refs/<spec>/<slot>); everything else there is reported (and with `fix` removed when special)."""
    found = []
    for shard, mode in safeio.listdir(store.root, folder):
        if not stat.S_ISDIR(mode):
            _bad_entry(store, f"{folder}/{shard}", mode, f"a folder of {what}s", fix, problems)
            continue
        for name, mode in safeio.listdir(store.root, f"{folder}/{shard}"):
            rel = f"{folder}/{shard}/{name}"
            if stat.S_ISREG(mode):
                found.append(rel)
            else:
                _bad_entry(store, rel, mode, f"a {what}", fix, problems)
    return found


def _verify_records(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for rel in _files_in_shards(store, "actions", "record", repair, problems):
        name = rel.rsplit("/", 1)[1]
        if not name.endswith(".json"):
            problems.append(f"stray file {store.root / rel} (not a record Kiln wrote; left alone)")
            continue
        key = "sha256:" + name[: -len(".json")]
        try:
            rec = parse_action(safeio.read_file(store.root, rel, MAX_RECORD_BYTES), key)
            entries = store.tree(rec.tree)
        except (OSError, StoreError) as e:
            problems.append(f"action record {store.root / rel}: {getattr(e, 'strerror', None) or e}")
            if repair:
                safeio.remove_entry(store.root, rel)
            continue
        for entry in entries:
            if not store.has_blob(entry.digest):  # (a corrupt one is gone already with `repair`)
                problems.append(f"action {rec.action_id} ({rec.key[:19]}): file {entry.path} is missing")
                if repair:
                    safeio.remove_entry(store.root, rel)
                break


def _verify_refs(store: LocalStore, repair: bool, problems: list[str]) -> None:
    for rel in _files_in_shards(store, "refs", "ref", repair, problems):
        try:
            parse_ref(safeio.read_file(store.root, rel, MAX_REF_BYTES))
        except (OSError, StoreError) as e:
            problems.append(f"ref {rel[len('refs/'):]} in {store.root}: {getattr(e, 'strerror', None) or e}")
            if repair:
                safeio.remove_entry(store.root, rel)


def _verify_releases(store: LocalStore, repair: bool, problems: list[str]) -> None:
    _check_release_entries(store, repair, problems)
    for spec in store.all_release_specs():
        try:
            history, bad = store.release_history(spec)
        except StoreError as e:
            problems.append(str(e))
            continue
        for line in bad:
            problems.append(f"release history {store.root / 'releases' / spec}.jsonl: line {line} is not a release "
                            "digest")
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


def _check_release_entries(store: LocalStore, fix: bool, problems: list[str]) -> None:
    """releases/ holds histories (regular files): a link or special file of any name is reported, and
    so is a directory named as a history."""
    for name, mode in safeio.listdir(store.root, "releases"):
        if _is_special(mode) or (stat.S_ISDIR(mode) and name.endswith(".jsonl")):
            _bad_entry(store, f"releases/{name}", mode, "a release history", fix, problems)


def _verify_plain_folder(store: LocalStore, folder: str, repair: bool, problems: list[str]) -> None:
    """logs/ and tmp/: only links and special files are problems (tmp/ holds any scratch of a build)."""
    for name, mode in safeio.listdir(store.root, folder):
        if _is_special(mode):
            _bad_entry(store, f"{folder}/{name}", mode, "a log" if folder == "logs" else "scratch space",
                       repair, problems)


def _verify_digest_cache(store: LocalStore, repair: bool, problems: list[str]) -> None:
    try:
        _, bad = parse_digest_cache(safeio.read_file(store.root, DIGEST_CACHE, MAX_DIGEST_CACHE_BYTES))
        problem = f"digest cache: {bad} entr{'y is' if bad == 1 else 'ies are'} not [size, mtime, digest]" if bad else None
    except FileNotFoundError:
        return
    except (OSError, StoreError) as e:
        problem = f"digest cache: {getattr(e, 'strerror', None) or e}"
    if problem is not None:
        problems.append(f"{problem} ({store.root / DIGEST_CACHE})" if str(store.root) not in problem else problem)
        if repair:
            st = safeio.lstat(store.root, DIGEST_CACHE)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                safeio.remove_entry(store.root, DIGEST_CACHE)


@dataclass
class GcStats:
    kept_releases: int
    removed_actions: int
    removed_objects: int
    removed_tmp: int
    problems: list[str] = field(default_factory=list)  # entries Kiln did not write: removed links, left folders


def gc(store: LocalStore, keep: int) -> GcStats:
    """Keep what the last `keep` releases of every spec reference; remove everything else.

    Runs with the store alone: a build holds its shared lock until its release is recorded, so
    nothing a running build may still reference is ever removed. A kept release whose manifest
    cannot be read, or a store folder that is a link, stops gc before it removes anything (it
    cannot know what that release needs); `kiln store verify --repair` fixes both."""
    with store.lock(exclusive=True):
        problems: list[str] = []
        if _check_folders(store, False, problems):
            raise StoreError(f"{problems[0]}; nothing was removed: run `kiln store verify --repair`, then gc again")
        _refuse_unreadable_histories(store)
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
        _check_release_entries(store, True, problems)
        removed_actions = 0
        for rel in _files_in_shards(store, "actions", "record", True, problems):
            name = rel.rsplit("/", 1)[1]
            key = "sha256:" + name[: -len(".json")]
            if not name.endswith(".json") or not is_digest(key):
                problems.append(f"stray file {store.root / rel} (not a record Kiln wrote; left alone)")
                continue
            try:
                rec = parse_action(safeio.read_file(store.root, rel, MAX_RECORD_BYTES), key)
                files = store.tree(rec.tree) if key in live_keys else None
            except (OSError, StoreError):
                rec, files = None, None  # unreadable, or its tree is gone: the build rebuilds it
            if rec is not None and files is not None:
                live_objects.add(rec.tree)
                live_objects.update(e.digest for e in files)
                if rec.log:
                    live_objects.add(rec.log)
                continue
            safeio.remove_entry(store.root, rel)
            removed_actions += 1
            _remove_log(store, key, problems)
        for name, mode in safeio.listdir(store.root, "logs"):
            if _is_special(mode):
                _bad_entry(store, f"logs/{name}", mode, "a log", True, problems)
        removed_objects = 0
        for digest, rel in _objects(store, True, problems):
            if digest not in live_objects:
                safeio.remove_entry(store.root, rel)
                removed_objects += 1
        removed_tmp = 0
        for name, mode in safeio.listdir(store.root, "tmp"):
            if stat.S_ISLNK(mode):
                problems.append(f"{store.root / 'tmp' / name} was a symbolic link: removed it (its target was not "
                                "touched)")
            safeio.remove_tree(store.root, f"tmp/{name}")  # fd-based: never follows a link inside
            removed_tmp += 1
        return GcStats(sum(len(h) for h in histories.values()), removed_actions, removed_objects, removed_tmp,
                       problems)


def _refuse_unreadable_histories(store: LocalStore) -> None:
    """A history that is not a regular file (a link, FIFO, folder) cannot be read, so what its
    releases need is unknown: removing anything could delete a release that still has users."""
    for name, mode in safeio.listdir(store.root, "releases"):
        if name.endswith(".jsonl") and not stat.S_ISREG(mode):
            raise StoreError(f"the release history {store.root / 'releases' / name} is {safeio.kind_of(mode)}, not a "
                             "file Kiln wrote, so the releases of that spec are unknown; nothing was removed: put "
                             "the history file itself in its place (or run `kiln store verify --repair` to drop it), "
                             "then gc again")


def _remove_log(store: LocalStore, key: str, problems: list[str]) -> None:
    rel = f"logs/{key[7:]}.log"
    st = safeio.lstat(store.root, rel)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        problems.append(f"{store.root / rel} is a directory where a log belongs; Kiln did not write it, so it is "
                        "left for you to remove")
    else:
        safeio.remove_entry(store.root, rel)
