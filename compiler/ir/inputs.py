"""The files a spec names, confined to where a reviewed spec may read.

A spec in a GitOps repository is reviewed, then built by CI with the builder's permissions, and the
files it names end up in artifacts that `kiln publish` pushes. So a spec reads only files inside its
own repository, or inside a models root that the builder configures ($KILN_MODELS), never the rest
of the machine: `calibration: {data: /etc/passwd}` is refused, not published.

- The repository is the git work tree that contains the spec: the nearest directory at or above
  the spec's own that holds `.git` (a directory, or the file of a worktree or submodule). A spec
  outside any git work tree is confined to its own directory (and what is below it).
- A relative path is relative to the spec's directory. An absolute path is accepted only when it
  lies inside one of those roots (a builder's $KILN_MODELS is usually named absolutely).
- Symbolic links are resolved before the check, so a link in the repository that points out of it
  is refused like its target, and a refused path is never opened, listed or hashed.

Resolution (resolve.py) confines every input path once and keeps the result in the IR
(`Resolved.inputs`); the checks and lowering read files only through it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compiler.diagnostics import Rule

NAME_MAX = 255  # bytes in one path component (Linux filesystems)
PATH_MAX = 4096  # bytes in a whole path (Linux)


class InputOutsideRepository(Rule):
    """A file or directory the spec names lies outside the spec's repository.

    A reviewed spec must not be able to read the build machine: calibration and evaluation data,
    model directories and config files become artifacts that `kiln publish` pushes to a registry.
    Every input path is relative to the spec's file and must stay inside its repository (the git
    work tree that contains the spec, or the spec's own directory when there is none) after
    symbolic links are resolved. A builder may allow one more root for model files by setting
    `$KILN_MODELS`; paths inside it may be written absolutely. The lock file beside the spec
    (`kiln.lock`) is an input too, and confined the same way: a link out of the repository is
    refused unread.

    Move the file into the repository (or under `$KILN_MODELS`), or fix the path.
    """

    code = "K915"
    name = "input-outside-repository"


class InputUnusable(Rule):
    """A file or directory the spec names exists but cannot be used.

    Its name is longer than the filesystem allows, it cannot be read (permissions, an I/O error),
    or it is neither a regular file nor a directory where one is expected. Inputs are hashed into
    the artifacts' keys, so each must be readable by the user who runs Kiln.
    """

    code = "K916"
    name = "input-unusable"


@dataclass(frozen=True)
class InputRoots:
    """Where a spec may read: its repository, and the builder's models root when one is set."""

    repository: Path
    models: Path | None = None

    def contains(self, path: Path) -> bool:
        return any(_inside(path, root) for root in (self.repository, self.models) if root is not None)

    def describe(self) -> str:
        where = f"the spec's repository ({self.repository})"
        return where + (f" or $KILN_MODELS ({self.models})" if self.models is not None else "")


@dataclass(frozen=True)
class ResolvedInput:
    """A spec's input path after confinement: the real path, and where the spec names it."""

    path: Path
    where: tuple


class InputRefused(Exception):
    def __init__(self, rule: type[Rule], message: str, help: str | None = None) -> None:
        super().__init__(message)
        self.rule, self.message, self.help = rule, message, help


def find_repository(spec_dir: Path) -> Path:
    """The git work tree containing `spec_dir` (a resolved directory), else `spec_dir` itself."""
    for d in (spec_dir, *spec_dir.parents):
        try:
            if (d / ".git").exists():
                return d
        except OSError:
            break
    return spec_dir


def input_roots(spec_dir: Path, models_root: str | Path | None = None) -> InputRoots:
    models = None
    if models_root:
        try:
            models = Path(os.path.realpath(models_root))
        except (OSError, ValueError):
            models = None
    return InputRoots(find_repository(spec_dir), models)


def confine(value: str, base_dir: Path, roots: InputRoots) -> Path:
    """The real path of the spec's `value` (relative to `base_dir`), or InputRefused (K915 outside
    the roots, K916 a name no filesystem takes). Resolves names only: nothing is opened."""
    if "\x00" in value:
        raise InputRefused(InputUnusable, f"path {_short(value)} contains a NUL byte")
    candidate = Path(value) if os.path.isabs(value) else base_dir / value
    try:
        real = Path(os.path.realpath(candidate))
    except (OSError, ValueError) as e:
        raise InputRefused(InputUnusable, f"cannot resolve {_short(value)}: {getattr(e, 'strerror', None) or e}") \
            from None
    return confine_path(real, roots, value)


def confine_path(real: Path, roots: InputRoots, shown: str) -> Path:
    """`real` (a resolved path) when it is inside the roots and a name the filesystem takes."""
    if not roots.contains(real):
        named = f"{_short(shown)} is" if os.path.normpath(shown) == str(real) else \
            f"{_short(shown)} resolves to {_short(str(real))}, which is"
        raise InputRefused(InputOutsideRepository, f"{named} outside {roots.describe()}",
                           help="inputs must be files of the spec's repository (set $KILN_MODELS on the "
                                "builder to allow a directory of model files)")
    raw = os.fsencode(str(real))
    if len(raw) >= PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise InputRefused(InputUnusable, f"path {_short(shown)} is longer than the filesystem allows",
                           help=f"a file name has at most {NAME_MAX} bytes, a path {PATH_MAX - 1}")
    return real


def check_readable(path: Path, directory: bool) -> str | None:
    """Why an existing input cannot be used, or None (also None when it does not exist: K905 says
    that). Opens a file without reading it; lists a directory and opens each regular file in it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            return None
        return f"cannot read it: {e.strerror or e}"
    import stat as st_

    if directory:
        if not st_.S_ISDIR(st.st_mode):
            return None  # K905: not a directory
        try:
            for p in sorted(path.rglob("*")):
                if p.is_file() and not p.is_symlink():
                    with open(p, "rb"):
                        pass
        except OSError as e:
            return f"cannot read {getattr(e, 'filename', None) or path}: {e.strerror or e}"
        return None
    if not st_.S_ISREG(st.st_mode):
        return None  # K905: not a regular file
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        return f"cannot read it: {e.strerror or e}"
    return None


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` (OSError EFBIG past it). Anything else
    (a FIFO, a device such as /dev/zero, a socket, a directory) is refused (OSError EINVAL, "not a
    regular file") before a byte is read: the file is opened non-blocking, so a FIFO without a
    writer does not wait, and checked on the open descriptor, so a swap after a check cannot slip
    one in. The size is not trusted either: at most `limit` + 1 bytes are read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes (the limit for this file)", str(path))
    return data


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically: a new temporary file beside it (created exclusively, so a
    link planted under a fixed temporary name is never followed), then renamed over `path` (a link
    at `path` is replaced, not written through)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it (mkstemp makes it 0600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _short(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:117] + "...")


def count_samples(path: Path, limit: int, max_line: int = 16 << 20) -> int | None:
    """The samples (non-empty lines, as the calibration-set action splits them) of a calibration
    file, counted up to `limit`: a large file is read no further. None when it cannot be read as a
    regular file (the build says why)."""
    if not os.path.isfile(path):  # a FIFO or device is never opened here
        return None
    found = 0
    try:
        with open(path, "rb") as f:
            while found < limit and (raw := f.readline(max_line + 1)):
                if len(raw) > max_line:
                    return None
                found += sum(1 for piece in raw.decode("utf-8", "replace").splitlines() if piece.strip())
    except OSError:
        return None
    return min(found, limit)
