"""Signed releases against a real registry (Debian docker-registry on 127.0.0.1): `kiln publish
--sign-key` signs every artifact (OpenSSF model-signing format) and the SLSA provenance, attaches
them as OCI referrers; `kiln verify`, `kiln build --cache` with publish.signed_by and the keyless
path's identity check refuse what does not hold, each with its stable code and no traceback."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ObjectIdentifier

from compiler.cli import main
from compiler.gitops import artifacts as oa
from compiler.gitops import signing
from compiler.gitops.oci import OCI_INDEX, Client, Registry
from compiler.gitops.referrers import bundles, fallback_tag, listed
from compiler.gitops.signing import GITHUB_ISSUER, MODEL_PREDICATE, SLSA_PREDICATE, SignatureError, Trust
from tests.test_gitops_registry import _build, _publish, light_spec

COMMIT = "5" * 40


def _keypair(where: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = where / f"{name}.key", where / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    where = tmp_path_factory.mktemp("keys")
    return {name: _keypair(where, name) for name in ("release", "stranger")}


@pytest.fixture(scope="module")
def published(tmp_path_factory, registry, keys) -> dict:
    """One signed release of the light quickstart, shared by the tests that only read it."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("signed")
    spec, store, target = light_spec(root / "spec"), root / "store", f"{registry.host}/signed"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["build", str(spec), "--store", str(store), "-q"]) == 0
        assert main(["publish", str(spec), "--store", str(store), "--registry", target, "--commit", COMMIT,
                     "--sign-key", str(keys["release"][0]), "--release-ref", str(root / "release-ref")]) == 0
    ref = f"{target}/{_name(spec)}:{COMMIT}"
    return {"spec": spec, "store": store, "target": target, "ref": ref, "out": out.getvalue(),
            "written_ref": (root / "release-ref").read_text(encoding="utf-8")}


def _name(spec: Path) -> str:
    import re

    return re.search(r"^name: (\S+)", spec.read_text(encoding="utf-8"), re.M).group(1)


def _verify(capsys, ref: str, *trust: str) -> tuple[int, str, str]:
    code = main(["verify", ref, *trust])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_key_signed_release_verifies_end_to_end(published, keys, capsys) -> None:
    assert "signature(s) attached" in published["out"]
    # --release-ref: the reference it pushed, one line, what the release workflow hands to kiln verify
    assert published["written_ref"] == published["ref"] + "\n"
    code, out, err = _verify(capsys, published["written_ref"].strip(), "--key", str(keys["release"][1]))
    assert code == 0, err
    assert "signed provenance" in out and "(2 checkpoint(s))" in out and "Traceback" not in err


def test_signatures_are_oci_referrers_in_the_sigstore_bundle_format(published, keys) -> None:
    registry = Registry.parse(published["target"])
    client = Client(registry)
    repo = registry.repo(_name(published["spec"]))
    _, digest = client.get_manifest(repo, COMMIT)
    (entry,) = [e for e in listed(client, repo, digest)
                if (e.get("annotations") or {}).get("dev.sigstore.bundle.predicateType") == SLSA_PREDICATE]
    assert entry["artifactType"] == signing.BUNDLE_TYPE
    referrer = json.loads(client.get_manifest(repo, entry["digest"])[0])
    assert referrer["subject"]["digest"] == digest and referrer["artifactType"] == signing.BUNDLE_TYPE
    # the Referrers Tag Schema index (this registry has no referrers API)
    assert client.get_manifest(repo, fallback_tag(digest), accept=OCI_INDEX) is not None
    (bundle,) = bundles(client, repo, digest, SLSA_PREDICATE)
    doc = json.loads(bundle)
    assert doc["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    statement = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    assert statement["predicateType"] == SLSA_PREDICATE and doc["dsseEnvelope"]["payloadType"] == "application/vnd.in-toto+json"
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["commit"] == COMMIT
    # every artifact carries a model-signing bundle listing its files
    artifacts_repo = registry.repo(oa.ARTIFACTS_REPO)
    release = json.loads(client.read_blob(repo, *[(l["digest"], l["size"]) for l in json.loads(
        client.get_manifest(repo, COMMIT)[0])["layers"]][0]))
    a = release["artifacts"][0]
    _, adigest = client.get_manifest(artifacts_repo, oa.artifact_tag(a["kind"], a["key"]))
    (mbundle,) = bundles(client, artifacts_repo, adigest, MODEL_PREDICATE)
    payload = json.loads(base64.b64decode(json.loads(mbundle)["dsseEnvelope"]["payload"]))
    assert payload["predicateType"] == MODEL_PREDICATE and payload["predicate"]["resources"]


def test_publishing_again_with_the_same_key_adds_no_signature(published, keys, capsys) -> None:
    out = _publish(published["spec"], published["store"], published["target"], capsys, "--commit", COMMIT,
                   "--sign-key", str(keys["release"][0]))
    assert "signature(s) attached" not in out


def test_another_keys_signature_is_refused(published, keys, capsys) -> None:
    code, _, err = _verify(capsys, published["ref"], "--key", str(keys["stranger"][1]))
    assert code == 1 and "[KS102]" in err and "Traceback" not in err


def test_a_release_without_signed_provenance_is_refused(published, registry, capsys, keys) -> None:
    spec, store, target = published["spec"], published["store"], f"{registry.host}/unsigned"
    _publish(spec, store, target, capsys, "--commit", COMMIT)
    code, _, err = _verify(capsys, f"{target}/{_name(spec)}:{COMMIT}", "--key", str(keys["release"][1]))
    assert code == 1 and "[KS103]" in err and "no signature" in err and "Traceback" not in err


def _forge(client: Client, repo: str, tag: str) -> None:
    """What an attacker with write access to the registry and no key does to an artifact: swap one
    file for their own (a new blob, tree and manifest under the same tag) and copy the genuine
    signature onto the new manifest."""
    from compiler.gitops.referrers import PREDICATE_ANNOTATION, SIGNER_ANNOTATION, attach
    from compiler.store.canonical import canonical_json
    from compiler.store.local import sha256_bytes

    body, digest = client.get_manifest(repo, tag)
    (signature,) = bundles(client, repo, digest, MODEL_PREDICATE)
    doc = json.loads(body)
    tree = json.loads(client.read_blob(repo, doc["config"]["digest"], doc["config"]["size"]))
    evil = b'{"evil": true}\n'
    client.push_blob(repo, sha256_bytes(evil), len(evil), evil)
    tree["files"][0].update(digest=sha256_bytes(evil), size=len(evil))
    tree_bytes = canonical_json(tree)
    client.push_blob(repo, sha256_bytes(tree_bytes), len(tree_bytes), tree_bytes)
    doc["config"].update(digest=sha256_bytes(tree_bytes), size=len(tree_bytes))
    title = tree["files"][0]["path"]
    layer = next(d for d in doc["layers"] if d["annotations"][oa.TITLE] == title)
    layer.update(digest=sha256_bytes(evil), size=len(evil))
    forged = canonical_json(doc)
    client.put_manifest(repo, tag, forged)
    attach(client, repo, oa.descriptor(oa.OCI_MANIFEST, sha256_bytes(forged), len(forged)), signing.BUNDLE_TYPE,
           signature, {PREDICATE_ANNOTATION: MODEL_PREDICATE, SIGNER_ANNOTATION: "copied"})


def test_a_tampered_artifact_is_refused_by_verify_and_by_the_signed_cache(published, tmp_path, registry, capsys,
                                                                          keys) -> None:
    import shutil

    spec, store, target = published["spec"], published["store"], f"{registry.host}/tampered"
    _publish(spec, store, target, capsys, "--commit", COMMIT, "--sign-key", str(keys["release"][0]))
    reg = Registry.parse(target)
    client, repo, name = Client(reg), reg.repo(oa.ARTIFACTS_REPO), _name(spec)
    layer = json.loads(client.get_manifest(reg.repo(name), COMMIT)[0])["layers"][0]
    release = json.loads(client.read_blob(reg.repo(name), layer["digest"], layer["size"]))
    a = next(a for a in release["artifacts"] if a["kind"] == "tokenizer")
    tag = oa.artifact_tag(a["kind"], a["key"])
    _forge(client, repo, tag)

    code, _, err = _verify(capsys, f"{target}/{name}:{COMMIT}", "--key", str(keys["release"][1]))
    assert code == 1 and "[KS104]" in err and "tokenizer/tiny" in err and "Traceback" not in err

    # the spec asks for signed inputs: the cache does not import the forged artifact
    spec = Path(shutil.copytree(spec.parent, tmp_path / "spec")) / "kiln.yaml"
    (spec.parent / "release.pub").write_bytes(keys["release"][1].read_bytes())
    text = spec.read_text(encoding="utf-8")
    assert "publish:" not in text
    spec.write_text(text + f"publish: {{registry: {target}, signed_by: {{key: release.pub}}}}\n", encoding="utf-8")
    code = main(["build", str(spec), "--store", str(tmp_path / "fresh"), "-q", "--cache", target])
    err = capsys.readouterr().err
    assert code == 1 and "refused: tokenizer/tiny: [KS104]" in err and "Traceback" not in err, err


def test_the_signed_cache_imports_what_the_key_signed(published, keys, tmp_path, capsys) -> None:
    spec = published["spec"]
    local = tmp_path / "spec"
    import shutil

    shutil.copytree(spec.parent, local)
    (local / "release.pub").write_bytes(keys["release"][1].read_bytes())
    text = (local / "kiln.yaml").read_text(encoding="utf-8")
    assert "publish:" not in text
    (local / "kiln.yaml").write_text(text + f"publish: {{registry: {published['target']}, "
                                            "signed_by: {key: release.pub}}\n", encoding="utf-8")
    out = _build(local / "kiln.yaml", tmp_path / "fresh", capsys, "--cache", published["target"])
    # every artifact but the spec snapshot (the spec gained signed_by) comes from the registry, verified
    assert "1 executed, 0 cached, 10 fetched" in out
    code, out, err = _verify(capsys, published["ref"], "--spec", str(local / "kiln.yaml"))  # trust from the spec
    assert code == 0 and "signed by key" in out, err
    (local / "release.pub").write_bytes(keys["stranger"][1].read_bytes())  # now another signer is required
    code = main(["build", str(local / "kiln.yaml"), "--store", str(tmp_path / "fresh2"), "-q",
                 "--cache", published["target"]])
    err = capsys.readouterr().err
    assert code == 1 and "[KS102]" in err and "Traceback" not in err


# --- the keyless path's verification, on bundles from a test CA through the same code ------------

# Fulcio's extensions (github.com/sigstore/fulcio docs/oid-info.md): the OIDC issuer as raw bytes
# (1.1, deprecated but still issued, and what sigstore-python's Identity policy reads) and as a DER
# UTF8String (1.8); the GitHub workflow repository (1.5, raw).
OIDC_ISSUER = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
OIDC_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
WORKFLOW_REPOSITORY = ObjectIdentifier("1.3.6.1.4.1.57264.1.5")


def _der_utf8(text: str) -> bytes:
    raw = text.encode()
    return bytes([0x0C, len(raw)]) + raw


def _test_ca(where: Path, repository: str, ref: str = "refs/heads/main") -> tuple[Path, Path, Path]:
    """A CA and a leaf certificate shaped as Fulcio issues them to a GitHub Actions run."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kiln test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    identity = f"https://github.com/{repository}/.github/workflows/kiln-release.yml@{ref}"
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca_name)
            .public_key(leaf_key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(minutes=10))
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity)]), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.UnrecognizedExtension(OIDC_ISSUER, GITHUB_ISSUER.encode()), critical=False)
            .add_extension(x509.UnrecognizedExtension(OIDC_ISSUER_V2, _der_utf8(GITHUB_ISSUER)), critical=False)
            .add_extension(x509.UnrecognizedExtension(WORKFLOW_REPOSITORY, repository.encode()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = where / "ca.pem", where / "leaf.pem", where / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return paths


def _certificate_bundle(where: Path, repository: str, files: list[tuple[str, str]]) -> tuple[bytes, Path]:
    """A model-signing bundle signed by a leaf of the test CA (model-signing's certificate signer)."""
    from model_signing._signing import sign_certificate, signing as ms

    ca, leaf, key = _test_ca(where, repository)
    signer = sign_certificate.Signer(key, leaf, [ca])
    return signer.sign(ms.Payload(signing.checkpoint_manifest("m", files))).bundle.to_json().encode(), ca


FILES = [("config.json", "sha256:" + "1" * 64), ("model.safetensors", "sha256:" + "2" * 64)]


def test_keyless_identity_the_release_workflow_of_the_repository_is_accepted(tmp_path) -> None:
    bundle, ca = _certificate_bundle(tmp_path, "acme/deploy", FILES)
    signing.verify_checkpoint(bundle, Trust(repository="acme/deploy", roots=(ca,)), FILES)


@pytest.mark.parametrize("trust_repo, ref, code", [("acme/other", "refs/heads/main", "KS102"),
                                                   ("acme/deploy", "refs/heads/dev", "KS102")])
def test_keyless_identity_of_another_repository_or_branch_is_refused(tmp_path, trust_repo, ref, code) -> None:
    bundle, ca = _certificate_bundle(tmp_path, "acme/deploy", FILES)
    with pytest.raises(SignatureError) as e:
        signing.verify_checkpoint(bundle, Trust(repository=trust_repo, ref=ref, roots=(ca,)), FILES)
    assert e.value.code == code


def test_keyless_bundle_from_another_ca_or_tampered_is_refused(tmp_path) -> None:
    bundle, _ = _certificate_bundle(tmp_path / "a", "acme/deploy", FILES) if (tmp_path / "a").mkdir() is None else None
    (tmp_path / "b").mkdir()
    _, other_ca = _certificate_bundle(tmp_path / "b", "acme/deploy", FILES)
    with pytest.raises(SignatureError) as e:
        signing.verify_checkpoint(bundle, Trust(repository="acme/deploy", roots=(other_ca,)), FILES)
    assert e.value.code == "KS101"
    ca = tmp_path / "a" / "ca.pem"
    doc = json.loads(bundle)
    payload = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    payload["predicate"]["resources"][0]["digest"] = "3" * 64
    doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    with pytest.raises(SignatureError) as e:
        signing.verify_checkpoint(json.dumps(doc).encode(), Trust(repository="acme/deploy", roots=(ca,)), FILES)
    assert e.value.code == "KS101"
    with pytest.raises(SignatureError) as e:  # a key-signed bundle where a keyless identity is required
        signing.verify_checkpoint(bundle, Trust(key=ca), FILES)
    assert e.value.code == "KS102"


# --- the images the cluster's admission policy checks --------------------------------------------

def _push_image(client: Client, repo: str, content: bytes) -> str:
    """A minimal OCI image (an empty config, one layer) as any builder pushes one; its digest."""
    from compiler.store.canonical import canonical_json
    from compiler.store.local import sha256_bytes

    config = b"{}"
    for blob in (config, content):
        client.push_blob(repo, sha256_bytes(blob), len(blob), blob)
    manifest = canonical_json({"schemaVersion": 2, "mediaType": oa.OCI_MANIFEST,
                               "config": oa.descriptor("application/vnd.oci.image.config.v1+json",
                                                       sha256_bytes(config), len(config)),
                               "layers": [oa.descriptor("application/vnd.oci.image.layer.v1.tar",
                                                        sha256_bytes(content), len(content))]})
    return client.put_manifest(repo, "serving", manifest)


def test_images_are_signed_in_their_repository_and_checked_as_the_admission_policy_would(registry, keys) -> None:
    from compiler.gitops.attest import IMAGE_PREDICATE, sign_images, verify_image

    client = Client(Registry.parse(registry.host))
    name = f"{registry.host}/inference/fleet"
    signed, unsigned = _push_image(client, "inference/fleet", b"serving"), _push_image(client, "inference/fleet", b"x")
    release = {"images": {"pool-a": {"reference": f"{name}@{signed}", "digest": signed}}}
    signer = signing.Signer(keys["release"][0])
    assert sign_images(signer, release) == [f"{name}@{signed}"]
    assert sign_images(signer, release) == []  # the same key again: nothing added
    verify_image(name, signed, Trust(key=keys["release"][1]))
    (bundle,) = bundles(client, "inference/fleet", signed, IMAGE_PREDICATE)
    subject = json.loads(base64.b64decode(json.loads(bundle)["dsseEnvelope"]["payload"]))["subject"]
    assert subject == [{"name": name, "digest": {"sha256": signed.removeprefix("sha256:")}}]
    for digest, trust, code in ((signed, Trust(key=keys["stranger"][1]), "KS102"),
                                (unsigned, Trust(key=keys["release"][1]), "KS103")):
        with pytest.raises(SignatureError) as e:
            verify_image(name, digest, trust)
        assert e.value.code == code
    # the genuine signature copied onto another image does not make it signed
    from compiler.gitops.referrers import PREDICATE_ANNOTATION, attach

    body, _ = client.get_manifest("inference/fleet", unsigned)
    attach(client, "inference/fleet", oa.descriptor(oa.OCI_MANIFEST, unsigned, len(body)), signing.BUNDLE_TYPE,
           bundle, {PREDICATE_ANNOTATION: IMAGE_PREDICATE})
    with pytest.raises(SignatureError) as e:
        verify_image(name, unsigned, Trust(key=keys["release"][1]))
    assert e.value.code == "KS104"


def test_a_rollback_builds_only_from_signed_artifacts(tmp_path, registry, capsys, keys) -> None:
    """A revert's build on a fresh runner (the release workflow's) fetches the earlier release's
    artifacts from the cache: a forged one among them fails the build."""
    from tests.gitrepo import GitRepo

    repo = GitRepo(tmp_path / "repo")
    spec = light_spec(repo.root / "deploy")
    target = f"{registry.host}/rollback"
    (spec.parent / "release.pub").write_bytes(keys["release"][1].read_bytes())
    spec.write_text(spec.read_text(encoding="utf-8")
                    + f"publish: {{registry: {target}, signed_by: {{key: release.pub}}}}\n", encoding="utf-8")
    store = tmp_path / "store"
    repo.commit("first")
    _build(spec, store, capsys)
    _publish(spec, store, None, capsys, "--sign-key", str(keys["release"][0]))
    repo.edit("deploy/kiln.yaml", "max_queue_size: 16", "max_queue_size: 32")
    repo.commit("second")
    _build(spec, store, capsys)
    _publish(spec, store, None, capsys, "--sign-key", str(keys["release"][0]))
    repo.git("revert", "--no-edit", "HEAD")
    assert main(["build", str(spec), "--store", str(tmp_path / "clean"), "-q", "--cache", target]) == 0
    capsys.readouterr()
    reg = Registry.parse(target)
    client = Client(reg)
    first = json.loads(client.read_blob(reg.repo(_name(spec)), *next(
        (l["digest"], l["size"]) for l in json.loads(client.get_manifest(reg.repo(_name(spec)),
                                                                         repo.git("rev-parse", "HEAD~2"))[0])["layers"])))
    a = next(a for a in first["artifacts"] if a["id"].startswith("triton-repo/"))
    _forge(client, reg.repo(oa.ARTIFACTS_REPO), oa.artifact_tag(a["kind"], a["key"]))
    code = main(["build", str(spec), "--store", str(tmp_path / "fresh"), "-q", "--cache", target])
    err = capsys.readouterr().err
    assert code == 1 and f"refused: {a['id']}: [KS104]" in err and "Traceback" not in err, err


def test_keyless_publish_without_an_oidc_token_is_a_clear_error(published, monkeypatch, capsys) -> None:
    for name in ("SIGSTORE_ID_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    code = main(["publish", str(published["spec"]), "--store", str(published["store"]), "--registry",
                 published["target"], "--commit", COMMIT, "--keyless"])
    err = capsys.readouterr().err
    assert code == 1 and "[KS106]" in err and "id-token: write" in err and "Traceback" not in err


def test_keyless_provenance_identity_is_checked_through_the_same_code(tmp_path) -> None:
    """An SLSA statement signed by a leaf of the test CA (as Fulcio certifies a workflow run):
    accepted for its repository, refused for another, refused once its payload is altered."""
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from model_signing._signing import sign_certificate

    ca, leaf, key = _test_ca(tmp_path, "acme/deploy")
    statement = {"_type": "https://in-toto.io/Statement/v1", "predicateType": SLSA_PREDICATE,
                 "subject": [{"name": "release.json", "digest": {"sha256": "4" * 64}}],
                 "predicate": {"buildDefinition": {"buildType": "urn:kiln:build:v1"}}}

    class Payload:  # what model-signing's signers read: .statement.pb, an in-toto Statement
        pb = json_format.ParseDict(statement, statement_pb2.Statement())
    Payload.statement = Payload
    bundle = sign_certificate.Signer(key, leaf, [ca]).sign(Payload).bundle.to_json().encode()
    trusted = Trust(repository="acme/deploy", roots=(ca,))
    assert signing.verify_statement(bundle, trusted)["subject"] == statement["subject"]
    with pytest.raises(SignatureError) as e:
        signing.verify_statement(bundle, Trust(repository="evil/deploy", roots=(ca,)))
    assert e.value.code == "KS102"
    doc = json.loads(bundle)
    payload = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    payload["subject"][0]["digest"]["sha256"] = "5" * 64
    doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    with pytest.raises(SignatureError) as e:
        signing.verify_statement(json.dumps(doc).encode(), trusted)
    assert e.value.code == "KS101"
