"""The Kubernetes tree's admission policy (publish.signed_by): a Sigstore policy-controller
ClusterImagePolicy for the release's images, checked against policy-controller's own CRD schema
(tests/data/k8s/SOURCE.md), and absent (the tree byte for byte as before) without signed_by."""

from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.identity import GITHUB_ISSUER
from tests.k8s_tree import graph_of, kustomize, render, tree_files

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "k8s-two-pools" / "kiln.yaml"
DATA = ROOT / "tests" / "data" / "k8s"
YAML_ = YAML(typ="safe", pure=True)
PUBLISH = "publish: {registry: registry.example.com/inference}"
SIGNERS = {"keyless": "{repository: acme/fleet-deploy, branch: release}", "key": "{key: keys/release.pub}"}


def _text(signer: str | None) -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert text.count(PUBLISH) == 1
    if signer is None:
        return text
    return text.replace(PUBLISH, "publish: {registry: registry.example.com/inference, signed_by: "
                        + SIGNERS[signer] + "}")


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str | None, Path]:
    out = {}
    for signer in (None, *SIGNERS):
        work = tmp_path_factory.mktemp(f"admission-{signer}")
        out[signer] = render(graph_of(EXAMPLE, work, _text(signer)), work)
    return out


def _schema() -> dict:
    """The CRD's v1beta1 openAPIV3Schema, strict: an object that lists its properties admits no
    other (the API server would prune a misspelled field silently, and the policy would not apply)."""
    crd = YAML_.load((DATA / "policy.sigstore.dev_clusterimagepolicies.yaml").read_text(encoding="utf-8"))
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")["schema"]["openAPIV3Schema"]

    def strict(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for v in node.values():
                strict(v)
        elif isinstance(node, list):
            for v in node:
                strict(v)
    strict(schema)
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked by the API server, not the CRD
    schema["properties"]["apiVersion"] = {"const": "policy.sigstore.dev/v1beta1"}
    schema["properties"]["kind"] = {"const": "ClusterImagePolicy"}
    return schema


def _policy(root: Path) -> dict:
    (doc,) = [d for d in YAML_.load_all((root / "admission" / "cluster-image-policy.yaml").read_text()) if d]
    return doc


@pytest.mark.parametrize("signer", sorted(SIGNERS))
def test_the_policy_validates_against_policy_controllers_crd(trees, signer: str) -> None:
    errors = [e.message for e in jsonschema.Draft7Validator(_schema()).iter_errors(_policy(trees[signer]))]
    assert errors == []


def test_the_schema_check_catches_a_broken_policy(trees) -> None:
    validator = jsonschema.Draft7Validator(_schema())
    good = _policy(trees["keyless"])
    for broken in ({**good, "spec": {**good["spec"], "authorites": []}},
                   {**good, "spec": {**good["spec"], "images": [{"globb": "x"}]}},
                   {**good, "spec": {**good["spec"], "authorities": [{"keyless": {"identities": "x"}}]}},
                   {**good, "kind": "ImagePolicy"}):
        assert list(validator.iter_errors(broken)), broken


def test_keyless_names_the_release_workflow_of_the_repository_and_branch(trees) -> None:
    policy = _policy(trees["keyless"])
    (authority,) = policy["spec"]["authorities"]
    assert authority["keyless"]["identities"] == [{
        "issuer": GITHUB_ISSUER,
        "subject": "https://github.com/acme/fleet-deploy/.github/workflows/kiln-release.yml@refs/heads/release"}]
    assert authority["signatureFormat"] == "bundle" and policy["spec"]["mode"] == "enforce"
    assert {g["glob"] for g in policy["spec"]["images"]} == {"registry.example.com/inference/fleet@*",
                                                             "registry.example.com/inference/fleet:*"}


def test_key_signed_policy_reads_the_key_from_a_secret_and_the_tree_carries_no_key(trees) -> None:
    policy = _policy(trees["key"])
    (authority,) = policy["spec"]["authorities"]
    assert authority["key"]["secretRef"] == {"name": "kiln-fleet-signer"}
    assert "create secret generic kiln-fleet-signer" in (trees["key"] / "admission" /
                                                          "cluster-image-policy.yaml").read_text()


def test_every_pod_image_is_covered_and_the_namespace_opts_in(trees) -> None:
    import fnmatch

    root = trees["keyless"]
    globs = [g["glob"] for g in _policy(root)["spec"]["images"]]
    images = set()
    for p in (root / "workloads").rglob("*.yaml"):
        for doc in YAML_.load_all(p.read_text()):
            spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec", {})
            images |= {c["image"] for c in spec.get("containers", []) + spec.get("initContainers", [])}
            images |= {v["image"]["reference"] for v in spec.get("volumes", []) if "image" in v}
    kiln_images = {i for i in images if i.startswith("registry.example.com/inference/fleet")}
    assert kiln_images and all(any(fnmatch.fnmatchcase(i, g) for g in globs) for i in kiln_images), kiln_images
    (ns,) = [d for d in YAML_.load_all((root / "namespace.yaml").read_text()) if d]
    assert ns["metadata"]["labels"]["policy.sigstore.dev/include"] == "true"
    assert "admission/cluster-image-policy.yaml" in YAML_.load((root / "kustomization.yaml").read_text())["resources"]


def test_without_signed_by_the_tree_has_no_policy_and_no_label(trees) -> None:
    files = tree_files(trees[None])
    assert not any(name.startswith("admission/") for name in files)
    assert b"policy.sigstore.dev" not in files["namespace.yaml"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (kustomize is built into it)")
def test_kubectl_kustomize_builds_the_tree_with_the_policy(trees) -> None:
    kinds = {o["kind"] for o in kustomize(trees["keyless"])}
    assert "ClusterImagePolicy" in kinds
