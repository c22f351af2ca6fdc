"""Signatures in the registry: what `kiln publish` attaches and what `kiln verify`, the build cache
and a rollback's build check.

  every artifact   a model-signing bundle (each file of its tree by SHA-256) attached to the
                   artifact's manifest in <namespace>/kiln-artifacts: the checkpoints (model-source,
                   quantize, engine) in the OpenSSF model-signing format, and the other artifacts in
                   the same format, so one check covers whatever the cache imports;
  the release      the signed SLSA provenance (the in-toto statement provenance.py writes) attached
                   to the release manifest; its subjects name every artifact's tree digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.store.local import sha256_bytes

from . import artifacts as oa
from .oci import OCI_INDEX, OCI_MANIFEST, Client, Registry, RegistryError, json_object
from .referrers import PREDICATE_ANNOTATION, SIGNER_ANNOTATION, attach, bundles, listed
from .signing import (BAD_SIGNATURE, BUNDLE_TYPE, DIGEST_MISMATCH, MISSING, MODEL_PREDICATE, SLSA_PREDICATE,
                      SignatureError, Signer, Trust, verify_checkpoint, verify_statement)

CHECKPOINT_KINDS = ("model-source", "quantize", "engine")  # model weights, as model-signing means them
# What cosign signs an image with in its bundle format (cosign v3 `sign --new-bundle-format`), which
# policy-controller's `signatureFormat: bundle` reads: a statement whose subject is the image's digest.
IMAGE_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IMAGE_SECTIONS = ("images", "weights")  # release.json: serving images per host or pool, weights images per model
_IMAGE_ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, "application/vnd.docker.distribution.manifest.v2+json",
                           "application/vnd.docker.distribution.manifest.list.v2+json"))


def _signed_by(client: Client, repo: str, subject: str, predicate: str, signer_id: str) -> bool:
    """A referrer of `subject` already carries this key's signature: publishing again adds none (a
    key's ECDSA signature differs each time, so signing anew would grow the list on every run).
    Keyless signatures are not skipped: the identity is only known once Fulcio certifies it."""
    if signer_id == "sigstore":
        return False
    return any((e.get("annotations") or {}).get(PREDICATE_ANNOTATION) == predicate
               and (e.get("annotations") or {}).get(SIGNER_ANNOTATION) == signer_id
               for e in listed(client, repo, subject))


def _attach(client: Client, repo: str, signer: Signer, subject: dict, predicate: str, sign) -> bool:
    if _signed_by(client, repo, subject["digest"], predicate, signer.signer_id):
        return False
    attach(client, repo, subject, BUNDLE_TYPE, sign(),
           {PREDICATE_ANNOTATION: predicate, SIGNER_ANNOTATION: signer.signer_id})
    return True


def sign_artifact(client: Client, repo: str, signer: Signer, name: str, manifest: bytes,
                  files: list[tuple[str, str]]) -> bool:
    """Attach the model-signing bundle of an artifact (`files`: path, digest) to its manifest; True
    when a signature was added."""
    subject = oa.descriptor(OCI_MANIFEST, sha256_bytes(manifest), len(manifest))
    return _attach(client, repo, signer, subject, MODEL_PREDICATE, lambda: signer.sign_checkpoint(name, files))


def sign_release(client: Client, repo: str, signer: Signer, statement: bytes, subject: dict) -> bool:
    return _attach(client, repo, signer, subject, SLSA_PREDICATE, lambda: signer.sign_statement(statement))


def release_images(release: dict) -> list[tuple[str, str]]:
    """(repository as pushed, digest) of every image the release names (serving and weights)."""
    out = []
    for section in IMAGE_SECTIONS:
        for entry in (release.get(section) or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("reference"), str) and "@" in entry["reference"]:
                out.append((entry["reference"].split("@")[0], str(entry.get("digest"))))
    return sorted(set(out))


def _image_at(name: str, clients: dict) -> tuple[Client, str]:
    """The client of the image's registry (credentials as for any registry) and its repository."""
    host, _, repo = name.partition("/")
    if host not in clients:
        client = Client(Registry.parse(host))
        # the publish's deadline holds for every registry it writes to
        client.deadline = min((c.deadline for c in clients.values() if c.deadline is not None), default=None)
        clients[host] = client
    return clients[host], repo


def image_statement(name: str, digest: str) -> bytes:
    from compiler.store.canonical import pretty_json

    return pretty_json({"_type": "https://in-toto.io/Statement/v1",
                        "subject": [{"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
                        "predicateType": IMAGE_PREDICATE, "predicate": {}})


def sign_images(signer: Signer, release: dict, clients: dict | None = None) -> list[str]:
    """Sign each image the release names (in its own repository, as a referrer of its manifest):
    what the cluster's admission policy checks. The images signed now."""
    clients = {} if clients is None else clients
    signed = []
    for name, digest in release_images(release):
        client, repo = _image_at(name, clients)
        got = client.get_manifest(repo, digest, accept=_IMAGE_ACCEPT)
        if got is None:
            raise RegistryError(f"{name}@{digest}: not in its registry; the image is signed where it was pushed")
        media = json_object(got[0], f"the manifest of {name}").get("mediaType") or OCI_MANIFEST
        subject = oa.descriptor(media, digest, len(got[0]))
        if _attach(client, repo, signer, subject, IMAGE_PREDICATE,
                   lambda: signer.sign_statement(image_statement(name, digest))):
            signed.append(f"{name}@{digest}")
    return signed


def verify_image(name: str, digest: str, trust: Trust, clients: dict | None = None) -> None:
    client, repo = _image_at(name, {} if clients is None else clients)

    def check(bundle: bytes) -> None:
        statement = verify_statement(bundle, trust, IMAGE_PREDICATE)
        if digest not in {d for ds in _subject_digests(statement).values() for d in ds}:
            raise SignatureError(DIGEST_MISMATCH, f"image {name}: the signature is for another digest than {digest}")
    _first_valid(bundles(client, repo, digest, IMAGE_PREDICATE), f"image {name}@{digest}", check)


def _first_valid(found: list[bytes], what: str, check) -> object:
    """The result of `check` on the first bundle that passes it; else the most telling refusal."""
    if not found:
        raise SignatureError(MISSING, f"{what} has no signature attached")
    errors = []
    for bundle in found:
        try:
            return check(bundle)
        except SignatureError as e:
            errors.append(e)
    rank = {DIGEST_MISMATCH: 0, BAD_SIGNATURE: 1}  # a forged or altered signature says more than a stranger's
    raise min(errors, key=lambda e: rank.get(e.code, 2))


def verify_artifact(client: Client, repo: str, trust: Trust, manifest_digest: str, name: str,
                    files: list[tuple[str, str]]) -> None:
    found = bundles(client, repo, manifest_digest, MODEL_PREDICATE)
    _first_valid(found, f"artifact {name} ({manifest_digest})", lambda b: verify_checkpoint(b, trust, files))


@dataclass
class Verified:
    release: str
    digest: str
    artifacts: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"verified {self.release}@{self.digest}: signed provenance, {len(self.artifacts)} artifact(s) "
                f"({len(self.checkpoints)} checkpoint(s)) signed and matching the registry, "
                f"{len(self.images)} image(s) signed and as the provenance names them")


def parse_release(ref: str) -> tuple[Registry, str, str]:
    """"host[:port]/namespace/name:tag" (as `kiln publish` prints it) -> (registry, name, tag)."""
    path, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag or "/" not in path:
        raise RegistryError(f"{ref!r} is not a release reference (host/namespace/name:tag, as kiln publish prints)")
    where, _, name = path.rpartition("/")
    return Registry.parse(where), name, tag


def _subject_digests(statement: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for s in statement.get("subject") or []:
        if isinstance(s, dict) and isinstance(s.get("digest"), dict) and isinstance(s["digest"].get("sha256"), str):
            out.setdefault(str(s.get("name")), set()).add("sha256:" + s["digest"]["sha256"])
    return out


def _mismatch(what: str) -> SignatureError:
    return SignatureError(DIGEST_MISMATCH, f"{what}: the registry does not serve what was signed")


def verify_release(client: Client, registry: Registry, name: str, tag: str, trust: Trust) -> Verified:
    """Every signature and digest of a release, against the registry: the release manifest and its
    release.json; the signed provenance and its signer; each artifact the release lists (its
    manifest, tree and files as the provenance and its own signature name them)."""
    from compiler.store.records import parse_tree

    repo = registry.repo(name)
    got = client.get_manifest(repo, tag)
    if got is None:
        raise SignatureError(MISSING, f"{registry.host}/{repo}:{tag}: no such release")
    body, digest = got
    result = Verified(f"{registry.host}/{repo}:{tag}", digest)
    doc = json_object(body, "the release manifest")
    (layer,) = [d for d in doc.get("layers") or [] if isinstance(d, dict) and d.get("mediaType") == oa.RELEASE_TYPE][:1] \
        or [None]
    if layer is None or not isinstance(layer.get("size"), int):
        raise SignatureError(DIGEST_MISMATCH, f"{result.release} is not a Kiln release manifest")
    release = client.read_blob(repo, layer["digest"], layer["size"])  # checked against its digest
    statement = _first_valid(bundles(client, repo, digest, SLSA_PREDICATE), f"release {result.release}",
                             lambda b: verify_statement(b, trust))
    subjects = _subject_digests(statement)
    if not any(digest in ds for ds in subjects.values()):
        raise _mismatch(f"release manifest {digest}")
    if sha256_bytes(release) not in subjects.get("release.json", set()):
        raise _mismatch("release.json")
    rel = json_object(release, "release.json")
    artifacts_repo = registry.repo(oa.ARTIFACTS_REPO)
    for a in rel.get("artifacts") or []:
        aid, tree = a.get("id"), a.get("tree")
        if tree not in subjects.get(aid, set()):
            raise _mismatch(f"artifact {aid} (tree {tree})")
        got = client.get_manifest(artifacts_repo, oa.artifact_tag(a["kind"], a["key"]))
        if got is None:
            raise SignatureError(MISSING, f"artifact {aid}: not in {registry.host}/{artifacts_repo}")
        manifest = json_object(got[0], f"the manifest of {aid}")
        config = manifest.get("config") or {}
        if config.get("digest") != tree or not isinstance(config.get("size"), int):
            raise _mismatch(f"artifact {aid}: its manifest names tree {config.get('digest')}, the release {tree}")
        entries = parse_tree(client.read_blob(artifacts_repo, tree, config["size"]))
        files = [(e.path, e.digest) for e in entries]
        layers = {(d.get("annotations") or {}).get(oa.TITLE): d.get("digest")
                  for d in manifest.get("layers") or [] if isinstance(d, dict)}
        if layers != dict(files):
            raise _mismatch(f"artifact {aid}: its layers are not the files of its tree")
        for _, blob in sorted(set(files)):
            if not client.has_blob(artifacts_repo, blob):
                raise SignatureError(MISSING, f"artifact {aid}: blob {blob} is missing from the registry")
        verify_artifact(client, artifacts_repo, trust, got[1], aid, files)
        result.artifacts.append(aid)
        if a.get("kind") in CHECKPOINT_KINDS:
            result.checkpoints.append(aid)
    clients: dict = {registry.host: client}
    for name_, image_digest in release_images(rel):
        if image_digest not in subjects.get(name_, set()):
            raise _mismatch(f"image {name_} ({image_digest})")
        verify_image(name_, image_digest, trust, clients)
        result.images.append(name_)
    return result
