"""Opening, reading, listing and removing the store's own files without ever leaving the store.

A store directory may come from a shared disk or a CI cache, so any name in it may be a symbolic
link (to a directory outside, to /dev/zero), a FIFO, a device or a directory where a file belongs.
Everything here walks from the store's root one component at a time with O_NOFOLLOW (a link is an
error, never a way out), opens files with O_NONBLOCK (a FIFO cannot block) and checks with fstat
that a file is a regular file before reading it, and reads at most what the caller's format allows.
The root itself is the user's choice (--store may be a link); nothing below it is followed.

Errors are StoreError naming the store file; a missing file is FileNotFoundError, as from open().
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Iterator

from .records import StoreError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _shown(root: Path, parts: list[str]) -> str:
    return str(root.joinpath(*parts)) if parts else str(root)


def _split(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise StoreError(f"{rel!r} is not a path inside the store")
    return parts


def _refuse(root: Path, parts: list[str], e: OSError, file: bool = False) -> StoreError:
    """The OSError of opening root/parts (a file when `file`) as a StoreError that names what is in
    the way: a link, a file or a special file where a folder is, or anything but a regular file."""
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except OSError:
            break
        if file and i == len(parts) - 1:
            if not stat.S_ISREG(st.st_mode):
                return StoreError(f"{here} is {kind_of(st.st_mode)}, not a regular file: Kiln does not read it "
                                  "(`kiln store verify` reports it; `--repair` removes a link or special file)")
        elif not stat.S_ISDIR(st.st_mode):
            return StoreError(f"{here} is {kind_of(st.st_mode)} where the store has a folder: Kiln never follows "
                              "it (`kiln store verify` reports it; `--repair` removes a link or special file)")
    return StoreError(f"cannot open {root.joinpath(*parts)}: {e.strerror or e}")


@contextlib.contextmanager
def open_dir(root: Path, rel: str) -> Iterator[int]:
    """A descriptor of the folder root/rel, reached without following any link below root."""
    parts = _split(rel)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for i, part in enumerate(parts):
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as e:  # ELOOP (a link), ENOTDIR (a file or special file)
                raise _refuse(root, parts[: i + 1], e) from None
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_file(root: Path, rel: str) -> Iterator[tuple[int, os.stat_result]]:
    """(descriptor, fstat) of the regular file root/rel, opened without following a link and without
    blocking; StoreError when it is anything but a regular file."""
    parts = _split(rel)
    with open_dir(root, "/".join(parts[:-1])) as dfd:
        try:
            first = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISREG(first.st_mode):  # not even opened: opening a device can have effects
                raise _refuse(root, parts, OSError(errno.EINVAL, "not a regular file"), file=True)
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR):
                raise _refuse(root, parts, e, file=True) from None
            raise StoreError(f"cannot read {root.joinpath(*parts)}: {e.strerror or e}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped in since the check above
                raise _refuse(root, parts, OSError(errno.EINVAL, "not a regular file"), file=True)
            yield fd, st
        finally:
            os.close(fd)


def read_file(root: Path, rel: str, limit: int) -> bytes:
    """The bytes of the regular file root/rel, which must be at most `limit` bytes long."""
    with open_file(root, rel) as (fd, st):
        if st.st_size > limit:
            raise StoreError(f"{root / rel} is {st.st_size} bytes, more than such a file can be ({limit})")
        chunks, left = [], limit + 1
        try:
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as e:
            raise StoreError(f"cannot read {root / rel}: {e.strerror or e}") from None
    data = b"".join(chunks)
    if len(data) > limit:  # it grew while read
        raise StoreError(f"{root / rel} is more than {limit} bytes")
    return data


def lstat(root: Path, rel: str) -> os.stat_result | None:
    """The entry root/rel itself (a link is not followed), or None when it or a folder on the way is
    missing; StoreError when a folder on the way is a link or not a folder."""
    parts = _split(rel)
    try:
        with open_dir(root, "/".join(parts[:-1])) as dfd:
            return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def listdir(root: Path, rel: str) -> list[tuple[str, int]]:
    """(name, st_mode) of every entry of the folder root/rel (links are not followed), sorted;
    [] when the folder is missing."""
    try:
        with open_dir(root, rel) as dfd:
            out = []
            for name in sorted(os.listdir(dfd)):
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                    out.append((name, os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode))
            return out
    except FileNotFoundError:
        return []


def ensure_dir(root: Path, rel: str) -> None:
    """Create the folders root/rel (each component a real folder, never a link)."""
    parts = _split(rel)
    for i in range(len(parts)):
        with open_dir(root, "/".join(parts[:i])) as dfd:
            try:
                os.mkdir(parts[i], 0o755, dir_fd=dfd)
            except FileExistsError:
                st = os.stat(parts[i], dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    raise StoreError(f"{root.joinpath(*parts[: i + 1])} is {kind_of(st.st_mode)} where the store "
                                     "has a folder (`kiln store verify --repair` removes a link or special "
                                     "file)") from None
            except OSError as e:
                raise StoreError(f"cannot create {root.joinpath(*parts[: i + 1])}: {e.strerror or e}") from None


def remove_entry(root: Path, rel: str) -> None:
    """Remove the entry root/rel itself: a file, a link (never its target), a FIFO or device node.
    A folder is not removed (see remove_tree)."""
    parts = _split(rel)
    # IsADirectoryError: a folder was swapped in since the caller looked (a race with another
    # process): it is not removed here; the next verify reports it
    with contextlib.suppress(FileNotFoundError, IsADirectoryError), open_dir(root, "/".join(parts[:-1])) as dfd:
        os.unlink(parts[-1], dir_fd=dfd)


def remove_tree(root: Path, rel: str) -> None:
    """Remove the folder root/rel and everything in it, never following a link (a link inside is
    removed itself); a link or file at root/rel is removed as an entry."""
    import shutil

    parts = _split(rel)
    with contextlib.suppress(FileNotFoundError), open_dir(root, "/".join(parts[:-1])) as dfd:
        for _ in range(3):  # swapped between the stat and the removal (a folder for a file, or back): again
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
            try:
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(parts[-1], dir_fd=dfd)  # fd-based: safe against links, even ones raced in
                else:
                    os.unlink(parts[-1], dir_fd=dfd)
                return
            except (IsADirectoryError, NotADirectoryError):
                continue
