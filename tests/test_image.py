"""Serving images (issue 6, items 4-5): the build context is rendered deterministically from the
spec; the image is built by the real Docker Engine, pushed to a real registry on 127.0.0.1, pulled
back by digest and inspected; a serving-only edit re-uploads no weights.

No base image can be pulled here, so the tests build their own (FROM scratch with a static busybox
and a `tritonserver` stand-in that reports how the entrypoint called it), push it to the session's
registry and point the spec's `image.base` at it by digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import shutil
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest

from compiler.actions import dockerbuild, image, image_context, weights_image
from compiler.serving import layout
from compiler.graph.kinds import RunContext
from compiler.build import build_spec, open_store, plan_spec
from compiler.release import spec_digest
from tests.services import docker_reachable

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
HOST = "dev-h100"
LOG = logging.getLogger("test-image")

needs_docker = pytest.mark.skipif(not docker_reachable(), reason="no Docker daemon reachable (docker info failed); "
                                  "scripts/test.sh starts one")

# The stand-in server: prints its arguments and checks the files the entrypoint points it at.
FAKE_TRITONSERVER = """#!/bin/sh
echo "tritonserver $*"
for a in "$@"; do
  case $a in --model-repository=*) repo=${a#*=} ;; --load-model=*) model=${a#*=} ;; esac
done
[ -f "$repo/$model/config.pbtxt" ] && echo "found $repo/$model/config.pbtxt"
[ -f "/opt/kiln/models/$model/config.json" ] && echo "found /opt/kiln/models/$model/config.json"
exit 0
"""


# --- the context, without a daemon --------------------------------------------------------------
def _spec_copy(tmp: Path, image_yaml: str) -> Path:
    """The quickstart with `image_yaml` appended, and one model (`tiny`, calibrated in one batch): one
    unit, one layer of weights."""
    from tests.quickstart import one_batch, only_tiny

    spec_dir = tmp / "quickstart"
    shutil.copytree(QUICKSTART, spec_dir)
    text = one_batch(only_tiny((spec_dir / "kiln.yaml").read_text(encoding="utf-8")))
    (spec_dir / "kiln.yaml").write_text(text + image_yaml, encoding="utf-8")
    return spec_dir / "kiln.yaml"


def _context_inputs(tmp: Path) -> dict[str, Path]:
    """Dependency outputs of image-context/dev-h100: a checkpoint tree and a repository tree."""
    ckpt = tmp / "deps" / "quantize__tiny"
    shutil.copytree(QUICKSTART / "model", ckpt)
    repo = tmp / "deps" / "triton-repo__dev-h100"
    (repo / "tiny" / "1").mkdir(parents=True)
    (repo / "tiny" / "config.pbtxt").write_text('name: "tiny"\n')
    (repo / "tiny" / "1" / "model.yaml").write_text(f"model: {layout.model_dir('tiny')}\n")
    return {"quantize/tiny": ckpt, "triton-repo/dev-h100": repo}


def _context_action(tmp: Path):
    from compiler.store.digests import DigestCache
    from compiler.lower import lower
    from compiler.pipeline import validate_path

    spec = _spec_copy(tmp, "image: {repository: 127.0.0.1:5000/kiln/quickstart}\n")
    return lower(validate_path(spec), DigestCache(tmp / "digests.json"))


def test_lowering_adds_context_and_image_only_with_image(tmp_path: Path) -> None:
    graph = _context_action(tmp_path)
    ctx_action = graph.actions[f"image-context/{HOST}"]
    img_action = graph.actions[f"image/{HOST}"]
    assert set(ctx_action.deps) == {"quantize/tiny", f"triton-repo/{HOST}"}
    assert ctx_action.needs == ()  # the context is produced on every builder
    assert img_action.deps == (ctx_action.id,) and img_action.needs == ("docker",)
    # default base: the toolchain's Triton image, pinned by digest
    assert ctx_action.params.base.startswith("nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:")
    # Without `image:` there is no image work at all.
    from compiler.store.digests import DigestCache
    from compiler.lower import lower
    from compiler.pipeline import validate_path

    plain = lower(validate_path(QUICKSTART / "kiln.yaml"), DigestCache(tmp_path / "d2.json"))
    assert not [a for a in plain.actions if a.startswith("image")]


def _render(tmp: Path, out_name: str, params: dict) -> Path:
    out = tmp / out_name
    out.mkdir()
    image_context.KIND.run(image_context.ImageContextParams.model_validate(params),
                           RunContext(out, {}, _context_inputs(tmp / (out_name + "-in")), LOG))
    return out


def _serving_on(unit: dict, target: str) -> dict:
    """A unit's serving for its (edited) ports, as lowering would compute it."""
    from compiler.actions import runtimes

    return runtimes.unit_serving(unit["serving"]["runtime"], target, unit["model"], unit["ports"]).to_json()


def _tree_bytes(root: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_weights_image_sets_every_label_in_one_instruction() -> None:
    text = weights_image.dockerfile("tiny", "quick", ["weights-00", "weights-01"], {"b": "2", "a": 'x "y"'})
    instructions = [line for line in text.replace("\\\n", "").splitlines() if line and not line.startswith("#")]
    assert instructions == ["FROM scratch", "COPY weights-00/ /", "COPY weights-01/ /",
                            'LABEL "a"="x \\"y\\""       "b"="2"']


def test_context_is_deterministic_and_layered(tmp_path: Path) -> None:
    params = dict(_context_action(tmp_path / "spec").actions[f"image-context/{HOST}"].params.to_json())
    a = _render(tmp_path, "a", params)
    b = _render(tmp_path, "b", params)
    assert _tree_bytes(a) == _tree_bytes(b)

    dockerfile = (a / "Dockerfile").read_text()
    instructions = [line for line in dockerfile.replace("\\\n", "").splitlines() if line and not line.startswith("#")]
    assert instructions[0] == f"FROM {params['base']}"
    # weights, then repository, then entrypoint; labels after every layer
    assert instructions[1:4] == ["COPY layers/model-tiny/ /", "COPY layers/repository/ /", "COPY layers/entrypoint/ /"]
    assert instructions[4] == 'ENTRYPOINT ["/opt/kiln/bin/serve"]'
    assert instructions[5] == "CMD []"
    # every label in one instruction: the classic builder makes a step (about a second) of each
    assert len(instructions) == 7 and instructions[6].startswith("LABEL ")
    assert "{{" not in dockerfile and "{%" not in dockerfile

    meta = json.loads((a / image_context.METADATA).read_text())
    assert meta["content_digest"] == image_context.content_digest(a)
    assert f' io.kiln.content.digest="{meta["content_digest"]}" ' in instructions[6]
    assert (a / "layers/model-tiny/opt/kiln/models/tiny/model.safetensors").read_bytes() == \
        (QUICKSTART / "model" / "model.safetensors").read_bytes()
    assert (a / "layers/repository/opt/kiln/repository/tiny/config.pbtxt").is_file()
    serve = a / "layers/entrypoint/opt/kiln/bin/serve"
    assert serve.stat().st_mode & 0o111
    text = serve.read_text()
    assert ("  dev-h100/gpu0/mig0 | tiny) shift; need /opt/kiln/repository/tiny/config.pbtxt; exec tritonserver "
            "--model-repository=/opt/kiln/repository --model-control-mode=explicit --load-model=tiny --http-port=8000 "
            "--grpc-port=8001 --metrics-port=8002 \"$@\" ;;") in text
    lint = subprocess.run(["shellcheck", "-s", "sh", str(serve)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout

    # A serving port is the entrypoint's business only: the weights and repository layers stay.
    params2 = json.loads(json.dumps(params))
    params2["units"][0]["ports"]["http"] = 9000
    params2["units"][0]["serving"] = _serving_on(params2["units"][0], target="llmapi")
    c = _render(tmp_path, "c", params2)
    for layer in ("layers/model-tiny", "layers/repository"):
        assert _tree_bytes(a / layer) == _tree_bytes(c / layer)
    assert _tree_bytes(a / "layers/entrypoint") != _tree_bytes(c / "layers/entrypoint")


def test_content_image_tag_names_base_and_content(tmp_path: Path) -> None:
    """The image action reuses a content image by its local tag, so the tag must change with the
    base as well as with any file."""
    params = dict(_context_action(tmp_path / "spec").actions[f"image-context/{HOST}"].params.to_json())
    a = _render(tmp_path, "a", params)
    other_base = dict(params, base=params["base"].rsplit("@", 1)[0] + "@sha256:" + "2" * 64)
    b = _render(tmp_path, "b", other_base)
    assert image.local_content_tag(HOST, a) == image.local_content_tag(HOST, _render(tmp_path, "a2", params))
    assert image.local_content_tag(HOST, a) != image.local_content_tag(HOST, b)
    params2 = json.loads(json.dumps(params))
    params2["units"][0]["ports"]["grpc"] = 9001
    params2["units"][0]["serving"] = _serving_on(params2["units"][0], target="llmapi")
    assert image.local_content_tag(HOST, a) != image.local_content_tag(HOST, _render(tmp_path, "c", params2))


def test_context_tar_is_deterministic(tmp_path: Path) -> None:
    params = dict(_context_action(tmp_path / "spec").actions[f"image-context/{HOST}"].params.to_json())
    a = _render(tmp_path, "a", params)
    bufs = []
    for _ in range(2):
        buf = io.BytesIO()
        digest = dockerbuild.write_context_tar(a, ["Dockerfile", "layers"], buf)
        bufs.append((digest, buf.getvalue()))
    assert bufs[0] == bufs[1]
    with tarfile.open(fileobj=io.BytesIO(bufs[0][1])) as t:
        members = t.getmembers()
    assert {(m.mtime, m.uid, m.gid) for m in members} == {(0, 0, 0)}
    assert "layers/model-tiny/opt" in {m.name for m in members}  # parents come from the context


def test_image_step_without_a_daemon_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real SDK, real socket path that has no daemon behind it: one clear line, no traceback text."""
    params = dict(_context_action(tmp_path / "spec").actions[f"image-context/{HOST}"].params.to_json())
    ctx_out = _render(tmp_path, "ctx", params)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(dockerbuild.DockerError) as e:
        image.KIND.run(image.ImageParams(host=HOST, repository="127.0.0.1:5000/x"),
                  RunContext(out, {}, {f"image-context/{HOST}": ctx_out}, LOG))
    msg = str(e.value)
    assert "\n" not in msg and "no Docker daemon reachable" in msg and "no-docker.sock" in msg
    assert not list(out.iterdir())  # nothing half-written


def test_plan_without_daemon_still_lists_context(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path, "image: {repository: 127.0.0.1:5000/kiln/quickstart}\n")
    outcome = plan_spec(spec, open_store(tmp_path / "store"))
    ids = {p.id for p in outcome.plan}
    assert {f"image-context/{HOST}", f"image/{HOST}"} <= ids


# --- real Docker Engine and registry ------------------------------------------------------------
@pytest.fixture(scope="module")
def base_image(registry, tmp_path_factory) -> str:
    """A small base pushed to the test registry; returned pinned by digest."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (Debian busybox-static; scripts/services.sh installs it)")
    ctx = tmp_path_factory.mktemp("base")
    (ctx / "bin").mkdir()
    shutil.copy(busybox, ctx / "bin" / "busybox")
    for applet in ("sh", "cat", "ls", "sleep"):
        (ctx / "bin" / applet).symlink_to("busybox")
    (ctx / "bin" / "tritonserver").write_text(FAKE_TRITONSERVER)
    (ctx / "bin" / "tritonserver").chmod(0o755)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY bin/ /bin/\nENV PATH=/bin\n")
    repo = f"{registry.host}/kiln-test/base"
    with contextlib.closing(dockerbuild.connect()) as client:
        client.images.build(path=str(ctx), tag=f"{repo}:v1", rm=True)
        result = dockerbuild.push(client, repo, "v1", LOG)
        return f"{repo}@{result.digest}"


def _blobs(registry) -> dict[str, int]:
    """Every blob the registry stores, with its size: what pushes uploaded."""
    root = registry.dir / "data" / "docker" / "registry" / "v2" / "blobs"
    return {p.parent.name: p.stat().st_size for p in root.rglob("data")} if root.exists() else {}


def _registry_manifest(registry, name: str, digest: str) -> dict:
    req = urllib.request.Request(f"http://{registry.host}/v2/{name}/manifests/{digest}",
                                 headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _files_in_image(client, ref: str, path: str) -> dict[str, bytes]:
    container = client.containers.create(ref)
    try:
        stream, _ = container.get_archive(path)
        data = b"".join(stream)
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


@needs_docker
def test_image_build_push_pull_and_weights_layer_reuse(tmp_path: Path, registry, base_image: str) -> None:
    name = "kiln/quickstart"
    spec = _spec_copy(tmp_path, f"image: {{repository: {registry.host}/{name}, base: {base_image}}}\n")
    store = open_store(tmp_path / "store")
    with contextlib.closing(dockerbuild.connect()) as client:
        before = _blobs(registry)
        first = build_spec(spec, store)
        assert not first.failed, [(r.id, r.error) for r in first.failed]
        after_first = _blobs(registry)
        manifest = json.loads(first.manifest)
        entry = manifest["images"][HOST]
        ref = entry["reference"]
        assert ref.startswith(f"{registry.host}/{name}@sha256:")

        # Pull back by digest: drop the local copy of the pushed image, then pull it.
        client.images.remove(f"{registry.host}/{name}:{_tag(store, first)}", force=True)
        pulled = client.images.pull(ref)
        assert entry["digest"] in pulled.attrs["RepoDigests"][0]
        labels = pulled.attrs["Config"]["Labels"]
        # no spec digest label: a spec edit that leaves the content alone must not change the image
        assert spec_digest(first.validation.spec) not in labels.values()
        assert labels["io.kiln.content.digest"] == entry["content_digest"]
        assert labels["org.opencontainers.image.base.digest"] == base_image.rsplit("@", 1)[1]
        assert pulled.attrs["Config"]["Entrypoint"] == [image_context.ENTRYPOINT_PATH]

        # The checkpoint and the repository are where the entrypoint looks for them, byte for byte.
        ckpt_tree = first.results["quantize/tiny"].tree
        expected = {e.path: store.read_bytes(e.digest) for e in store.tree(ckpt_tree)}
        inside = _files_in_image(client, ref, layout.model_dir("tiny"))
        assert {k.split("/", 1)[1]: v for k, v in inside.items()} == expected
        repo_files = _files_in_image(client, ref, layout.REPOSITORY_DIR)
        assert "repository/tiny/config.pbtxt" in repo_files and "repository/tiny/1/model.yaml" in repo_files

        # The entrypoint starts the server on the repository with the unit's ports.
        out = client.containers.run(ref, remove=True).decode()
        assert f"tritonserver --model-repository={layout.REPOSITORY_DIR} --model-control-mode=explicit " \
            "--load-model=tiny --http-port=8000 --grpc-port=8001 --metrics-port=8002" in out
        assert f"found {layout.REPOSITORY_DIR}/tiny/config.pbtxt" in out
        assert "found /opt/kiln/models/tiny/config.json" in out

        # Only a serving setting changes: the repository layer is new, the weights layer is not.
        text = spec.read_text().replace("max_queue_size: 16", "max_queue_size: 32")
        assert text != spec.read_text()
        spec.write_text(text)
        second = build_spec(spec, store)
        assert not second.failed, [(r.id, r.error) for r in second.failed]
        after_second = _blobs(registry)
        executed = {r.id for r in second.executed}
        assert "quantize/tiny" not in executed and f"image/{HOST}" in executed
        entry2 = json.loads(second.manifest)["images"][HOST]
        assert entry2["digest"] != entry["digest"]

        m1 = _registry_manifest(registry, name, entry["digest"])
        m2 = _registry_manifest(registry, name, entry2["digest"])
        n_base = len(_registry_manifest(registry, "kiln-test/base", base_image.rsplit("@", 1)[1])["layers"])
        weights1, weights2 = m1["layers"][n_base], m2["layers"][n_base]
        repo1, repo2 = m1["layers"][n_base + 1], m2["layers"][n_base + 1]
        assert weights1["digest"] == weights2["digest"]  # the same layer, not re-uploaded
        assert repo1["digest"] != repo2["digest"]
        assert m1["layers"][n_base + 2] == m2["layers"][n_base + 2]  # entrypoint: rebuilt, same bytes

        pushed_first = {d: s for d, s in after_first.items() if d not in before}
        pushed_second = {d: s for d, s in after_second.items() if d not in after_first}
        first_bytes, second_bytes = sum(pushed_first.values()), sum(pushed_second.values())
        print(f"\nbytes pushed: first build {first_bytes} ({len(pushed_first)} blobs), "
              f"second build {second_bytes} ({len(pushed_second)} blobs); weights layer {weights1['size']} bytes")
        weights_hex = weights1["digest"].split(":", 1)[1]
        assert weights_hex in pushed_first and weights_hex not in pushed_second
        assert second_bytes < weights1["size"] < first_bytes

        # Reverting the edit is a rollback: nothing runs, the first manifest (and image) comes back.
        spec.write_text(text.replace("max_queue_size: 32", "max_queue_size: 16"))
        third = build_spec(spec, store)
        assert not third.executed and third.manifest == first.manifest

        # A host-only edit (clock locks) does not touch the image: serving containers keep running it.
        spec.write_text(spec.read_text().replace("graphics_mhz: 1755", "graphics_mhz: 1700"))
        fourth = build_spec(spec, store)
        assert {r.id for r in fourth.executed} == {"spec-snapshot", f"host-plan/{HOST}", f"host-script/{HOST}"}
        assert json.loads(fourth.manifest)["images"][HOST] == entry


def _tag(store, outcome) -> str:
    tree = outcome.results[f"image/{HOST}"].tree
    entry = next(e for e in store.tree(tree) if e.path == image.OUTPUT)
    return json.loads(store.read_bytes(entry.digest))["tag"]


@needs_docker
def test_rebuilds_give_the_same_layers_and_image_digest(tmp_path: Path, registry, base_image: str) -> None:
    """Same context, build cache off, twice: the layers are the same bytes (diff IDs); the builder's
    image IDs differ (its config records build times); normalize() gives both the same config, so
    the registry stores one manifest digest for the two pushes."""
    params = dict(_context_action(tmp_path / "spec").actions[f"image-context/{HOST}"].params.to_json())
    params["base"] = base_image
    ctx_out = _render(tmp_path, "ctx", params)
    with contextlib.closing(dockerbuild.connect()) as client:
        repository = f"{registry.host}/kiln/repro"
        built, layers, normalized, digests = [], [], [], []
        for i in range(2):
            with open(tmp_path / f"ctx{i}.tar", "w+b") as f:
                dockerbuild.write_context_tar(ctx_out, ["Dockerfile", "layers"], f)
                f.seek(0)
                built.append(dockerbuild.build(client, f, f"kiln-test-repro:{i}", LOG, nocache=True))
            layers.append(client.images.get(built[i]).attrs["RootFS"]["Layers"])
            normalized.append(dockerbuild.normalize(client, built[i], base_image, f"{repository}:build{i}", LOG))
            digests.append(dockerbuild.push(client, repository, f"build{i}", LOG).digest)
        assert layers[0] == layers[1]
        assert built[0] != built[1]  # the classic builder's own result is not reproducible
        assert normalized[0] == normalized[1]
        assert digests[0] == digests[1]
        config = _registry_config(registry, "kiln/repro", digests[0])
        assert normalized[0] == "sha256:" + hashlib.sha256(config).hexdigest()
        doc = json.loads(config)
        assert doc["created"] == dockerbuild.FIXED_CREATED and "container" not in doc
        assert doc["config"]["Labels"]["io.kiln.content.digest"].startswith("sha256:")
        # the normalized image still runs: its entrypoint and layers are intact
        out = client.containers.run(normalized[0], remove=True).decode()
        assert "found /opt/kiln/models/tiny/config.json" in out


def _registry_config(registry, name: str, digest: str) -> bytes:
    config = _registry_manifest(registry, name, digest)["config"]["digest"]
    with urllib.request.urlopen(f"http://{registry.host}/v2/{name}/blobs/{config}", timeout=10) as r:
        return r.read()


@needs_docker
def test_entrypoint_of_a_host_with_several_units(tmp_path: Path, base_image: str) -> None:
    """b200-a serves three models on six MIG slices (two GPUs): with no argument the entrypoint names
    the units and refuses; a unit id starts that unit's server (a model name would be ambiguous, so
    it is not one); any other command (how provision.sh starts containers) runs as given."""
    from compiler.store.digests import DigestCache
    from compiler.lower import lower
    from compiler.pipeline import validate_path

    graph = lower(validate_path(ROOT / "examples" / "b200-mig-three-models" / "kiln.yaml"),
                  DigestCache(tmp_path / "digests.json"))
    typed_units = graph.actions["image-context/b200-a"].params.units
    units = [u.to_json() for u in typed_units]
    assert len(units) == 6
    ctx = tmp_path / "ctx"
    serve = ctx / "entry" / image_context.ENTRYPOINT_PATH.lstrip("/")
    serve.parent.mkdir(parents=True)
    serve.write_text(image_context.environment().get_template(image_context.ENTRYPOINT)
                     .render(**image_context.entrypoint_context("b200-a", typed_units)))
    serve.chmod(0o755)
    for u in units:  # a repository with one config per model, as the image holds it
        p = ctx / "entry" / layout.REPOSITORY_DIR.lstrip("/") / u["model"] / "config.pbtxt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f'name: "{u["model"]}"\n')
    (ctx / "Dockerfile").write_text(f'FROM {base_image}\nCOPY entry/ /\nENTRYPOINT ["{image_context.ENTRYPOINT_PATH}"]\n')
    with contextlib.closing(dockerbuild.connect()) as client:
        with open(tmp_path / "ctx.tar", "w+b") as f:
            dockerbuild.write_context_tar(ctx, ["Dockerfile", "entry"], f)
            f.seek(0)
            image_id = dockerbuild.build(client, f, "kiln-test-entrypoint:b200", LOG)

        def run(*args: str) -> tuple[int, str]:
            c = client.containers.run(image_id, list(args), detach=True)
            try:
                code = c.wait()["StatusCode"]
                return code, c.logs().decode()
            finally:
                c.remove(force=True)

        code, out = run()
        assert code == 2 and "name one of:" in out and all(u["id"] in out for u in units)
        chat = [u for u in units if u["model"] == "chat"][1]  # the second replica: ports offset
        assert chat["ports"]["http"] != 8000
        for name in (chat["id"],):
            code, out = run(name, "--log-verbose=1")
            assert code == 0, out
            p = chat["ports"]
            assert f"tritonserver --model-repository={layout.REPOSITORY_DIR} --model-control-mode=explicit " \
                f"--load-model=chat --http-port={p['http']} --grpc-port={p['grpc']} --metrics-port={p['metrics']} " \
                "--log-verbose=1" in out
            assert f"found {layout.REPOSITORY_DIR}/chat/config.pbtxt" in out
        code, out = run("chat")  # two chat units here: not a name the entrypoint knows, so a command
        assert code != 0 and "tritonserver" not in out
        code, out = run("tritonserver", "--model-repository=/elsewhere", "--http-port=1234")
        assert code == 0 and "tritonserver --model-repository=/elsewhere --http-port=1234" in out
