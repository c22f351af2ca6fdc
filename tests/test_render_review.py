"""`kiln render SPEC --to DIR`: the Kubernetes tree of both k8s examples, offline (no weights, Docker,
runtime image or store), images as placeholders no registry serves, every object checked as
tests/test_k8s.py checks a built tree, and nothing that could pass for a release."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.cli import main
from compiler.targets.kubernetes import meta
from compiler.review import MARKER, NOT_DEPLOYABLE, PLACEHOLDER_REGISTRY
from tests.k8s_tree import kustomize, tree_files
from tests.test_k8s import (EXAMPLE, GOLDEN, VARIANTS, _objects, _patch_schema, _pod_template, _shape,
                            _validate_core, needs_kubectl)

YAML_ = YAML(typ="safe", pure=True)
HEADER = re.compile(r"\A# NOT DEPLOYABLE: [^\n]*\n")


def _spec(variant: str, tmp_path: Path) -> Path:
    """The example as it is, or on runtime dynamo (tests/test_k8s.py's variant), in its own directory."""
    text = VARIANTS[variant]
    if text is None:
        return EXAMPLE
    copy = tmp_path / "spec"
    shutil.copytree(EXAMPLE.parent, copy)
    (copy / "kiln.yaml").write_text(text(), encoding="utf-8")
    return copy / "kiln.yaml"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for variant in VARIANTS:
        work = tmp_path_factory.mktemp(variant)
        store = work / "store"
        env_store = {"KILN_STORE": str(store)}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env_store.items():
                mp.setenv(k, v)
            mp.setenv("PATH", "/nonexistent")  # no docker, no kubectl: rendering needs neither
            assert main(["render", str(_spec(variant, work)), "--to", str(work / "tree")]) == 0
        assert not store.exists()  # nothing went to the store
        out[variant] = work / "tree"
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_render_is_the_built_tree_but_for_the_images(variant: str, rendered) -> None:
    """Same files and bytes as the golden tree of a build (tests/test_k8s.py), apart from the image
    references, their digests in kiln.io/artifacts, the NOT DEPLOYABLE header and annotation."""
    got, want = tree_files(rendered[variant]), tree_files(GOLDEN / variant)
    assert sorted(got) == sorted([*want, MARKER])

    def norm(text: str) -> str:
        text = re.sub(r"registry\.example\.com/inference/fleet@sha256:[0-9a-f]{64}", "IMAGE", text)
        text = re.sub(rf"{re.escape(PLACEHOLDER_REGISTRY)}/(weights-)?image-[a-z0-9-]+:unbuilt", "IMAGE", text)
        return re.sub(r'"((weights-)?image/[a-z0-9/-]+)":"[^"]+"', r'"\1":"DIGEST"', text)

    for rel, data in want.items():
        if not rel.endswith(".yaml"):  # the node scripts name no image: the same bytes
            assert got[rel] == data, rel
            continue
        text = got[rel].decode()
        assert HEADER.match(text), rel
        body = HEADER.sub("", text)
        if rel == "release-stamp.yaml":
            body = "\n".join(line for line in body.splitlines() if NOT_DEPLOYABLE not in line) + "\n"
        assert norm(body) == norm(data.decode()), rel


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_validates_and_every_kiln_image_is_a_placeholder(variant: str, rendered) -> None:
    objects = _objects(rendered[variant])
    core = [o for o in objects if o["apiVersion"] in ("v1", "apps/v1", "policy/v1")]
    assert len(core) >= 4
    for o in core:
        _validate_core(o)
    images = []
    for o in objects:
        if o["kind"] == "DynamoGraphDeployment":
            assert not list(_shape().iter_errors(o)), o["metadata"]["name"]
            for c in o["spec"]["components"]:
                _validate_core(_pod_template(c["podTemplate"]))
                images += [x["image"] for x in c["podTemplate"]["spec"]["containers"] if c["type"] == "worker"]
        elif o["kind"] == "Deployment":
            images += [x["image"] for x in o["spec"]["template"]["spec"]["containers"]]
        pods = [c["podTemplate"] for c in o["spec"]["components"]] if o["kind"] == "DynamoGraphDeployment" else \
            [o["spec"]["template"]] if o["kind"] == "Deployment" else []
        images += [v["image"]["reference"] for p in pods for v in p["spec"].get("volumes", []) if "image" in v]
    assert any("/weights-image-" in i for i in images)  # the weights images are placeholders too
    assert images and all(i.startswith(PLACEHOLDER_REGISTRY + "/") and i.endswith(":unbuilt") for i in images), images
    patch = YAML_.load((rendered[variant] / "node-layer" / "clusterpolicy-patch.yaml").read_text())
    assert not list(jsonschema.Draft7Validator(_patch_schema()).iter_errors(patch))


@needs_kubectl
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_kustomize_builds_it_and_every_object_says_it_is_not_deployable(variant: str, rendered) -> None:
    built = kustomize(rendered[variant])
    assert built
    for o in built:
        annotations = o["metadata"]["annotations"]
        assert "not a release" in annotations[NOT_DEPLOYABLE], o["metadata"]["name"]
        assert annotations[meta.SPEC_DIGEST_ANNOTATION].startswith("sha256:")
    text = json.dumps(built)
    assert "registry.example.com/inference/fleet" not in text  # the real repository is never named


def test_rendering_is_deterministic(rendered, tmp_path: Path) -> None:
    assert main(["render", str(EXAMPLE), "--to", str(tmp_path / "again")]) == 0
    assert tree_files(tmp_path / "again") == tree_files(rendered["k8s-two-pools"])
    assert not (tmp_path / "again" / "release.json").exists()


def test_refusals(tmp_path: Path, capsys) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine", encoding="utf-8")
    assert main(["render", str(EXAMPLE), "--to", str(taken)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    quickstart = EXAMPLE.parents[1] / "quickstart" / "kiln.yaml"
    assert main(["render", str(quickstart), "--to", str(tmp_path / "q")]) == 2
    assert "no node pools" in capsys.readouterr().err and not (tmp_path / "q").exists()
    broken = tmp_path / "broken.yaml"
    broken.write_text(EXAMPLE.read_text(encoding="utf-8").replace("gpu: H100-SXM5-80GB", "gpu: H100", 1),
                      encoding="utf-8")
    assert main(["render", str(broken), "--to", str(tmp_path / "b")]) == 1
    assert "K909" in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left behind


@needs_kubectl
def test_the_placeholder_cannot_be_pulled_from_anywhere(rendered) -> None:
    """`.invalid` is reserved (RFC 2606): a registry host under it never resolves, unlike a bare
    `kiln-placeholder/...`, which Docker would look up on Docker Hub."""
    proc = subprocess.run(["kubectl", "kustomize", str(rendered["k8s-two-pools"])], capture_output=True, text=True)
    refs = set(re.findall(r"image: (\S+)", proc.stdout))
    refs -= {r for r in refs if r.startswith("docker.io/bitnami/kubectl:")}  # the spec's own relayout_image
    assert refs and all(r.split("/", 1)[0].endswith(".invalid") for r in refs), refs
