"""Write a stored tree's files out of the store (`kiln export`, `kiln show`), verified and confined.

A tree names its files by relative path; the path comes from the store, which a person or another
machine may have written, so every path is checked before it is joined to the target: relative,
'/'-separated, no empty, '.' or '..' component, and the file lands inside the target directory
even where a directory on the way is a symbolic link. Files are written through a temporary file
and renamed, with mode 0755 when the tree marks them executable and 0644 otherwise.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path, PurePosixPath

from .local import FileEntry, LocalStore, StoreError
from .records import MAX_NAME_BYTES


class UnsafePath(StoreError):
    """A path in a tree (or an artifact id) that would leave the target directory."""


def checked_relpath(path: str) -> PurePosixPath:
    """`path` as a relative path of plain components, or UnsafePath."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise UnsafePath(f"unsafe path {path!r} in the store: refusing to write it")
    try:
        if any(len(p.encode("utf-8")) > MAX_NAME_BYTES for p in parts):
            raise UnsafePath(f"path {path[:80]!r}... in the store has a name longer than {MAX_NAME_BYTES} bytes: "
                             "no filesystem can write it")
    except UnicodeEncodeError:
        raise UnsafePath(f"path {path[:80]!r} in the store is not valid Unicode: refusing to write it") from None
    return PurePosixPath(*parts)


def _no_link_on_the_way(dest: Path, target: Path) -> None:
    """No directory between dest and target may be a symbolic link (it could lead anywhere)."""
    here = dest
    for part in target.relative_to(dest).parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise UnsafePath(f"{here} is a symbolic link: refusing to write through it")


def find_entry(store: LocalStore, tree: str, path: str) -> FileEntry | None:
    return next((e for e in store.tree(tree) if e.path == path), None)


def copy_verified(store: LocalStore, entry: FileEntry, out) -> None:
    """Stream a file's object to the binary file `out`, failing if it does not match its digest
    (checked as it streams: a checkpoint may be larger than memory)."""
    try:
        store.copy_blob(entry.digest, out)
    except StoreError as e:
        raise StoreError(f"{entry.path}: {e} (run `kiln store verify --repair`)") from None


def write_tree(store: LocalStore, tree: str, root: Path, subdir: str = "") -> list[FileEntry]:
    """Write every file of `tree` under root/subdir (created if missing; `subdir` is checked like a
    tree path); existing files are replaced. Nothing is written through a symbolic link below root."""
    entries = store.tree(tree)
    base = root.joinpath(checked_relpath(subdir)) if subdir else root
    targets = [(e, base.joinpath(checked_relpath(e.path))) for e in entries]  # all checked before any write
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create {root}: {e.strerror or e}") from None
    for entry, target in targets:
        try:
            _write_one(store, root, entry, target)
        except OSError as e:  # a name the target filesystem refuses, a full disk, a read-only folder
            raise StoreError(f"cannot write {target}: {e.strerror or e}") from None
    return entries


def _write_one(store: LocalStore, root: Path, entry: FileEntry, target: Path) -> None:
    _no_link_on_the_way(root, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise UnsafePath(f"{target} exists and is not a regular file: refusing to replace it")
    fd, tmp = tempfile.mkstemp(prefix=".kiln-export-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            copy_verified(store, entry, f)
        os.chmod(tmp, 0o755 if entry.executable else 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
