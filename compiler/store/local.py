"""The embedded content-addressed store: a directory, written atomically, verified on read.

Layout under the root:
  objects/sha256/ab/abcd...   blobs and tree manifests, named by the sha256 of their bytes
  actions/ab/<key>.json       action records: which tree an action key produced (written last)
  refs/<spec>/<action id>     the key and parameters last built for an action slot (plan reasons)
  releases/<spec>.jsonl       release manifests built for a spec, oldest first (gc keeps the last N)
  logs/<key>.log              one log per executed action
  tmp/                        work and staging space; anything here is garbage after a crash
  store.lock                  shared by builds, exclusive for gc

Every write goes to tmp/ first and is renamed into place, and an action record is written only after
all objects it names exist, so a crash (even SIGKILL) leaves either nothing or a complete result.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .canonical import canonical_json

CHUNK = 1 << 20


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

    def to_json(self) -> dict:
        return {"key": self.key, "kind": self.kind, "action_id": self.action_id, "tree": self.tree,
                "duration_s": self.duration_s, "log": self.log}


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
    def __init__(self, root: Path, create: bool = True) -> None:
        """`create=False`: only read (a missing store reads as empty and is not created)."""
        self.root = Path(root)
        if create:
            for sub in ("objects/sha256", "actions", "refs", "releases", "logs", "tmp"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)

    # --- locking ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, exclusive: bool = False) -> Iterator[None]:
        """Builds share the store; gc needs it alone. The lock dies with the process (flock)."""
        fd = os.open(self.root / "store.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def workdir(self, prefix: str = "work-") -> Iterator[Path]:
        """A scratch directory inside the store (same filesystem, so results rename into place)."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root / "tmp"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    # --- blobs -----------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        h = _hex(digest)
        return self.root / "objects" / "sha256" / h[:2] / h

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def _has_intact_size(self, digest: str, size: int) -> bool:
        try:
            return self.blob_path(digest).stat().st_size == size
        except FileNotFoundError:
            return False

    def put_bytes(self, data: bytes) -> str:
        digest = sha256_bytes(data)
        if not self._has_intact_size(digest, len(data)):
            self._place(digest, lambda f: f.write(data))
        return digest

    def put_file(self, path: Path) -> str:
        digest = sha256_file(path)
        if not self._has_intact_size(digest, path.stat().st_size):
            def copy(f) -> None:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, f, CHUNK)
            self._place(digest, copy)
            if sha256_file(self.blob_path(digest)) != digest:  # the file changed while we read it
                self.blob_path(digest).unlink(missing_ok=True)
                raise StoreError(f"{path} changed while it was being stored")
        return digest

    def _place(self, digest: str, write) -> None:
        target = self.blob_path(digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="blob-", dir=self.root / "tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)  # identical content: a concurrent writer's rename is harmless
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def read_bytes(self, digest: str) -> bytes:
        """Read and verify a blob."""
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"object {digest} is missing from the store") from None
        if sha256_bytes(data) != digest:
            raise StoreError(f"object {digest} is corrupt (its content no longer matches its digest)")
        return data

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
            digest = self.put_file(path)
            entries.append({"path": rel, "digest": digest, "size": path.stat().st_size,
                            "executable": bool(path.stat().st_mode & stat.S_IXUSR)})
        return self.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": entries}))

    def tree(self, digest: str) -> list[FileEntry]:
        doc = json.loads(self.read_bytes(digest))
        if doc.get("kind") != "kiln.tree/v1":
            raise StoreError(f"object {digest} is not a tree manifest")
        return [FileEntry(e["path"], e["digest"], e["size"], e["executable"]) for e in doc["files"]]

    def materialize(self, digest: str, dest: Path) -> None:
        """Write a tree's files under `dest`, verifying each one."""
        for entry in self.tree(digest):
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.read_bytes(entry.digest))
            os.chmod(target, 0o755 if entry.executable else 0o644)

    # --- action records --------------------------------------------------------------------------
    def _action_path(self, key: str) -> Path:
        h = _hex(key)
        return self.root / "actions" / h[:2] / f"{h}.json"

    def get_action(self, key: str) -> ActionRecord | None:
        """The record for `key` when it and everything it names are present.

        The tree manifest is read and verified; artifact files are checked by presence and size,
        not re-hashed (a cache hit on a 70 GB checkpoint must stay cheap): `kiln store verify`
        re-hashes everything and `--repair` drops what is corrupt so the next build replaces it.
        A corrupt tree manifest is removed here, so the rebuild that follows writes a good one."""
        path = self._action_path(key)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # a torn record cannot exist (atomic rename) but a corrupted one can: rebuild
        record = ActionRecord(doc["key"], doc["kind"], doc["action_id"], doc["tree"], doc["duration_s"], doc["log"])
        try:
            entries = self.tree(record.tree)
        except StoreError:
            self.drop_blob(record.tree)
            return None
        for entry in entries:
            if not self._has_intact_size(entry.digest, entry.size):
                return None
        return record

    def drop_blob(self, digest: str) -> None:
        """Remove an object that is corrupt (content addressing would otherwise keep it forever)."""
        with contextlib.suppress(FileNotFoundError, StoreError):
            if self.has_blob(digest) and sha256_file(self.blob_path(digest)) != digest:
                self.blob_path(digest).unlink()

    def drop_action(self, key: str) -> None:
        self._action_path(key).unlink(missing_ok=True)

    def put_action(self, record: ActionRecord) -> None:
        data = canonical_json(record.to_json())
        self._write_atomic(self._action_path(record.key), data)

    def _write_atomic(self, target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="rec-", dir=self.root / "tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    # --- refs: what was last built per action slot (for the plan's reasons) -----------------------
    def _ref_path(self, spec: str, action_id: str) -> Path:
        safe = action_id.replace("/", "__").replace(":", "--")
        return self.root / "refs" / spec / safe

    def set_ref(self, spec: str, action_id: str, key: str, params: dict) -> None:
        self._write_atomic(self._ref_path(spec, action_id), canonical_json({"key": key, "params": params}))

    def get_ref(self, spec: str, action_id: str) -> dict | None:
        try:
            return json.loads(self._ref_path(spec, action_id).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None

    # --- logs ------------------------------------------------------------------------------------
    def log_path(self, key: str) -> Path:
        return self.root / "logs" / f"{_hex(key)}.log"

    # --- releases --------------------------------------------------------------------------------
    def add_release(self, spec: str, manifest: bytes) -> str:
        digest = self.put_bytes(manifest)
        history = self.releases(spec)
        if not history or history[-1] != digest:
            self.set_releases(spec, history + [digest])
        return digest

    def set_releases(self, spec: str, digests: list[str]) -> None:
        lines = "".join(json.dumps(d) + "\n" for d in digests)
        self._write_atomic(self.root / "releases" / f"{spec}.jsonl", lines.encode())

    def releases(self, spec: str) -> list[str]:
        path = self.root / "releases" / f"{spec}.jsonl"
        try:
            return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except FileNotFoundError:
            return []

    def all_release_specs(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "releases").glob("*.jsonl"))
