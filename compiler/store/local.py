"""The embedded content-addressed store: a directory, written atomically, verified on read.

Layout under the root:
  objects/sha256/ab/abcd...   blobs and tree manifests, named by the sha256 of their bytes
  actions/ab/<key>.json       action records: which tree an action key produced (written last)
  refs/<spec>/<action id>     the key and parameters last built for an action slot (plan reasons)
  releases/<spec>.jsonl       release manifests built for a spec, oldest first (gc keeps the last N)
  logs/<key>.log              one log per executed action
  tmp/                        work and staging space; anything here is garbage after a crash
  store.lock                  shared by builds, exclusive for gc
  releases.lock               held while a release history is read, extended and written back

Every write goes to tmp/ first and is renamed into place, and an action record is written only after
all objects it names exist, so a crash (even SIGKILL) leaves either nothing or a complete result.

Nothing below the root is trusted to be what Kiln wrote: every read goes through safeio (no link is
followed, only regular files are read, each kind of file at most as large as its format allows), and
every write lands in a folder that was checked to be a real folder of the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Iterator

from . import safeio
from .canonical import canonical_json
from .records import (ActionRecord, FileEntry, StoreError, parse_action, parse_ref, parse_release_history,
                      parse_tree, tree_path_problem)

__all__ = ["ActionRecord", "FileEntry", "LocalStore", "StoreError", "StoreUnusable", "sha256_bytes", "sha256_file"]

CHUNK = 1 << 20
_SUBDIRS = ("objects/sha256", "actions", "refs", "releases", "logs", "tmp")
FOLDERS = ("objects", "objects/sha256", "actions", "refs", "releases", "logs", "tmp")
# The most a store file of each kind can hold (a larger one is reported as corrupt, never read whole).
MAX_RECORD_BYTES = 1 << 20  # an action record: a few hundred bytes
MAX_REF_BYTES = 16 << 20  # a ref: the action's parameters and input digests
MAX_HISTORY_BYTES = 64 << 20  # a release history: 74 bytes a release
MAX_DOCUMENT_BYTES = 256 << 20  # a tree or release manifest read into memory (files are streamed)
MAX_DIGEST_CACHE_BYTES = 256 << 20  # the digest cache: one entry per input file hashed


class StoreUnusable(Exception):
    """The store directory cannot be used at all: it is a file, cannot be created, or (for a command
    that only inspects a store) does not exist. A problem of the command line, not of the store."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _hex(digest: str) -> str:
    if not digest.startswith("sha256:") or len(digest) != 71:
        raise StoreError(f"not a sha256 digest: {digest!r}")
    return digest[7:]


class LocalStore:
    def __init__(self, root: Path, create: bool = True, missing_ok: bool = False) -> None:
        """`create=False` (the store commands, publish): the store must exist already, so that a
        mistyped --store is an error instead of an empty store that verifies clean. With
        `missing_ok` (plan), a store that does not exist reads as empty and is not created."""
        self.root = Path(root)
        self._guard = threading.Lock()
        self._lock_fd: int | None = None
        self._lock_mode: bool | None = None  # exclusive? while held
        self._lock_depth = 0
        try:
            if self.root.exists() and not self.root.is_dir():
                raise StoreUnusable(f"{self.root} is not a directory")
            if not create and not (self.root / "objects").is_dir() and not _begun(self.root):
                if missing_ok and not self.root.exists():
                    return
                raise StoreUnusable(f"no Kiln store at {self.root} (`kiln build` creates it; check --store or "
                                    "$KILN_STORE)")
            self.root.mkdir(parents=True, exist_ok=True)
            for sub in _SUBDIRS:
                # A folder that is a link or a file is left alone here: verify reports it, --repair
                # replaces it, and an operation that needs it fails naming it.
                with contextlib.suppress(StoreError):
                    safeio.ensure_dir(self.root, sub)
        except OSError as e:
            raise StoreUnusable(f"cannot use {self.root} as a store: {e.strerror or e}") from None

    # --- locking ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, exclusive: bool = False) -> Iterator[None]:
        """Builds share the store; gc needs it alone. The lock dies with the process (flock).

        Re-entrant per LocalStore object: a build holds its shared lock from its first store read
        until its release is recorded, and the executor inside it takes it again."""
        with self._guard:
            nested = self._lock_depth > 0
            if nested:
                if exclusive and not self._lock_mode:
                    raise StoreError("cannot take the store alone while this process shares it")
                self._lock_depth += 1
        if nested:
            try:
                yield
            finally:
                self._release()
            return
        fd = self._open_lock_file("store.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        with self._guard:
            self._lock_fd, self._lock_mode, self._lock_depth = fd, exclusive, 1
        try:
            yield
        finally:
            self._release()

    def _open_lock_file(self, name: str) -> int:
        """A lock file at the root, never through a link and never a FIFO or device."""
        path = self.root / name
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                         0o644)
        except OSError as e:
            raise StoreError(f"cannot open the lock file {path}: {e.strerror or e} (a link or a folder there "
                             "must be removed by hand)") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise StoreError(f"the lock file {path} is {safeio.kind_of(mode)}: remove it by hand")
        return fd

    @contextlib.contextmanager
    def _history_lock(self) -> Iterator[None]:
        """Builds share the store lock, so two of them may record a release of one spec at once; this
        one makes each read-extend-write of a history whole (without it one of the two is lost)."""
        fd = self._open_lock_file("releases.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _release(self) -> None:
        with self._guard:
            self._lock_depth -= 1
            if self._lock_depth > 0 or self._lock_fd is None:
                return
            fd, self._lock_fd, self._lock_mode = self._lock_fd, None, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    @contextlib.contextmanager
    def workdir(self, prefix: str = "work-") -> Iterator[Path]:
        """A scratch directory inside the store (same filesystem, so results rename into place)."""
        safeio.ensure_dir(self.root, "tmp")  # never a link out of the store
        try:
            path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root / "tmp"))
        except OSError as e:
            raise StoreError(f"cannot create a work folder in {self.root / 'tmp'}: {e.strerror or e}") from None
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    # --- blobs -----------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        h = _hex(digest)
        return self.root / "objects" / "sha256" / h[:2] / h

    def _blob_rel(self, digest: str) -> str:
        h = _hex(digest)
        return f"objects/sha256/{h[:2]}/{h}"

    def _blob_stat(self, digest: str) -> os.stat_result | None:
        """The object's own lstat when it is a regular file; None when missing or anything else (a link,
        a FIFO, a folder on the way that is a link: all count as absent, and verify reports them)."""
        try:
            st = safeio.lstat(self.root, self._blob_rel(digest))
        except StoreError:
            return None
        return st if st is not None and stat.S_ISREG(st.st_mode) else None

    def has_blob(self, digest: str) -> bool:
        return self._blob_stat(digest) is not None

    def has_intact_size(self, digest: str, size: int) -> bool:
        """The object is a regular file of the store (no link on the way) of `size` bytes."""
        st = self._blob_stat(digest)
        return st is not None and st.st_size == size

    def blob_digest(self, digest: str) -> str:
        """The sha256 of the stored object's content (streamed), StoreError when it cannot be read."""
        h = hashlib.sha256()
        self._stream_blob(digest, h.update)
        return "sha256:" + h.hexdigest()

    def _stream_blob(self, digest: str, sink) -> int:
        """Feed the object's bytes to `sink`; returns the size. Missing: StoreError saying so."""
        rel = self._blob_rel(digest)
        try:
            with safeio.open_file(self.root, rel) as (fd, _):
                total = 0
                with os.fdopen(os.dup(fd), "rb") as f:
                    while chunk := f.read(CHUNK):
                        sink(chunk)
                        total += len(chunk)
                return total
        except FileNotFoundError:
            raise StoreError(f"object {digest} is missing from the store {self.root}") from None
        except OSError as e:
            raise StoreError(f"object {digest} in {self.root} cannot be read: {e.strerror or e}") from None

    def has_valid_blob(self, digest: str, size: int) -> bool:
        """The object is there with the right size and its content matches its digest. The write path
        asks this, not the size alone: a corrupt object of the right size must be written over,
        or a rebuild would keep it."""
        if not self.has_intact_size(digest, size):
            return False
        try:
            return self.blob_digest(digest) == digest
        except StoreError:
            return False

    def put_bytes(self, data: bytes) -> str:
        digest = sha256_bytes(data)
        if not self.has_valid_blob(digest, len(data)):
            self._place(digest, lambda f: f.write(data))
        return digest

    def put_file(self, path: Path) -> str:
        digest = sha256_file(path)
        if not self.has_valid_blob(digest, path.stat().st_size):
            def copy(f) -> None:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, f, CHUNK)
            self._place(digest, copy)
            if self.blob_digest(digest) != digest:  # the file changed while we read it
                safeio.remove_entry(self.root, self._blob_rel(digest))
                raise StoreError(f"{path} changed while it was being stored")
        return digest

    def _place(self, digest: str, write) -> None:
        rel = self._blob_rel(digest)
        self._stage(rel, write, "blob-", 0o444)  # identical content: a concurrent writer's rename is harmless

    def _stage(self, rel: str, write, prefix: str, mode: int | None = None) -> None:
        """Write root/rel through a file in tmp/ renamed into place, both folders checked to be the
        store's own (never a link out of it). Failures are StoreErrors naming the file."""
        target = self.root / rel
        safeio.ensure_dir(self.root, "tmp")
        safeio.ensure_dir(self.root, rel.rsplit("/", 1)[0])
        try:
            fd, tmp = tempfile.mkstemp(prefix=prefix, dir=self.root / "tmp")
        except OSError as e:
            raise StoreError(f"cannot write {target}: {e.strerror or e}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, target)  # a link at target is replaced itself, never followed
        except BaseException as e:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise StoreError(f"cannot write {target}: {e.strerror or e}") from None
            raise

    def read_bytes(self, digest: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
        """Read and verify a blob that is read into memory (a tree, a manifest: at most `limit` bytes)."""
        try:
            data = safeio.read_file(self.root, self._blob_rel(digest), limit)
        except FileNotFoundError:
            raise StoreError(f"object {digest} is missing from the store {self.root}") from None
        except StoreError as e:
            raise StoreError(f"object {digest}: {e}") from None
        if sha256_bytes(data) != digest:
            raise StoreError(f"object {digest} in {self.root} is corrupt (its content no longer matches its digest)")
        return data

    def copy_blob(self, digest: str, dest: BinaryIO) -> None:
        """Stream a blob into `dest`, verifying it (a checkpoint never has to fit in memory)."""
        h = hashlib.sha256()

        def sink(chunk: bytes) -> None:
            h.update(chunk)
            try:
                dest.write(chunk)
            except OSError as e:  # the destination's fault (a full disk): not a store object that cannot be read
                raise _DestinationError(e) from None
        try:
            self._stream_blob(digest, sink)
        except _DestinationError as e:
            raise e.error from None
        if "sha256:" + h.hexdigest() != digest:
            raise StoreError(f"object {digest} in {self.root} is corrupt (its content no longer matches its digest)")

    # --- trees -----------------------------------------------------------------------------------
    def put_tree(self, directory: Path) -> str:
        """Store every file under `directory`; return the digest of the tree manifest.

        Only content, relative path and the executable bit are kept: timestamps, owners and
        other mode bits never reach the store, so the same files give the same digest anywhere."""
        entries = []
        for path in sorted(p for p in directory.rglob("*")):
            rel = path.relative_to(directory).as_posix()
            if path.is_symlink():
                raise StoreError(f"{rel}: symbolic links cannot be stored in artifacts")
            if path.is_dir():
                continue
            if not path.is_file():
                raise StoreError(f"{rel}: only regular files can be stored in artifacts")
            problem = tree_path_problem(rel)
            if problem is not None:  # never write a tree that tree() would refuse
                raise StoreError(problem)
            digest = self.put_file(path)
            entries.append({"path": rel, "digest": digest, "size": path.stat().st_size,
                            "executable": bool(path.stat().st_mode & stat.S_IXUSR)})
        return self.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": entries}))

    def tree(self, digest: str) -> list[FileEntry]:
        """The files of a tree, every path checked (compiler/store/records.py): a tree from a registry
        or an edited store that names '../x' or '/etc/x' is refused here, before anything is written."""
        try:
            return parse_tree(self.read_bytes(digest))
        except StoreError as e:
            raise StoreError(f"tree {digest[:19]}: {e}") from None

    def materialize(self, digest: str, dest: Path) -> None:
        """Write a tree's files under `dest`, verifying each one. Paths were checked by tree(); the
        writes still refuse to follow a symbolic link (one already under `dest`, or raced in), so
        nothing is ever written outside `dest`."""
        entries = self.tree(digest)
        dest.mkdir(parents=True, exist_ok=True)
        root = os.path.realpath(dest)
        for entry in entries:
            *dirs, name = entry.path.split("/")
            parent = _make_dirs(root, dirs)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            try:
                fd = os.open(os.path.join(parent, name), flags, 0o644)
            except OSError as e:
                raise StoreError(f"cannot write {entry.path} under {dest}: {e.strerror or e}") from None
            try:
                with os.fdopen(fd, "wb") as out:
                    self.copy_blob(entry.digest, out)
                    os.fchmod(out.fileno(), 0o755 if entry.executable else 0o644)
            except OSError as e:  # the destination (a full disk); the store's own faults are StoreErrors
                raise StoreError(f"cannot write {entry.path} under {dest}: {e.strerror or e}") from None

    # --- action records --------------------------------------------------------------------------
    def _action_rel(self, key: str) -> str:
        h = _hex(key)
        return f"actions/{h[:2]}/{h}.json"

    def _action_path(self, key: str) -> Path:  # for tests and messages; reads go through _action_rel
        return self.root / self._action_rel(key)

    def get_action(self, key: str) -> ActionRecord | None:
        """The record for `key` when it and everything it names are present.

        The record's shape and the tree manifest are read and verified; artifact files are checked by
        presence and size, not re-hashed (a cache hit on a 70 GB checkpoint must stay cheap): `kiln
        store verify` re-hashes everything and `--repair` drops what is corrupt so the next build
        replaces it. A record of another shape counts as absent (the build writes a good one over it),
        and a corrupt tree manifest is removed here, so the rebuild that follows writes a good one."""
        try:
            record = parse_action(safeio.read_file(self.root, self._action_rel(key), MAX_RECORD_BYTES), key)
        except FileNotFoundError:
            return None
        except (OSError, StoreError):
            return None  # a torn record cannot exist (atomic rename) but a corrupted one can: rebuild
        try:
            entries = self.tree(record.tree)
        except StoreError:
            self.drop_blob(record.tree)
            return None
        for entry in entries:
            if not self.has_intact_size(entry.digest, entry.size):
                return None
        return record

    def drop_blob(self, digest: str) -> None:
        """Remove an object that is corrupt (content addressing would otherwise keep it forever)."""
        with contextlib.suppress(OSError, StoreError):
            if self.has_blob(digest) and self.blob_digest(digest) != digest:
                safeio.remove_entry(self.root, self._blob_rel(digest))

    def drop_action(self, key: str) -> None:
        with contextlib.suppress(OSError):  # a folder there is not Kiln's to remove; verify reports it
            safeio.remove_entry(self.root, self._action_rel(key))

    def put_action(self, record: ActionRecord) -> None:
        data = canonical_json(record.to_json())
        self._write_atomic(self._action_rel(record.key), data)

    def _write_atomic(self, rel: str, data: bytes) -> None:
        self._stage(rel, lambda f: f.write(data), "rec-")

    # --- refs: what was last built per action slot (for the plan's reasons) -----------------------
    def _ref_rel(self, spec: str, action_id: str) -> str:
        safe = action_id.replace("/", "__").replace(":", "--")
        return f"refs/{spec}/{safe}"

    def _ref_path(self, spec: str, action_id: str) -> Path:  # for tests and messages
        return self.root / self._ref_rel(spec, action_id)

    def set_ref(self, spec: str, action_id: str, key: str, params: dict) -> None:
        self._write_atomic(self._ref_rel(spec, action_id), canonical_json({"key": key, "params": params}))

    def get_ref(self, spec: str, action_id: str) -> dict | None:
        """What the slot last built, or None (also for a ref of another shape: the plan then says
        "never built in this store", and the next build writes a good one)."""
        try:
            return parse_ref(safeio.read_file(self.root, self._ref_rel(spec, action_id), MAX_REF_BYTES))
        except (OSError, StoreError):
            return None

    # --- logs ------------------------------------------------------------------------------------
    def log_path(self, key: str) -> Path:
        return self.root / "logs" / f"{_hex(key)}.log"

    def write_log(self, key: str, src: Path) -> None:
        """Copy an action's log into logs/ (through tmp/, renamed: two builds running one action never
        see half a log). StoreError naming the log when it cannot be written (a full disk)."""
        def copy(f) -> None:
            with open(src, "rb") as s:
                shutil.copyfileobj(s, f, CHUNK)
        self._stage(f"logs/{_hex(key)}.log", copy, "log-")

    # --- releases --------------------------------------------------------------------------------
    def add_release(self, spec: str, manifest: bytes) -> str:
        digest = self.put_bytes(manifest)
        with self._history_lock():  # concurrent builds of one spec: each one's release is kept
            history, bad = self.release_history(spec)
            new = history if history and history[-1] == digest else history + [digest]
            if bad or new != history:  # rewriting also drops lines that hold no release (a torn or edited line)
                self.set_releases(spec, new)
        return digest

    def set_releases(self, spec: str, digests: list[str]) -> None:
        """Write a history whole (callers hold the history lock, or the store alone)."""
        lines = "".join(json.dumps(d) + "\n" for d in digests)
        self._write_atomic(f"releases/{spec}.jsonl", lines.encode())

    def release_history(self, spec: str) -> tuple[list[str], list[int]]:
        """(release digests, oldest first; line numbers that hold no release digest)."""
        try:
            data = safeio.read_file(self.root, f"releases/{spec}.jsonl", MAX_HISTORY_BYTES)
        except FileNotFoundError:
            return [], []
        except (OSError, StoreError) as e:
            raise StoreError(f"cannot read the release history of {spec}: {getattr(e, 'strerror', None) or e}") \
                from None
        return parse_release_history(data.decode("utf-8", "replace"))

    def releases(self, spec: str) -> list[str]:
        return self.release_history(spec)[0]

    def all_release_specs(self) -> list[str]:
        """The specs with a release history (regular files only: verify reports anything else)."""
        return [name[: -len(".jsonl")] for name, mode in safeio.listdir(self.root, "releases")
                if name.endswith(".jsonl") and stat.S_ISREG(mode)]


class _DestinationError(Exception):
    """Carries an OSError of the destination of copy_blob past _stream_blob's read errors."""

    def __init__(self, error: OSError) -> None:
        self.error = error


def _begun(root: Path) -> bool:
    """A store a plan began: its folder holds Kiln's digest cache and nothing else (plan of an
    earlier Kiln wrote it before any build); it is Kiln's, so it is completed, not refused."""
    try:
        return root.is_dir() and {p.name for p in root.iterdir()} == {"digest-cache.json"}
    except OSError:
        return False


def _make_dirs(root: str, parts: list[str]) -> str:
    """Create root/parts[0]/parts[1]/..., refusing any component that exists as something other
    than a real directory (a symbolic link could lead out of `root`)."""
    path = root
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):
                raise StoreError(f"cannot write under {path}: it exists and is not a directory") from None
    return path
