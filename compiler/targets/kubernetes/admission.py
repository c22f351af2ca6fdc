"""The release's admission policy: a Sigstore policy-controller ClusterImagePolicy that admits the
serving and weights images of the spec's `image.repository` (pods name them by digest) only when
the release's signer signed them (`kiln publish` signs each pushed image, compiler/gitops/attest.py).

  keyless  the spec repository's release workflow on its branch, from GitHub's OIDC issuer, in a
           Fulcio certificate logged in Rekor (publish.signed_by.repository);
  key      the public key, read by policy-controller from a Secret in its own namespace (the tree
           never carries key material; the file header says how to create it).

Field names: policy-controller v0.15.1, config/300-clusterimagepolicy.yaml (v1beta1); its
`signatureFormat: bundle` reads Sigstore bundles attached as OCI referrers, as Kiln attaches them.
Applying it takes effect only in namespaces labelled policy.sigstore.dev/include=true.
"""

from __future__ import annotations

from compiler.identity import GITHUB_ISSUER, release_identity
from compiler.params import Params

from . import meta

POLICY_API = "policy.sigstore.dev/v1beta1"
FULCIO_URL = "https://fulcio.sigstore.dev"
REKOR_URL = "https://rekor.sigstore.dev"
INCLUDE_LABEL = "policy.sigstore.dev/include"


class AdmissionParams(Params):
    repository: str  # the images' repository (spec image.repository)
    signer_repository: str | None = None  # keyless: GitHub owner/name
    ref: str = "refs/heads/main"
    key_secret: str | None = None  # key: the Secret (in policy-controller's namespace) holding the PEM


def admission_params(spec) -> AdmissionParams | None:
    publish, image = spec.publish, spec.image
    if publish is None or publish.signed_by is None or image is None:
        return None
    signed_by = publish.signed_by
    if signed_by.repository is not None:
        return AdmissionParams(repository=image.repository, signer_repository=signed_by.repository,
                               ref=f"refs/heads/{signed_by.branch}")
    return AdmissionParams(repository=image.repository, key_secret=key_secret_name(spec.name))


def key_secret_name(spec_name: str) -> str:
    return f"kiln-{spec_name}-signer"


def cluster_image_policy(params: AdmissionParams, spec_name: str) -> dict:
    if params.signer_repository is not None:
        authority = {"name": "kiln-release",
                     "keyless": {"url": FULCIO_URL,
                                 "identities": [{"issuer": GITHUB_ISSUER,
                                                 "subject": release_identity(params.signer_repository, params.ref)}]},
                     "ctlog": {"url": REKOR_URL}}
    else:
        authority = {"name": "kiln-release", "key": {"secretRef": {"name": params.key_secret}, "hashAlgorithm": "sha256"}}
    authority["signatureFormat"] = "bundle"
    return {"apiVersion": POLICY_API, "kind": "ClusterImagePolicy",
            # before the workloads whose pods it admits (the namespace's wave)
            "metadata": {"name": f"kiln-{spec_name}", "labels": meta.labels(spec_name),
                         "annotations": {"argocd.argoproj.io/sync-wave": "-3"}},
            "spec": {"images": [{"glob": f"{params.repository}@*"}, {"glob": f"{params.repository}:*"}],
                     "authorities": [authority], "mode": "enforce"}}


def header(params: AdmissionParams, spec_name: str) -> str:
    lines = ["# Sigstore policy-controller: admit the images of this release only as its signer signed them.",
             f"# It applies in namespaces labelled {INCLUDE_LABEL}=true (namespace.yaml carries the label)."]
    if params.key_secret is not None:
        lines.append(f"# The key: kubectl -n cosign-system create secret generic {params.key_secret} "
                     "--from-file=cosign.pub=<publish.signed_by.key>")
    return "\n".join(lines) + "\n"
