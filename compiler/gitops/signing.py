"""Signing and verifying what `kiln publish` pushes, in the formats the ecosystem reads:

  provenance   the in-toto Statement v1 with its SLSA Provenance v1 predicate (provenance.py), in a
               DSSE envelope inside a Sigstore bundle (application/vnd.dev.sigstore.bundle.v0.3+json);
  checkpoints  the OpenSSF model-signing format v1.0 (predicate https://model_signing/signature/v1.0:
               every file of the checkpoint by SHA-256, and a digest over them), in the same bundle.

Both go through the model-signing library (1.1.1), so one signer makes both: with an EC key
(`--sign-key`; the bundle names the key by the SHA-256 of its PEM public key) or keyless through
Sigstore (a short-lived Fulcio certificate for the CI's OIDC identity, logged in Rekor). Its
signer and verifier classes live in model_signing._signing: they are what its public
`signing.Config` / `verifying.Config` call, used here directly because those take a model
directory to hash and Kiln already holds every file's digest (the store verified each one).

Verification answers with a SignatureError whose code is stable; nothing else escapes.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from compiler.identity import GITHUB_ISSUER, RELEASE_WORKFLOW, release_identity
from compiler.store.canonical import canonical_json

BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
MODEL_PREDICATE = "https://model_signing/signature/v1.0"

# Stable codes of what verification refuses (the README lists them).
BAD_SIGNATURE = "KS101"  # the signature does not match the signed bytes (tampered, or not a signature)
WRONG_SIGNER = "KS102"  # signed, but by another key or identity than the one trusted
MISSING = "KS103"  # no signature or attestation where one is required
DIGEST_MISMATCH = "KS104"  # the signature holds, but what the registry serves is not what was signed
MALFORMED = "KS105"  # not a bundle Kiln can read
UNAVAILABLE = "KS106"  # keyless: Sigstore's trust root (TUF), Fulcio or the OIDC token cannot be had


class SignatureError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code


@dataclass(frozen=True)
class Trust:
    """Who may sign: a public key (PEM file), or a keyless identity: the release workflow of a
    repository on a branch, as GitHub's OIDC issuer names it in the Fulcio certificate.
    `roots`: PEM certificates to chain keyless certificates to instead of Sigstore's public-good
    trust root (a private CA; the tests' test CA). Without it, Sigstore's verifier also checks the
    Rekor inclusion proof and the certificate's SCT."""

    key: Path | None = None
    repository: str | None = None  # owner/name
    ref: str = "refs/heads/main"
    workflow: str = RELEASE_WORKFLOW
    issuer: str = GITHUB_ISSUER
    roots: tuple[Path, ...] = ()

    @property
    def identity(self) -> str:
        """The subject (SAN URI) GitHub's OIDC token gives a workflow run, which Fulcio certifies."""
        return release_identity(str(self.repository), self.ref, self.workflow)

    def describe(self) -> str:
        return f"key {self.key}" if self.key else f"{self.identity} (issuer {self.issuer})"


class Signer:
    """Signs statements and checkpoints with one key or one keyless identity.

    A statement is signed as the exact bytes provenance.py wrote (sigstore-python's DSSE code);
    a checkpoint through model-signing, whose payload class builds its format's statement."""

    def __init__(self, key: Path | None = None, *, identity_token: str | None = None) -> None:
        if key is not None:
            from cryptography.hazmat.primitives.asymmetric import ec
            from model_signing._signing import sign_ec_key

            try:
                self._signer = sign_ec_key.Signer(key)
                if not isinstance(self._signer._private_key.curve, ec.SECP256R1):
                    raise ValueError("the key is not on P-256")
            except (ValueError, TypeError, OSError) as e:
                raise SignatureError(MALFORMED, f"--sign-key {key}: not an unencrypted PEM EC P-256 private key: "
                                                f"{e}") from None
            self._key = self._signer._private_key
            self.signer_id = key_hint(self._key.public_key())
        else:  # keyless: the CI's OIDC token (ambient: GitHub's id-token), a Fulcio certificate, Rekor
            from model_signing._signing import sign_sigstore
            from sigstore.errors import Error as SigstoreError

            token = identity_token or _ambient_token()
            try:
                self._signer = sign_sigstore.Signer(use_ambient_credentials=False, identity_token=token)
            except SigstoreError as e:
                raise _unavailable(e) from None
            self._key = None
            self.signer_id = "sigstore"

    def sign_statement(self, statement: bytes) -> bytes:
        """The Sigstore bundle of a DSSE envelope over `statement` (an in-toto statement, JSON)."""
        from sigstore import dsse

        stmt = dsse.Statement(statement)
        if self._key is None:
            from sigstore.errors import Error as SigstoreError

            try:
                token = self._signer._get_identity_token()
                with self._signer._signing_context.signer(token) as signer:
                    return signer.sign_dsse(stmt).to_json().encode()
            except SigstoreError as e:
                raise _unavailable(e) from None
        envelope = json.loads(dsse._sign(self._key, stmt).to_json())
        return canonical_json({"mediaType": BUNDLE_TYPE,
                               "verificationMaterial": {"publicKey": {"hint": self.signer_id}, "tlogEntries": []},
                               "dsseEnvelope": envelope})

    def sign_checkpoint(self, name: str, files: list[tuple[str, str]]) -> bytes:
        """The model-signing bundle of a checkpoint: `files` are (path in the checkpoint, sha256:...)."""
        from model_signing._signing import signing
        from sigstore.errors import Error as SigstoreError

        try:
            return self._signer.sign(signing.Payload(checkpoint_manifest(name, files))).bundle.to_json().encode()
        except SigstoreError as e:
            raise _unavailable(e) from None


def key_hint(public_key) -> str:
    """How a key-signed bundle names its key: SHA-256 of the PEM SubjectPublicKeyInfo (model-signing's)."""
    import hashlib

    from cryptography.hazmat.primitives import serialization

    pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def checkpoint_manifest(name: str, files: list[tuple[str, str]]):
    from model_signing import manifest
    from model_signing._hashing import hashing

    serialization = manifest._FileSerialization("sha256")
    items = [manifest.FileManifestItem(path=PurePosixPath(path),
                                       digest=hashing.Digest("sha256", bytes.fromhex(digest.removeprefix("sha256:"))))
             for path, digest in files]
    return manifest.Manifest(name, items, serialization)


def _bundle(bundle: bytes, trust: Trust):
    """The bundle read into the class of model-signing's that verifies it for `trust`."""
    try:
        doc = json.loads(bundle)
        material = doc["verificationMaterial"]
        if doc.get("mediaType") != BUNDLE_TYPE or "dsseEnvelope" not in doc:
            raise ValueError(f"not a {BUNDLE_TYPE} with a DSSE envelope")
    except (ValueError, KeyError, TypeError) as e:
        raise SignatureError(MALFORMED, f"the signature is not a Sigstore bundle: {e}") from None
    keyed = "publicKey" in material
    if keyed != (trust.key is not None):
        raise SignatureError(WRONG_SIGNER, f"the bundle is signed {'with a key' if keyed else 'keyless'}, but "
                                           f"the trusted signer is {trust.describe()}")
    with tempfile.TemporaryDirectory(prefix="kiln-bundle-") as tmp:  # model-signing reads bundles from files
        path = Path(tmp) / "bundle.json"
        path.write_bytes(bundle)
        try:
            if keyed or trust.roots:
                from model_signing._signing import sign_sigstore_pb

                return sign_sigstore_pb.Signature.read(path)
            from model_signing._signing import sign_sigstore

            return sign_sigstore.Signature.read(path)
        except Exception as e:  # the parsers raise many kinds; none may reach the user as a traceback
            raise SignatureError(MALFORMED, f"the signature bundle cannot be read: {type(e).__name__}: {e}") from None


def _verifier(trust: Trust):
    if trust.key is not None:
        from model_signing._signing import sign_ec_key

        try:
            return sign_ec_key.Verifier(trust.key)
        except (ValueError, TypeError, OSError) as e:
            raise SignatureError(MALFORMED, f"{trust.key}: not a PEM EC public key: {e}") from None
    if not trust.repository:
        raise SignatureError(WRONG_SIGNER, "a keyless signature needs the repository whose workflow signed it")
    if trust.roots:
        from model_signing._signing import sign_certificate

        return sign_certificate.Verifier(list(trust.roots))
    from model_signing._signing import sign_sigstore
    from sigstore.errors import Error as SigstoreError

    try:
        return sign_sigstore.Verifier(identity=trust.identity, oidc_issuer=trust.issuer)
    except SigstoreError as e:
        raise _unavailable(e) from None


def _unavailable(e: Exception) -> SignatureError:
    return SignatureError(UNAVAILABLE, f"Sigstore's public-good instance cannot be used from here ({e}): keyless "
                                       "signatures need its trust root (TUF), and signing also needs Fulcio and "
                                       "Rekor; use a key (--sign-key, --key) where they cannot be reached")


def _ambient_token() -> str:
    """The CI's OIDC token: SIGSTORE_ID_TOKEN, or GitHub Actions' (a job with id-token: write).
    Never an interactive browser login (sigstore's fallback): a CI job has no one to click."""
    import os

    from sigstore.errors import Error as SigstoreError
    from sigstore.oidc import detect_credential

    if os.environ.get("SIGSTORE_ID_TOKEN"):
        return os.environ["SIGSTORE_ID_TOKEN"]
    if not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"):
        raise SignatureError(UNAVAILABLE, "--keyless needs an OIDC token: run it in a GitHub Actions job with "
                                          "`permissions: id-token: write` (the release workflow kiln init writes), "
                                          "or set SIGSTORE_ID_TOKEN; elsewhere sign with --sign-key")
    try:
        token = detect_credential()
    except SigstoreError as e:
        raise _unavailable(e) from None
    if not token:
        raise SignatureError(UNAVAILABLE, "GitHub Actions gave no OIDC token: the job needs `id-token: write`")
    return token


def check_identity(certificate, trust: Trust) -> None:
    """The leaf certificate names the trusted workflow, repository and ref, from the trusted issuer:
    sigstore-python's identity policy (the one its verifier applies), on the certificate alone."""
    from sigstore.errors import VerificationError
    from sigstore.verify import policy

    try:
        policy.AllOf([policy.Identity(identity=trust.identity, issuer=trust.issuer),
                      policy.GitHubWorkflowRepository(trust.repository)]).verify(certificate)
    except VerificationError as e:
        raise SignatureError(WRONG_SIGNER, f"signed by another identity than {trust.describe()}: {e}") from None


def _leaf(bundle: bytes):
    import base64

    from cryptography import x509

    material = json.loads(bundle)["verificationMaterial"]
    raw = material.get("certificate", {}).get("rawBytes") or \
        (material.get("x509CertificateChain", {}).get("certificates") or [{}])[0].get("rawBytes")
    if not raw:
        raise SignatureError(MALFORMED, "the keyless bundle carries no certificate")
    return x509.load_der_x509_certificate(base64.b64decode(raw))


def _verified(bundle: bytes, trust: Trust) -> tuple[object, object]:
    """(verifier, signature) once the signature and the signer are checked."""
    signature, verifier = _bundle(bundle, trust), _verifier(trust)
    if trust.key is None:
        check_identity(_leaf(bundle), trust)
    return verifier, signature


def _refused(e: Exception, trust: Trust) -> SignatureError:
    text = str(e)
    if "Key mismatch" in text or "identity" in text.lower():
        return SignatureError(WRONG_SIGNER, f"not signed by {trust.describe()}: {text[:200]}")
    return SignatureError(BAD_SIGNATURE, f"the signature does not verify against {trust.describe()} "
                                         f"({type(e).__name__}{': ' + text[:200] if text else ''})")


def verify_statement(bundle: bytes, trust: Trust, predicate_type: str = SLSA_PREDICATE) -> dict:
    """The signed in-toto statement of `bundle`, once its signature and signer hold."""
    verifier, signature = _verified(bundle, trust)
    try:
        payload_type, payload = verifier._verify_signed_content(signature)
    except SignatureError:
        raise
    except Exception as e:  # cryptography's InvalidSignature, OpenSSL's, sigstore's VerificationError
        raise _refused(e, trust) from None
    try:
        doc = json.loads(payload)
    except ValueError:
        doc = None
    if payload_type != PAYLOAD_TYPE or not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise SignatureError(MALFORMED, f"the signed payload is not an in-toto statement ({payload_type})")
    if doc.get("predicateType") != predicate_type:
        raise SignatureError(MALFORMED, f"the signed statement's predicate is {doc.get('predicateType')!r}, "
                                        f"not {predicate_type}")
    return doc


def verify_checkpoint(bundle: bytes, trust: Trust, files: list[tuple[str, str]]) -> None:
    """The model-signing bundle holds, and signs exactly `files` (path, sha256:...): no file more,
    none less, none other."""
    verifier, signature = _verified(bundle, trust)
    try:
        signed = verifier.verify(signature)
    except SignatureError:
        raise
    except Exception as e:
        raise _refused(e, trust) from None
    want = {str(d.identifier): d.digest.digest_hex for d in checkpoint_manifest("", files).resource_descriptors()}
    got = {str(d.identifier): d.digest.digest_hex for d in signed.resource_descriptors()}
    if want != got:
        diff = sorted({path for path, _ in set(want.items()) ^ set(got.items())})
        raise SignatureError(DIGEST_MISMATCH, f"the checkpoint in the registry is not the one signed: "
                                              f"{', '.join(diff[:3])}{', ...' if len(diff) > 3 else ''} differ")


def trust_of(signed_by, spec_dir: Path) -> Trust:
    """The Trust a spec's publish.signed_by names (its key relative to the spec's directory)."""
    if signed_by.key is not None:
        return Trust(key=spec_dir / signed_by.key)
    return Trust(repository=signed_by.repository, ref=f"refs/heads/{signed_by.branch}")
