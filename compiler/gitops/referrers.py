"""Signatures and attestations in the registry as OCI 1.1 referrers of what they sign.

A referrer is an OCI manifest whose `subject` is the descriptor of the signed manifest and whose
`artifactType` says what it is; its one layer is the Sigstore bundle (as cosign attaches bundles:
artifactType application/vnd.dev.sigstore.bundle.v0.3+json, annotation
dev.sigstore.bundle.predicateType). A registry with the referrers API lists them itself (it answers
the manifest PUT with OCI-Subject); for one without (Distribution 2.8), the distribution spec's
fallback is kept: an image index tagged `sha256-<hex of the subject>` listing every referrer, which
the pushing client updates (OCI distribution-spec v1.1, "Referrers Tag Schema").
"""

from __future__ import annotations

from compiler.store.canonical import canonical_json
from compiler.store.local import sha256_bytes

from . import artifacts as oa
from .oci import OCI_INDEX, OCI_MANIFEST, Client, json_object

PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
SIGNER_ANNOTATION = "dev.kiln.signer"  # the key hint, or "sigstore" for keyless
MAX_BUNDLE = 1 << 20  # a bundle is a few KB (a certificate chain and a log entry at most)


def fallback_tag(digest: str) -> str:
    return digest.replace(":", "-")


def referrer_manifest(artifact_type: str, blob: bytes, subject: dict, annotations: dict) -> bytes:
    return canonical_json({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
        "config": oa.descriptor(oa.EMPTY_TYPE, sha256_bytes(oa.EMPTY), len(oa.EMPTY)),
        "layers": [oa.descriptor(artifact_type, sha256_bytes(blob), len(blob))],
        "subject": subject, "annotations": annotations})


def _index(manifests: list[dict]) -> bytes:
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX,
                           "manifests": sorted(manifests, key=lambda d: d["digest"])})


def _entries(body: bytes | None, what: str) -> list[dict]:
    if body is None:
        return []
    manifests = json_object(body, what).get("manifests")
    return [m for m in manifests if isinstance(m, dict)] if isinstance(manifests, list) else []


def listed(client: Client, repo: str, subject: str) -> list[dict]:
    """The descriptors of the referrers of `subject` (a manifest digest) in `repo`: the registry's
    own list where it has the API, else the fallback tag's index."""
    body = client.referrers_api(repo, subject)
    if body is not None:
        return _entries(body, f"the referrers of {subject}")
    got = client.get_manifest(repo, fallback_tag(subject), accept=OCI_INDEX)
    return _entries(got[0] if got else None, f"the referrers index {fallback_tag(subject)}")


def attach(client: Client, repo: str, subject: dict, artifact_type: str, blob: bytes,
           annotations: dict) -> str:
    """Push `blob` as a referrer of `subject` (a descriptor); the referrer manifest's digest."""
    for part in (oa.EMPTY, blob):
        client.push_blob(repo, sha256_bytes(part), len(part), part)
    body = referrer_manifest(artifact_type, blob, subject, annotations)
    digest = client.put_manifest(repo, sha256_bytes(body), body)
    if client.subject_indexed:
        return digest
    tag = fallback_tag(subject["digest"])
    got = client.get_manifest(repo, tag, accept=OCI_INDEX)
    entries = _entries(got[0] if got else None, f"the referrers index {tag}")
    if all(e.get("digest") != digest for e in entries):
        entry = oa.descriptor(OCI_MANIFEST, digest, len(body), annotations)
        entry["artifactType"] = artifact_type
        client.put_manifest(repo, tag, _index(entries + [entry]), OCI_INDEX)
    return digest


def bundles(client: Client, repo: str, subject: str, predicate_type: str) -> list[bytes]:
    """The Sigstore bundles attached to `subject` whose predicate is `predicate_type`, read and
    checked against the digests that name them."""
    from .signing import BUNDLE_TYPE

    out = []
    for entry in listed(client, repo, subject):
        if entry.get("artifactType") != BUNDLE_TYPE or \
                (entry.get("annotations") or {}).get(PREDICATE_ANNOTATION) != predicate_type:
            continue
        got = client.get_manifest(repo, entry["digest"])
        if got is None:
            continue
        doc = json_object(got[0], "a referrer manifest")
        if (doc.get("subject") or {}).get("digest") != subject:
            continue  # an index entry whose manifest refers to something else is no signature of this
        for layer in doc.get("layers") or []:
            if isinstance(layer, dict) and layer.get("mediaType") == BUNDLE_TYPE and \
                    isinstance(layer.get("size"), int) and 0 < layer["size"] <= MAX_BUNDLE and \
                    isinstance(layer.get("digest"), str):
                out.append(client.read_blob(repo, layer["digest"], layer["size"]))
    return out
