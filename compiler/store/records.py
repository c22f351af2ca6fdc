"""The store's own files, read back defensively.

A store is a directory that people edit, disks corrupt and registry caches feed, so every file Kiln
reads back from one (tree manifests, action records, refs, release histories, release manifests,
the digest cache) is checked for the shape Kiln writes before anything uses it. A file of another
shape raises StoreError saying what is wrong; callers treat it as absent (a build rebuilds it),
report it (`kiln store verify`) or remove it (`--repair`). Nothing here touches the filesystem.

Tree paths get the strictest check, because a tree is written out as files (materialized, copied
into an image context, exported): a path must be relative, '/'-separated, normalized (no empty,
'.' or '..' component), and no file may sit where another file's directory must be. A tree that
breaks this is refused whole, wherever it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from compiler.boundedjson import BoundedJSONError, loads_bounded

TREE_KIND = "kiln.tree/v1"
RELEASE_KIND = "kiln.release/v1"
MAX_TREE_PATH = 4096  # PATH_MAX on Linux: a longer name cannot be written anyway
MAX_NAME_BYTES = 255  # NAME_MAX on Linux (and most filesystems): a longer component cannot be written
MAX_JSON_DEPTH = 64  # Kiln writes store files a few levels deep; refs nest an action's parameters
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HISTORY_LINE = re.compile(r'\s*"(sha256:[0-9a-f]{64})"\s*')  # what json.dumps(digest) writes


class StoreError(Exception):
    """A corrupt or unusable store (never a bad spec)."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, '/'-separated
    digest: str  # "sha256:<hex>"
    size: int
    executable: bool


@dataclass(frozen=True)
class ActionRecord:
    key: str
    kind: str
    action_id: str
    tree: str  # digest of the output tree manifest
    duration_s: float
    log: str | None  # digest of the log blob
    # the way it ran (compiler/graph/sizes.py Way.to_json: GPUs, offload, CPU), where it was built by
    # a placement that chose one; like the duration, what happened, not what the artifact is
    way: dict | None = None

    def to_json(self) -> dict:
        return {"key": self.key, "kind": self.kind, "action_id": self.action_id, "tree": self.tree,
                "duration_s": self.duration_s, "log": self.log, **({"way": self.way} if self.way is not None else {})}


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tree_path_problem(path: Any) -> str | None:
    """Why `path` cannot name a file of a tree, or None when it is safe to write under any root."""
    if not isinstance(path, str) or not path:
        return "a file path must be a non-empty string"
    shown = repr(path[:80] + ("..." if len(path) > 80 else ""))
    if len(path) > MAX_TREE_PATH:
        return f"file path {shown} is longer than {MAX_TREE_PATH} characters"
    if "\x00" in path:
        return f"file path {shown} contains a NUL byte"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") names no file on any filesystem
        return f"file path {shown} is not valid Unicode"
    if path.startswith("/"):
        return f"file path {shown} is absolute"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"file path {shown} is not normalized or leaves the artifact ('', '.' or '..' component)"
    if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in path.split("/")):
        return f"file path {shown} has a name longer than {MAX_NAME_BYTES} bytes (no filesystem can write it)"
    return None


def _json(data: bytes | str, what: str) -> Any:
    try:
        return loads_bounded(data, max_depth=MAX_JSON_DEPTH)
    except BoundedJSONError as e:
        raise StoreError(f"{what} is not JSON Kiln writes ({str(e)[:80]})") from None


def parse_tree(data: bytes) -> list[FileEntry]:
    """The files of a tree manifest, after checking every entry (see the module docstring)."""
    doc = _json(data, "tree manifest")
    if not isinstance(doc, dict) or doc.get("kind") != TREE_KIND or not isinstance(doc.get("files"), list):
        raise StoreError("not a tree manifest")
    entries: list[FileEntry] = []
    seen: set[str] = set()
    for e in doc["files"]:
        if not isinstance(e, dict):
            raise StoreError("tree manifest: an entry is not an object")
        problem = tree_path_problem(e.get("path"))
        if problem is not None:
            raise StoreError(f"tree manifest: {problem}")
        if not is_digest(e.get("digest")) or not _is_int(e.get("size")) or e["size"] < 0 \
                or not isinstance(e.get("executable"), bool):
            raise StoreError(f"tree manifest: entry {e['path']!r} lacks a valid digest, size or executable flag")
        if e["path"] in seen:
            raise StoreError(f"tree manifest: {e['path']!r} is listed twice")
        seen.add(e["path"])
        entries.append(FileEntry(e["path"], e["digest"], e["size"], e["executable"]))
    for entry in entries:  # "a" and "a/b" cannot both be files
        parts = entry.path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in seen:
                raise StoreError(f"tree manifest: {'/'.join(parts[:i])!r} is a file and a directory")
    return entries


def parse_action(data: bytes, key: str) -> ActionRecord:
    """An action record, which must be the record of `key`."""
    doc = _json(data, "action record")
    if not isinstance(doc, dict):
        raise StoreError("action record is not a JSON object")
    if doc.get("key") != key:
        raise StoreError("action record names another key")
    if not isinstance(doc.get("kind"), str) or not isinstance(doc.get("action_id"), str):
        raise StoreError("action record lacks its kind or action id")
    if not is_digest(doc.get("tree")):
        raise StoreError("action record lacks a valid tree digest")
    duration = doc.get("duration_s")
    if not isinstance(duration, (int, float)) or isinstance(duration, bool) or not 0 <= duration < 1e9:
        raise StoreError("action record has no valid duration")
    if doc.get("log") is not None and not is_digest(doc["log"]):
        raise StoreError("action record has an invalid log digest")
    way = doc.get("way")
    if way is not None and not (isinstance(way, dict) and isinstance(way.get("gpus"), int)):
        raise StoreError("action record has an invalid way")
    return ActionRecord(key, doc["kind"], doc["action_id"], doc["tree"], float(duration), doc.get("log"), way)


def parse_ref(data: bytes) -> dict:
    """A ref: {"key": digest, "params": {...}} (what an action slot last built, for plan reasons)."""
    doc = _json(data, "ref")
    if not isinstance(doc, dict) or not is_digest(doc.get("key")) or not isinstance(doc.get("params"), dict):
        raise StoreError("ref is not {key, params}")
    params = doc["params"]
    for field, kind in (("inputs", dict), ("deps", dict), ("cause", dict)):
        if field in params and not isinstance(params[field], kind):
            raise StoreError(f"ref has an invalid {field!r}")
    return doc


def parse_release_history(text: str) -> tuple[list[str], list[int]]:
    """(release digests, oldest first; numbers of the lines that are not one), from a history file.
    A line cut short by a crash or an edit is skipped rather than taken for a release."""
    digests: list[str] = []
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _HISTORY_LINE.fullmatch(line)  # a line is one JSON string; anything else is not parsed at all
        if m:
            digests.append(m.group(1))
        else:
            bad.append(number)
    return digests, bad


def parse_release(data: bytes) -> dict:
    """A release manifest, its spec and every artifact entry checked for the shape Kiln writes."""
    doc = _json(data, "release manifest")
    if not isinstance(doc, dict) or doc.get("kind") != RELEASE_KIND or not isinstance(doc.get("artifacts"), list):
        raise StoreError("not a release manifest")
    spec = doc.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not isinstance(spec.get("digest"), str):
        raise StoreError("release manifest: the spec's name or digest is missing")
    for art in doc["artifacts"]:
        if not isinstance(art, dict) or not is_digest(art.get("key")) or not isinstance(art.get("id"), str) \
                or not isinstance(art.get("kind"), str):
            raise StoreError("release manifest: an artifact entry lacks its id, kind or key")
        if not (art.get("tree") is None or is_digest(art["tree"])) \
                or not (art.get("pending") is None or isinstance(art["pending"], str)):
            raise StoreError(f"release manifest: artifact {art['id'][:80]!r} has an invalid tree or pending reason")
    return doc


def release_keys(data: bytes) -> list[str]:
    """The artifact keys a release manifest names (pending ones included: they are the spec's)."""
    return [art["key"] for art in parse_release(data)["artifacts"]]


def release_artifacts(data: bytes) -> list[dict]:
    """The artifact entries of a release manifest, checked as `parse_release` checks them."""
    return parse_release(data)["artifacts"]


def parse_digest_cache(data: bytes) -> tuple[dict[str, list], int]:
    """(entries that have the shape the cache writes, entries that do not). The cache only decides
    whether to hash a file again, so a bad entry is dropped and that file hashed once more."""
    doc = _json(data, "digest cache")
    if not isinstance(doc, dict):
        raise StoreError("digest cache is not a JSON object")
    good: dict[str, list] = {}
    for path, v in doc.items():
        if isinstance(v, list) and len(v) == 3 and _is_int(v[0]) and _is_int(v[1]) and is_digest(v[2]):
            good[path] = v
    return good, len(doc) - len(good)
