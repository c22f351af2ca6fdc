"""Digests of the files a spec names. Files are hashed, never named, so a renamed but identical file
keeps its artifacts and a changed file under the same name rebuilds them.

Hashing multi-gigabyte weights on every plan would be slow, so digests are cached by
(path, size, mtime): the cache only decides whether to hash again, never what a digest is.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path

from compiler.store import safeio
from compiler.store.local import MAX_DIGEST_CACHE_BYTES, StoreError, sha256_file
from compiler.store.records import parse_digest_cache


class DigestCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, list] = {}
        self._dirty = False
        if path is not None:
            try:  # never through a link, never a FIFO, never more than a cache can hold
                data = safeio.read_file(path.parent, path.name, MAX_DIGEST_CACHE_BYTES)
                self._data, bad = parse_digest_cache(data)
                self._dirty = bad > 0  # the next save writes the good entries back alone
            except (OSError, StoreError):
                self._data = {}  # unreadable or of another shape: every file is hashed again

    def digest(self, file: Path) -> str:
        st = file.stat()
        key = str(file.resolve())
        stamp = [st.st_size, st.st_mtime_ns]
        with self._lock:
            hit = self._data.get(key)
            if hit is not None and hit[:2] == stamp:
                return hit[2]
        digest = sha256_file(file)
        with self._lock:
            self._data[key] = stamp + [digest]
            self._dirty = True
        return digest

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix="digests-", dir=self.path.parent)
        except OSError:
            return  # only a cache: the next run hashes again (`kiln store verify` reports what is in the way)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._data, f, sort_keys=True)
            os.replace(tmp, self.path)  # a link there is replaced, never followed
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if not isinstance(e, OSError):  # a full disk or a folder in the way: the cache is not kept
                raise
            return
        self._dirty = False


def file_digest(path: Path, cache: DigestCache) -> str:
    return cache.digest(path)


def tree_digests(directory: Path, cache: DigestCache) -> dict[str, str]:
    """Relative path -> digest for every regular file under `directory` (sorted)."""
    out: dict[str, str] = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[p.relative_to(directory).as_posix()] = cache.digest(p)
    return out
