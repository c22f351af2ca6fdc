"""`kiln publish`: every artifact of a built spec to an OCI registry, then the release manifest
tagged with the spec's commit and its provenance statement. Blobs and artifacts the registry
already has are not uploaded again, so publishing an unchanged (or reverted) spec uploads nothing
but tags and the new commit's provenance."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from compiler.build import build_prepared, prepare_spec
from compiler.release import spec_digest
from compiler.store.local import LocalStore, StoreError, sha256_bytes

from . import artifacts as oa
from .oci import OCI_MANIFEST, Client, Registry, RegistryConflict, RegistryDeadline, env_seconds, json_object
from .provenance import input_dependencies, statement


class NotBuilt(Exception):
    """The store lacks artifacts of the spec (or there is nowhere to publish): a one-line error."""


class TagConflict(Exception):
    """The registry's tag for this commit already names other content: a commit's tag never moves."""


class TagRaced(TagConflict):
    """Another publish wrote the tag between this one's check and its write (or overwrote it)."""


@dataclass
class PublishOutcome:
    validation: object
    registry: Registry | None = None
    pushed: list[str] = field(default_factory=list)  # action ids whose artifact was pushed now
    present: list[str] = field(default_factory=list)  # already in the registry
    missing: list[str] = field(default_factory=list)  # not in the store (--artifacts-only)
    blobs_uploaded: int = 0
    release_ref: str | None = None
    release_digest: str | None = None  # digest of the release's OCI manifest
    provenance: bytes | None = None
    signed: list[str] = field(default_factory=list)  # what got a new signature now (action ids, "release")

    def summary(self) -> str:
        text = (f"published to {self.registry}: {len(self.pushed)} artifact(s) pushed, {len(self.present)} already "
                f"present, {self.blobs_uploaded} blob(s) uploaded")
        if self.missing:
            text += f", {len(self.missing)} not built here"
        if self.signed:
            text += f", {len(self.signed)} signature(s) attached"
        if self.release_ref:
            text += f"\nrelease {self.release_ref}@{self.release_digest}"
        return text


def push_artifact(client: Client, store: LocalStore, repo: str, kind: str, version: int, key: str,
                  tree: str, signer=None, name: str = "", signed: list | None = None) -> tuple[bool, int]:
    """(pushed, blobs uploaded). An artifact is immutable under its key: a tag that exists is kept.
    `signer` (compiler/gitops/signing.py): its signature of the artifact's files is attached to the
    artifact's manifest, also when the artifact was there already (signed by no one, or another key)."""
    tag = oa.artifact_tag(kind, key)
    there = client.get_manifest(repo, tag) if signer is not None else None
    if there is not None or (signer is None and client.manifest_digest(repo, tag) is not None):
        if there is not None and _sign_artifact(client, store, repo, signer, name, there[0], tree):
            (signed if signed is not None else []).append(name)
        return False, 0
    tree_bytes = store.read_bytes(tree)
    files = store.tree(tree)
    uploaded = 0
    for digest, size in sorted({(f.digest, f.size) for f in files}):
        # The registry checks each upload against its digest, so a corrupt store object fails here;
        # one that is a link, a FIFO or of another size is refused before it is opened.
        if not store.has_intact_size(digest, size):
            raise StoreError(f"object {digest} in {store.root} is missing, not a regular file or not {size} "
                             "bytes: run `kiln store verify --repair`, then build again")
        uploaded += client.push_blob(repo, digest, size, store.blob_path(digest))
    uploaded += client.push_blob(repo, tree, len(tree_bytes), tree_bytes)
    manifest = oa.artifact_manifest(kind, version, key, tree_bytes, files)
    client.put_manifest(repo, tag, manifest)
    if signer is not None and _sign_artifact(client, store, repo, signer, name, manifest, tree):
        (signed if signed is not None else []).append(name)
    return True, uploaded


def _sign_artifact(client: Client, store: LocalStore, repo: str, signer, name: str, manifest: bytes,
                   tree: str) -> bool:
    from .attest import sign_artifact

    if (json_object(manifest, "the artifact's manifest").get("config") or {}).get("digest") != tree:
        return False  # the tag names other files than this store's: nothing of ours to vouch for
    return sign_artifact(client, repo, signer, name, manifest, [(f.path, f.digest) for f in store.tree(tree)])


def _spec_path(spec: Path) -> str:
    from .gitrev import GitError, repo_root

    try:
        return spec.resolve().relative_to(repo_root(spec).resolve()).as_posix()
    except (GitError, ValueError):
        return spec.name


def _tagged(client: Client, repo: str, tag: str) -> str | None:
    """The digest of what `tag` names, hashed from the manifest itself (no header is trusted)."""
    got = client.get_manifest(repo, tag)
    return None if got is None else got[1]


def _conflict(repo: str, tag: str, there: str) -> TagConflict:
    return TagConflict(f"{repo}:{tag} already names other content ({there}); a commit's tag is never moved to "
                       "another release: publish from a clean checkout of that commit, or from a new commit")


def _check_tags(client: Client, repo: str, wanted: dict[str, bytes]) -> None:
    """Each tag must be absent or already name exactly these bytes (then pushing it again is a no-op)."""
    for tag, body in wanted.items():
        there = _tagged(client, repo, tag)
        if there is not None and there != sha256_bytes(body):
            raise _conflict(repo, tag, there)


def put_tag_once(client: Client, repo: str, tag: str, body: bytes) -> None:
    """Tag `body` unless the tag names it already; never move a tag that names other content.

    The check and the write are as close as two requests can be, and the write is conditional
    (If-None-Match: *) for registries that honour it. Most do not (the OCI distribution spec has
    no conditional writes; Distribution 2.8 ignores the header), so the tag is read back after the
    write: when another publish wrote it in between, the one whose content the tag does not name
    fails and says which digest won. One interleaving escapes without the registry's help: B checks
    before A writes and writes after A has read the tag back; both succeed and the tag moves once.
    Checking just before the write (not only before the uploads) narrows that to one round trip."""
    ours = sha256_bytes(body)
    there = _tagged(client, repo, tag)
    if there == ours:
        return
    if there is not None:
        raise _conflict(repo, tag, there)
    try:
        client.put_manifest(repo, tag, body, create_only=True)
    except RegistryConflict:
        pass  # the registry refused the write: someone tagged it first; the read-back says who
    there = _tagged(client, repo, tag)
    if there != ours:
        raise TagRaced(f"{repo}:{tag}: another publish wrote this tag at the same time as this one, and its "
                       f"content won: the tag names {there}, not this release ({ours}); check which build the "
                       "commit's tag should name before publishing again")


PUBLISH_DEADLINE_S = 6 * 3600.0  # a 70B checkpoint at 100 MB/s is about 25 minutes; a publish never hangs for ever


def publish_deadline() -> float:
    """Seconds a whole publish may take: PUBLISH_DEADLINE_S, or KILN_PUBLISH_DEADLINE_S (a positive
    number of seconds, at most a week; anything else is refused)."""
    return env_seconds("KILN_PUBLISH_DEADLINE_S", PUBLISH_DEADLINE_S, 7 * 86400)


def publish_spec(spec: Path, store: LocalStore, registry: str | None, commit: str | None, *,
                 artifacts_only: bool = False, dirty: bool = False, signer=None) -> PublishOutcome:
    """`dirty`: the spec's directory has uncommitted changes: the release is tagged
    `dirty_release_tag(commit, ...)`, never `commit`. `signer` (compiler/gitops/signing.Signer):
    every artifact and the release's provenance are signed and the signatures attached as referrers.
    Every request and transfer ends by publish_deadline() from the start (RegistryDeadline)."""
    limit = publish_deadline()
    deadline = time.monotonic() + limit
    # Shared with builds, so `kiln store gc` cannot remove an artifact while it is being pushed.
    try:
        with store.lock():
            return _publish(spec, store, registry, commit, artifacts_only, dirty, signer, deadline)
    except RegistryDeadline as e:
        raise RegistryDeadline(f"{e}: a publish may take {limit:g}s (KILN_PUBLISH_DEADLINE_S); what it pushed "
                               "stays in the registry and publishing again goes on from there") from None


def _publish(spec: Path, store: LocalStore, registry: str | None, commit: str | None,
             artifacts_only: bool, dirty: bool, signer, deadline: float) -> PublishOutcome:
    prepared, digests = prepare_spec(spec, store)  # validated and lowered once, for the push and the release
    outcome = PublishOutcome(prepared.validation)
    graph, result = prepared.graph, prepared.validation
    if graph is None:
        return outcome
    target = registry or (result.spec.publish.registry if result.spec.publish else None)
    if not target:
        raise NotBuilt(f"{result.file}: no registry to publish to: set publish.registry or pass --registry")
    outcome.registry = Registry.parse(target)
    client = Client(outcome.registry)
    client.deadline = deadline
    repo = outcome.registry.repo(oa.ARTIFACTS_REPO)
    records = {aid: store.get_action(graph.keys[aid]) for aid in graph.order}
    outcome.missing = [aid for aid, r in records.items() if r is None]
    if outcome.missing and not artifacts_only:
        raise NotBuilt(f"{len(outcome.missing)} artifact(s) of {result.file} are not in the store {store.root} "
                       f"({', '.join(outcome.missing[:3])}{', ...' if len(outcome.missing) > 3 else ''}): "
                       "run `kiln build` first")
    release = None
    if not artifacts_only:
        if not commit:
            raise NotBuilt("a release needs the spec's git commit")
        # The release manifest exactly as `kiln build` writes it (whatever it comes to list): a build
        # whose every action is in the store executes nothing and returns those bytes.
        built = build_prepared(prepared, digests, store)
        if built.executed or built.manifest is None:
            raise NotBuilt(f"{result.file}: its artifacts left the store while publishing; run `kiln build` and "
                           "publish again")
        release = built.manifest
        tag = oa.dirty_release_tag(commit, sha256_bytes(release)) if dirty else oa.release_tag(commit)
        release_repo = outcome.registry.repo(result.spec.name)
        manifest = oa.release_artifact(release, result.spec.name, spec_digest(result.spec),
                                       result.spec.toolchain.model_dump(mode="json"))
        outcome.release_digest = sha256_bytes(manifest)
        outcome.release_ref = f"{outcome.registry.host}/{release_repo}:{tag}"
        outcome.provenance = statement(release, outcome.release_ref, outcome.release_digest, _spec_path(spec), commit,
                                       dirty=dirty, inputs=input_dependencies(graph))
        subject = oa.descriptor(OCI_MANIFEST, outcome.release_digest, len(manifest))
        provenance = oa.provenance_artifact(outcome.provenance, subject)
        # Before anything is pushed: a tag that names other content stops the whole publish.
        _check_tags(client, release_repo, {tag: manifest, oa.provenance_tag(tag): provenance})

    for aid in graph.order:
        record = records[aid]
        if record is None:
            continue
        action = graph.actions[aid]
        pushed, blobs = push_artifact(client, store, repo, action.kind, action.version, graph.keys[aid], record.tree,
                                      signer, aid, outcome.signed)
        (outcome.pushed if pushed else outcome.present).append(aid)
        outcome.blobs_uploaded += blobs
    if release is None:
        return outcome

    for blob in (oa.EMPTY, release):
        outcome.blobs_uploaded += client.push_blob(release_repo, sha256_bytes(blob), len(blob), blob)
    put_tag_once(client, release_repo, tag, manifest)
    outcome.blobs_uploaded += client.push_blob(release_repo, sha256_bytes(outcome.provenance),
                                               len(outcome.provenance), outcome.provenance)
    put_tag_once(client, release_repo, oa.provenance_tag(tag), provenance)
    if signer is not None:
        from .attest import sign_release

        if sign_release(client, release_repo, signer, outcome.provenance, subject):
            outcome.signed.append("release")
        from .attest import sign_images

        outcome.signed += sign_images(signer, json_object(release, "release.json"), {outcome.registry.host: client})
    # once more at the end: a publish that checked before this one wrote, and wrote after this one
    # read the tag back, is caught here when its write landed in the meantime
    there = _tagged(client, release_repo, tag)
    if there != outcome.release_digest:
        raise TagRaced(f"{release_repo}:{tag}: another publish overwrote this tag after this one wrote it: the tag "
                       f"names {there}, not this release ({outcome.release_digest}); check which build the commit's "
                       "tag should name")
    return outcome
