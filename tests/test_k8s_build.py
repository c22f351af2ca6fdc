"""The Kubernetes tree as an artifact, end to end with the real Docker Engine and registry: `kiln
build` builds the pool's serving image (the runtime alone) and the model's weights image (the
checkpoint alone) and the tree that pins both by digest, mounting the weights, the release manifest
lists the tree, `kubectl kustomize` builds it from the store, `kiln publish` pushes it like every
artifact, and reverting a change gives the earlier tree byte for byte without building anything.

The spec is the quickstart's tiny model, unquantized (no ModelOpt run), on a one-GPU node pool,
with a small base image built here (as tests/test_image.py does: no Triton image can be pulled).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import urllib.request
from pathlib import Path

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from compiler.actions import dockerbuild
from compiler.build import build_spec, open_store
from compiler.targets.kubernetes import meta
from tests.k8s_tree import kustomize, tree_files
from tests.services import docker_reachable

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
LOG = logging.getLogger("test-k8s-build")

pytestmark = [
    pytest.mark.skipif(not docker_reachable(), reason="no Docker daemon reachable (docker info failed); "
                       "scripts/test.sh starts one"),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (kustomize is built into it)"),
]

SPEC = """kiln: v1
name: k8s-quick
toolchain:
  tensorrt_llm: "1.2.1"
  triton_image: nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0
models:
  tiny:
    source: {{path: model}}
    limits: {{max_batch_size: 8, max_input_len: 256, max_seq_len: 512, max_num_tokens: 2048}}
hosts:
  pool:
    deploy: kubernetes
    node_pool: {{nodes: 2}}
    gpu: H100-SXM5-80GB
    count: 1
    clocks: {{graphics_mhz: 1755}}
    gpus:
      - index: 0
        mig:
          - {{profile: {profile}, serves: tiny}}
image: {{repository: {registry}/kiln/k8s-quick, base: {base}}}
"""


@pytest.fixture(scope="module")
def base_image(registry, tmp_path_factory) -> str:
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (Debian busybox-static; scripts/services.sh installs it)")
    ctx = tmp_path_factory.mktemp("base")
    (ctx / "bin").mkdir()
    shutil.copy(busybox, ctx / "bin" / "busybox")
    (ctx / "bin" / "sh").symlink_to("busybox")
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY bin/ /bin/\nENV PATH=/bin\n")
    repo = f"{registry.host}/kiln-test/k8s-base"
    with contextlib.closing(dockerbuild.connect()) as client:
        client.images.build(path=str(ctx), tag=f"{repo}:v1", rm=True)
        return f"{repo}@{dockerbuild.push(client, repo, 'v1', LOG).digest}"


def _write(spec_dir: Path, registry, base: str, profile: str) -> Path:
    spec = spec_dir / "kiln.yaml"
    spec.write_text(SPEC.format(registry=registry.host, base=base, profile=profile), encoding="utf-8")
    return spec


def _image_files(reference: str) -> set[str]:
    """The files of an image's layers (what an image volume shows), read from `docker save`."""
    import io
    import tarfile

    with contextlib.closing(dockerbuild.connect()) as client:
        client.images.pull(reference)
        data = b"".join(client.images.get(reference).save())
    outer = tarfile.open(fileobj=io.BytesIO(data))
    layers = json.loads(outer.extractfile("manifest.json").read())[0]["Layers"]
    out = set()
    for layer in layers:
        with tarfile.open(fileobj=outer.extractfile(layer)) as tar:
            out |= {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}
    return out


def _tree(store, outcome, dest: Path) -> Path:
    tree = outcome.results["k8s-release"].tree
    store.materialize(tree, dest)
    return dest


def test_build_publish_and_revert_the_tree(tmp_path: Path, registry, base_image: str) -> None:
    spec_dir = tmp_path / "spec"
    shutil.copytree(QUICKSTART / "model", spec_dir / "model")
    store = open_store(tmp_path / "store")

    first = build_spec(_write(spec_dir, registry, base_image, "1g.10gb"), store)
    assert first.complete, [(r.id, r.error) for r in first.failed + first.deferred]
    manifest = json.loads(first.manifest)
    assert manifest["kubernetes"]["k8s-quick"] == {
        "artifact": "k8s-release", "namespace": "k8s-quick", "runtime": "deployment", "mig_strategy": "single",
        "pools": {"pool": {"layout": manifest["kubernetes"]["k8s-quick"]["pools"]["pool"]["layout"], "nodes": 2,
                           "workloads": {"tiny-pool": 2}}}}
    assert {a["id"] for a in manifest["artifacts"]} >= {"k8s-release", "k8s-node-layer", "k8s-deployment/tiny-pool"}
    assert "host-plan/pool" not in {a["id"] for a in manifest["artifacts"]}

    a = _tree(store, first, tmp_path / "tree-a")
    built = kustomize(a)
    deployment = next(o for o in built if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == manifest["images"]["pool/tiny"]["reference"]  # the pushed image (the pool's, tiny's), by digest
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"  # one profile per node: strategy single
    assert set(container["resources"]["requests"]) == {"cpu", "memory", "nvidia.com/gpu"}  # not BestEffort
    assert deployment["metadata"]["annotations"][meta.SPEC_DIGEST_ANNOTATION] == manifest["spec"]["digest"]
    for o in built:
        kubernetes_validate.validate(o, meta.KUBERNETES_VERSION, strict=True)
    # the weights are an image of their own, mounted where the runtime reads them; the pool's
    # serving image holds the runtime alone
    weights = manifest["weights"]["tiny"]["reference"]
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "weights", "image": {"reference": weights, "pullPolicy": "IfNotPresent"}} in pod["volumes"]
    assert {"name": "weights", "mountPath": "/opt/kiln/models/tiny", "readOnly": True} in container["volumeMounts"]
    checkpoint = tmp_path / "checkpoint"
    store.materialize(first.results["model-source/tiny"].tree, checkpoint)
    assert _image_files(weights) == {p.relative_to(checkpoint).as_posix() for p in checkpoint.rglob("*") if p.is_file()}
    assert not any(f.startswith("opt/kiln/models/") for f in _image_files(container["image"]))
    # the same checkpoint pushes the same weights image when built afresh (none cached on the daemon)
    from compiler.actions import weights_image
    from compiler.graph.kinds import RunContext

    action = first.graph.actions["weights-image/tiny"]
    with contextlib.closing(dockerbuild.connect()) as client:
        for img in client.images.list(name="kiln-weights-tiny"):
            client.images.remove(img.id, force=True)
    again = tmp_path / "weights-again"
    again.mkdir()
    weights_image.KIND.run(action.params, RunContext(again, {}, {action.params.checkpoint: checkpoint}, LOG))
    assert json.loads((again / weights_image.OUTPUT).read_text())["reference"] == weights

    # kiln publish pushes the tree like every other artifact
    from compiler.gitops.artifacts import ARTIFACTS_REPO, artifact_tag
    from compiler.gitops.publish import publish_spec

    pushed = publish_spec(spec_dir / "kiln.yaml", store, f"{registry.host}/kiln", None, artifacts_only=True)
    assert "k8s-release" in pushed.pushed
    with urllib.request.urlopen(f"http://{registry.host}/v2/kiln/{ARTIFACTS_REPO}/tags/list", timeout=10) as r:
        tags = json.loads(r.read())["tags"]
    assert artifact_tag("k8s-release", first.graph.keys["k8s-release"]) in tags

    # a MIG profile change: a new layout; under strategy `single` the pods ask for nvidia.com/gpu
    # either way, so the workload's file stays; the image is the same one
    second = build_spec(_write(spec_dir, registry, base_image, "1g.20gb"), store)
    assert second.complete
    b = _tree(store, second, tmp_path / "tree-b")
    changed = {rel for rel, data in tree_files(b).items() if tree_files(a).get(rel) != data}
    assert changed == {"node-layer/mig-parted-config.yaml", "node-layer/label-nodes.sh", "release-stamp.yaml"}
    assert {r.id for r in second.executed} == {"k8s-node-layer", "k8s-release",
                                               "capacity-report/pool", "spec-snapshot"}

    # the revert: nothing runs, the same tree and manifest come back
    third = build_spec(_write(spec_dir, registry, base_image, "1g.10gb"), store)
    assert third.complete and third.executed == []
    assert third.results["k8s-release"].tree == first.results["k8s-release"].tree
    assert third.manifest == first.manifest
    assert tree_files(_tree(store, third, tmp_path / "tree-c")) == tree_files(a)
    YAML(typ="safe", pure=True).load((a / "kustomization.yaml").read_text())  # a plain YAML file
