"""Where the CI workflows install Kiln from: this project's git repository at a pinned commit.

Kiln is distributed from its repository (`pip install "kiln-compiler @ git+URL@COMMIT"`), not from
a package index: the name `kiln` on the public index is another project, and a direct URL
requirement is never looked up on an index, so no index can substitute another package for it.

By default the workflows install the Kiln that runs `kiln init`: the repository and commit pip
recorded when it was installed from git (PEP 610 direct_url.json), or, for a source checkout (the
editable install of scripts/install.sh), the checkout's `origin` remote and its HEAD commit, which
must be clean and already on a branch of that remote. Anything else is an error that asks for
`--kiln-repo` and `--kiln-commit`. Either option works alone: the other part still comes from the
running Kiln, and what an option replaces (the checkout's origin, its HEAD) is then neither required nor named.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from compiler import DISTRIBUTION

# Pins shared with scripts/install.sh (tests/test_gitops_ci.py checks it uses the same one): torch
# first and exactly pinned, or ModelOpt pulls in an unpinned torch with its CUDA libraries.
TORCH_PIN = "torch==2.13.0"
QUANTIZE_EXTRA = "quantize"

_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_HTTPS_RE = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~-]+)+/?")
_SSH_RE = re.compile(r"ssh://[A-Za-z0-9._-]+@[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~-]+)+/?")
_SCP_RE = re.compile(r"([A-Za-z0-9._-]+)@([A-Za-z0-9.-]+):([A-Za-z0-9._~-][A-Za-z0-9._~/-]*)")


class SourceError(Exception):
    """The Kiln source cannot be determined or is not one a CI runner can install from (one line)."""


@dataclass(frozen=True)
class KilnSource:
    repo: str  # https://... or ssh://user@host/... (checked by repo_url)
    commit: str  # 40 hex digits

    def requirement(self, *extras: str) -> str:
        """The PEP 508 direct reference pip installs, e.g. kiln-compiler[quantize] @ git+https://...@<sha>."""
        name = f"{DISTRIBUTION}[{','.join(extras)}]" if extras else DISTRIBUTION
        return f"{name} @ git+{self.repo}@{self.commit}"


def repo_url(url: str) -> str:
    """A repository URL a CI runner can clone and a workflow can carry unquoted: https:// or ssh://
    (scp-like `git@host:path` becomes ssh://git@host/path). Local paths, plain HTTP and
    credentials in the URL are refused."""
    url = url.strip()
    if m := _SCP_RE.fullmatch(url):
        url = f"ssh://{m.group(1)}@{m.group(2)}/{m.group(3)}"
    url = url.removeprefix("git+")
    if _HTTPS_RE.fullmatch(url) or _SSH_RE.fullmatch(url):
        return url.rstrip("/")
    if url.startswith("https://") and "@" in url.split("/", 3)[2]:
        raise SourceError(f"repository URL {url!r} carries credentials; CI workflows must not")
    raise SourceError(f"repository URL {url!r}: a CI runner installs Kiln from an https:// or ssh:// URL "
                      "(letters, digits, '.', '_', '~', '-' and '/')")


def commit_id(commit: str) -> str:
    commit = commit.strip().lower()
    if not _COMMIT_RE.fullmatch(commit):
        raise SourceError(f"commit {commit!r}: give the full 40-digit commit id (a branch or tag can move)")
    return commit


def _git(cwd: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _from_direct_url(record: str | None) -> KilnSource | None:
    """pip's record of a `pip install git+URL@REF` (PEP 610), or None for any other kind of install."""
    if not record:
        return None
    try:
        doc = json.loads(record)
        vcs = doc.get("vcs_info") or {}
        if vcs.get("vcs") != "git" or not vcs.get("commit_id"):
            return None
        return KilnSource(repo_url(doc["url"]), commit_id(vcs["commit_id"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _from_checkout(package_dir: Path, repo: str | None = None, commit: str | None = None) -> KilnSource | None:
    """The source checkout `package_dir` lives in (origin remote, HEAD), or None when it is not one.
    `repo` / `commit` (given by the user) replace origin / HEAD: what they replace is then neither
    required nor checked, and no message names it."""
    top = _git(package_dir, "rev-parse", "--show-toplevel")
    if not top:
        return None
    root = Path(top)
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    if not re.search(rf'^name = "{re.escape(DISTRIBUTION)}"$', pyproject, re.M):
        return None  # some other repository that happens to contain the package
    given_repo = repo is not None
    if repo is None:
        repo = _git(root, "config", "--get", "remote.origin.url")
        if not repo:
            raise SourceError(f"the Kiln checkout {root} has no `origin` remote: pass --kiln-repo URL")
    if commit is None:
        commit = _git(root, "rev-parse", "HEAD") or ""
        if _git(root, "status", "--porcelain", "--untracked-files=no", "--", "compiler", "pyproject.toml"):
            raise SourceError(f"the Kiln checkout {root} has uncommitted changes, so no commit holds the Kiln "
                              "that runs here: commit and push them, or pass --kiln-commit COMMIT")
        # Whether a runner can fetch HEAD is only known for the checkout's own remotes; with another
        # repository (--kiln-repo) the user vouches for it.
        if not given_repo and not _git(root, "branch", "--remotes", "--contains", commit):
            raise SourceError(f"commit {commit[:12]} of the Kiln checkout {root} is on no branch of its remotes "
                              "(as last fetched): push it, or pass --kiln-commit COMMIT")
    return KilnSource(repo_url(repo), commit_id(commit))


def running_source(package_dir: Path | None = None, direct_url: str | None = None, *,
                   repo: str | None = None, commit: str | None = None) -> KilnSource:
    """The repository and commit of the Kiln that runs now (see the module docstring); `repo` or
    `commit` (--kiln-repo, --kiln-commit) replace one of them."""
    if package_dir is None:
        import compiler

        package_dir = Path(compiler.__file__).resolve().parent
    if direct_url is None:
        direct_url = _installed_direct_url(package_dir)
    found = _from_direct_url(direct_url)
    if found is not None:
        return KilnSource(repo_url(repo) if repo is not None else found.repo,
                          commit_id(commit) if commit is not None else found.commit)
    found = _from_checkout(package_dir, repo, commit)
    if found is None:
        what = {(False, False): "repository and commit", (True, False): "commit", (False, True): "repository"}
        wanted = [opt for opt, given in (("--kiln-repo URL", repo), ("--kiln-commit COMMIT", commit)) if given is None]
        raise SourceError(f"cannot tell which {what[(repo is not None, commit is not None)]} this Kiln was installed "
                          f"from (not a git install, not a source checkout): pass {' '.join(wanted)}")
    return found


def _installed_direct_url(package_dir: Path) -> str | None:
    """direct_url.json of the installed distribution, when that distribution is the package running."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    located = dist.locate_file("compiler")
    try:
        if Path(str(located)).resolve() != package_dir:
            return None  # another copy is installed; this one runs from elsewhere
    except OSError:
        return None
    return dist.read_text("direct_url.json")


def resolve_source(repo: str | None, commit: str | None) -> KilnSource:
    """--kiln-repo / --kiln-commit, each defaulting to the running Kiln's."""
    if repo is not None:
        repo = repo_url(repo)  # a bad value is reported before anything else
    if commit is not None:
        commit = commit_id(commit)
    if repo is not None and commit is not None:
        return KilnSource(repo, commit)
    return running_source(repo=repo, commit=commit)
