"""How Kiln's artifacts look in an OCI registry. Pure: descriptors and manifests as bytes.

  artifacts      repository <namespace>/kiln-artifacts, shared by every spec (the build cache);
                 one OCI manifest per action output, tagged "<kind>-<key hex>", artifactType
                 application/vnd.kiln.<kind>.v1. Its config is the store's tree manifest (so the
                 config digest is the tree digest the release manifest names); each file is one
                 layer named by `org.opencontainers.image.title`, as ORAS names files, so
                 `oras pull` yields the files. Identical content gives identical digests.
  releases       repository <namespace>/<spec name>; the release manifest as an artifact tagged
                 with the spec's git commit. Nothing in it depends on the commit, so a revert tags
                 the manifest digest of the earlier release.
  provenance     same repository, tagged "<commit>.provenance": the in-toto statement.

Artifact annotations hold what the key determines (key, kind, kind version) and the kiln version
that wrote it: an artifact is shared across spec revisions, so a per-revision value there (the
spec digest) would churn the cache. The spec digest and the toolchain pins annotate the release.
"""

from __future__ import annotations

from compiler import __version__
from compiler.store.canonical import canonical_json
from compiler.store.local import sha256_bytes

from .oci import OCI_MANIFEST

ARTIFACTS_REPO = "kiln-artifacts"
TREE_TYPE = "application/vnd.kiln.tree.v1+json"
FILE_TYPE = "application/octet-stream"
RELEASE_TYPE = "application/vnd.kiln.release.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
INTOTO_TYPE = "application/vnd.in-toto+json"
TITLE = "org.opencontainers.image.title"
A_KEY, A_KIND, A_VERSION, A_TOOL = "dev.kiln.key", "dev.kiln.kind", "dev.kiln.kind.version", "dev.kiln.toolchain"
A_SPEC, A_SPEC_DIGEST = "dev.kiln.spec.name", "dev.kiln.spec.digest"


def artifact_type(kind: str) -> str:
    return f"application/vnd.kiln.{kind}.v1"


def artifact_tag(kind: str, key: str) -> str:
    return f"{kind}-{key.removeprefix('sha256:')}"


def release_tag(commit: str) -> str:
    return commit


def dirty_release_tag(commit: str, release_digest: str) -> str:
    """The tag of a release built from a checkout with uncommitted changes: it names no commit (a
    commit's tag must only ever name what that commit builds) and carries the release manifest's
    digest, so it can never be moved to other content either."""
    return f"dirty-{commit[:12]}-{release_digest.removeprefix('sha256:')[:16]}"


def provenance_tag(commit: str) -> str:
    """The provenance next to the release tagged `commit` (or a dirty_release_tag)."""
    return f"{commit}.provenance"


def descriptor(media_type: str, digest: str, size: int, annotations: dict | None = None) -> dict:
    d = {"mediaType": media_type, "digest": digest, "size": size}
    if annotations:
        d["annotations"] = annotations
    return d


def _manifest(artifact: str, config: dict, layers: list[dict], annotations: dict, subject: dict | None = None) -> bytes:
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact, "config": config,
           "layers": layers, "annotations": annotations}
    if subject is not None:
        doc["subject"] = subject
    return canonical_json(doc)


def artifact_manifest(kind: str, version: int, key: str, tree_bytes: bytes, files: list) -> bytes:
    """files: compiler.store.local.FileEntry of the tree, in tree order."""
    layers = [descriptor(FILE_TYPE, f.digest, f.size, {TITLE: f.path}) for f in files]
    return _manifest(artifact_type(kind), descriptor(TREE_TYPE, sha256_bytes(tree_bytes), len(tree_bytes)), layers,
                     {A_KEY: key, A_KIND: kind, A_VERSION: str(version), A_TOOL: f"kiln {__version__}"})


def release_artifact(release: bytes, spec_name: str, spec_digest: str, toolchain: dict) -> bytes:
    return _manifest("application/vnd.kiln.release.v1", descriptor(EMPTY_TYPE, sha256_bytes(EMPTY), len(EMPTY)),
                     [descriptor(RELEASE_TYPE, sha256_bytes(release), len(release), {TITLE: "release.json"})],
                     {A_SPEC: spec_name, A_SPEC_DIGEST: spec_digest, A_TOOL: canonical_json(toolchain).decode(),
                      "dev.kiln.version": __version__})


def provenance_artifact(statement: bytes, subject: dict) -> bytes:
    return _manifest(INTOTO_TYPE, descriptor(EMPTY_TYPE, sha256_bytes(EMPTY), len(EMPTY)),
                     [descriptor(INTOTO_TYPE, sha256_bytes(statement), len(statement), {TITLE: "provenance.json"})],
                     {"dev.kiln.predicate-type": "https://slsa.dev/provenance/v1"}, subject)
