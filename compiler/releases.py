"""A built release read back from the store: which one (a spec's last build, or a manifest digest),
its artifacts, a selection of them by id or kind glob, their sizes, and writing them out
(`kiln export`, `kiln show`, the summary `kiln build` ends with)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from compiler.pipeline import Validation, validate_path
from compiler.release import spec_digest
from compiler.store.export import checked_relpath, write_tree
from compiler.store.local import LocalStore, StoreError
from compiler.store.records import is_digest, parse_release

MANIFEST_NAME = "release.json"  # the release manifest, next to the exported artifacts


class ReleaseError(Exception):
    """No such release, a release of another version of the spec, or a selection that matches nothing."""


@dataclass(frozen=True)
class Artifact:
    id: str  # e.g. host-script/dev-h100
    kind: str
    tree: str | None  # None while pending (deferred by the build)
    pending: str | None


@dataclass(frozen=True)
class Release:
    digest: str
    manifest: bytes
    spec_name: str
    spec_digest: str  # of the spec it was built from
    artifacts: tuple[Artifact, ...]

    @property
    def complete(self) -> bool:
        return all(a.tree is not None for a in self.artifacts)


def load_release(store: LocalStore, digest: str) -> Release:
    if not is_digest(digest):
        raise ReleaseError(f"{digest!r} is not a release digest (sha256: and 64 hex digits)")
    try:
        data = store.read_bytes(digest)
    except StoreError as e:
        raise ReleaseError(f"no release {digest} in {store.root}: {e}") from None
    try:
        doc = parse_release(data)
    except StoreError as e:
        raise ReleaseError(f"{digest} in {store.root} is not a release manifest: {e}") from None
    artifacts = tuple(Artifact(a["id"], a["kind"], a.get("tree"), a.get("pending")) for a in doc["artifacts"])
    for a in artifacts:
        checked_relpath(a.id)  # it becomes a directory name
    return Release(digest, data, doc["spec"]["name"], doc["spec"]["digest"], artifacts)


def release_of_spec(store: LocalStore, spec: Path) -> tuple[Validation, Release | None]:
    """The store's last release of `spec`, which must have been built from the spec as it is now.
    (validation, None) when the spec has errors."""
    result = validate_path(spec)
    if not result.ok or result.spec is None:
        return result, None
    history = store.releases(result.spec.name)
    if not history:
        raise ReleaseError(f"the store {store.root} has no release of {result.spec.name!r}: run `kiln build {spec}`")
    release = load_release(store, history[-1])
    if release.spec_digest != spec_digest(result.spec):
        raise ReleaseError(f"the last release of {result.spec.name!r} ({release.digest}) was built from another "
                           f"version of {spec}: run `kiln build {spec}` first, or name that release by its digest")
    return result, release


def find_release(store: LocalStore, ref: str) -> tuple[Validation | None, Release | None]:
    """`ref`: a release manifest digest (sha256:...) or a spec file."""
    if ref.startswith("sha256:"):
        return None, load_release(store, ref)
    if not Path(ref).is_file():
        raise ReleaseError(f"{ref} is neither a spec file nor a release digest (sha256:...)")
    return release_of_spec(store, Path(ref))


def select(release: Release, patterns: tuple[str, ...] = ()) -> list[Artifact]:
    """The artifacts whose id or kind matches one of the glob patterns (all without patterns)."""
    if not patterns:
        return list(release.artifacts)
    unmatched = [p for p in patterns
                 if not any(fnmatch.fnmatchcase(a.id, p) or fnmatch.fnmatchcase(a.kind, p) for a in release.artifacts)]
    if unmatched:
        raise ReleaseError(f"no artifact matches {', '.join(map(repr, unmatched))}; artifacts are: "
                           + ", ".join(a.id for a in release.artifacts))
    return [a for a in release.artifacts
            if any(fnmatch.fnmatchcase(a.id, p) or fnmatch.fnmatchcase(a.kind, p) for p in patterns)]


def locate(release: Release, target: str) -> tuple[Artifact, str]:
    """`ARTIFACT/PATH` (or just `ARTIFACT`) -> (artifact, path inside it, "" for the artifact itself).
    Ids contain '/', so the longest id that prefixes the target wins."""
    found = [a for a in release.artifacts if target == a.id or target.startswith(a.id + "/")]
    if not found:
        raise ReleaseError(f"no artifact {target!r} in release {release.digest}; artifacts are: "
                           + ", ".join(a.id for a in release.artifacts))
    artifact = max(found, key=lambda a: len(a.id))
    return artifact, target[len(artifact.id) + 1:]


@dataclass(frozen=True)
class KindSize:
    kind: str
    artifacts: int
    files: int
    bytes: int


def sizes_by_kind(store: LocalStore, artifacts: list[Artifact]) -> list[KindSize]:
    """What was produced, per kind (pending artifacts left out), in the order kinds first appear."""
    out: dict[str, list[int]] = {}
    for a in artifacts:
        if a.tree is None:
            continue
        entries = store.tree(a.tree)
        row = out.setdefault(a.kind, [0, 0, 0])
        row[0] += 1
        row[1] += len(entries)
        row[2] += sum(e.size for e in entries)
    return [KindSize(kind, *row) for kind, row in out.items()]


def export_release(store: LocalStore, release: Release, dest: Path,
                   patterns: tuple[str, ...] = ()) -> tuple[list[tuple[Artifact, int]], list[Artifact]]:
    """Write the selected artifacts under dest/<artifact id>/ and the manifest as dest/release.json.
    Returns ([(artifact, files written)], [selected artifacts still pending])."""
    chosen = select(release, patterns)
    for a in chosen:
        checked_relpath(a.id)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create {dest}: {e.strerror or e}") from None
    written = []
    for a in chosen:
        if a.tree is not None:
            written.append((a, len(write_tree(store, a.tree, dest, a.id))))
    try:
        (dest / MANIFEST_NAME).write_bytes(release.manifest)
    except OSError as e:
        raise StoreError(f"cannot write {dest / MANIFEST_NAME}: {e.strerror or e}") from None
    return written, [a for a in chosen if a.tree is None]
