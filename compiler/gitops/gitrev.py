"""A spec as it was at a git revision, read with `git archive`: the working tree is never touched.

Only the spec's own directory is extracted (a spec names its data and model files relative to
itself); a spec that refers to files outside its directory sees them missing at the base revision.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator


class GitError(Exception):
    """Not a git repository, an unknown revision, or git itself is missing (a usage problem)."""


def _git(cwd: Path, *args: str) -> bytes:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(msg[-1] if msg else f"git {' '.join(args)} failed")
    return proc.stdout


def repo_root(path: Path) -> Path:
    return Path(_git(path.resolve().parent, "rev-parse", "--show-toplevel").decode().strip())


def head_commit(spec: Path) -> str:
    """The commit the spec's repository is at (full hex)."""
    return _git(spec.resolve().parent, "rev-parse", "HEAD").decode().strip()


def changes_since(spec: Path, commit: str, inputs: tuple[Path, ...] | list[Path] = ()) -> tuple[list[str], list[str]]:
    """(changed, outside): what of a release differs from `commit`.

    `changed`: paths (relative to the repository root) whose content differs from `commit`: in the
    spec's directory, edited or deleted tracked files (staged or not) and untracked files git does
    not ignore; for each of `inputs` (every file or directory the release reads: model directories,
    data, tune records, the lock file), wherever it lies in the repository, the same and also files
    git ignores (an ignored input is not pinned by any commit). Kiln's own outputs (anything under a
    `.kiln` directory) do not count. `outside`: inputs that are not in the repository at all."""
    root = repo_root(spec).resolve()
    commit = resolve_ref(spec, commit)
    rel_dir = spec.resolve().parent.relative_to(root).as_posix()
    where = [_literal(rel_dir)]
    extra: list[str] = []
    outside: list[str] = []
    for path in inputs:
        try:
            extra.append(_literal(Path(os.path.realpath(path)).relative_to(root).as_posix()))
        except ValueError:
            outside.append(str(path))
    tracked = _git(root, "diff", "-z", "--name-only", "--no-renames", commit, "--", *where, *extra).split(b"\0")
    untracked = _git(root, "ls-files", "-z", "--others", "--exclude-standard", "--", *where).split(b"\0")
    unpinned = _git(root, "ls-files", "-z", "--others", "--", *extra).split(b"\0") if extra else []
    changed = {os.fsdecode(p) for p in tracked + untracked + unpinned if p}
    return sorted(p for p in changed if ".kiln" not in p.split("/")), sorted(outside)


def _literal(rel: str) -> str:
    """A pathspec that matches `rel` itself (and what is below it), whatever characters it holds."""
    return ":(literal)" + ("." if rel in ("", ".") else rel)


def resolve_ref(spec: Path, ref: str) -> str:
    try:
        return _git(spec.resolve().parent, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
    except GitError:
        raise GitError(f"unknown git revision {ref!r}") from None


# Extraction problems that mean the disk, not the revision: said as such, with what to change.
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


@contextlib.contextmanager
def spec_at(spec: Path, ref: str) -> Iterator[Path | None]:
    """Yield the path of `spec` as extracted from revision `ref` into a temporary directory, or None
    when the spec did not exist there (a pull request that adds it).

    The archive is streamed from git straight into the directory (no tar file beside it). An entry
    that cannot be extracted safely or at all (a link to an absolute path or out of the directory,
    a name longer than the file system allows, a device) is left out: the spec at the base then sees
    it missing, as it sees files outside its directory. A file system that fills is a GitError
    naming TMPDIR."""
    root = repo_root(spec)
    commit = resolve_ref(spec, ref)
    rel_dir = spec.resolve().parent.relative_to(root.resolve()).as_posix()
    rel_spec = spec.resolve().relative_to(root.resolve()).as_posix()
    listed = _git(root, "ls-tree", "-r", "--name-only", commit, "--", rel_spec).decode().strip()
    with tempfile.TemporaryDirectory(prefix="kiln-base-") as tmp:
        if not listed:
            yield None
            return
        _extract(root, commit, rel_dir, Path(tmp) / "tree")
        yield Path(tmp) / "tree" / rel_spec


def _extract(root: Path, commit: str, rel_dir: str, dest: Path) -> None:
    dest.mkdir()
    proc = subprocess.Popen(["git", "archive", "--format=tar", commit, "--", "." if rel_dir == "." else rel_dir],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = False
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                try:
                    tar.extract(member, dest, filter="data")
                except tarfile.FilterError:
                    continue  # a link out of the directory, an absolute path, a device: left out
                except OSError as e:
                    if e.errno in _NO_ROOM:
                        raise GitError(f"cannot extract {rel_dir or '.'} at {commit[:12]} into {dest.parent}: "
                                       f"{e.strerror}; set TMPDIR to a file system with room for the spec's "
                                       "directory") from None
                    if e.errno != errno.ENAMETOOLONG:
                        raise GitError(f"cannot extract {member.name} at {commit[:12]}: {e.strerror or e}") \
                            from None
        proc.stdout.read()  # the archive's padding: git exits once it is written
        done = True
    except tarfile.TarError as e:
        raise GitError(f"git archive of {commit[:12]} could not be read: {e}") from None
    finally:
        if not done:
            proc.kill()
        err = proc.communicate()[1]
    if proc.returncode != 0:
        raise GitError(err.decode("utf-8", "replace").strip() or "git archive failed")
