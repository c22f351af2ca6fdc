"""Disaggregated serving on a host: provision.sh starts each role's servers and, once they serve,
the router without a GPU; a later run recreates only the containers whose inputs changed.

nvidia-smi and Docker are stand-ins (tests/fakes: a GPU container cannot start here); each
started container is a real HTTP server on its port, which provision.sh's readiness wait asks.
"""

from __future__ import annotations

import json
import os
import signal
import shutil
from pathlib import Path

import pytest

from tests.services import free_ports
from tests.test_host_scripts import FAKES, Host, generate, output, write_script

EXAMPLE = Path(__file__).parents[1] / "examples" / "disaggregated"
ROUTER, SERVERS = "kiln-h200-chat-router", ("kiln-h200-gpu0", "kiln-h200-gpu1", "kiln-h200-gpu4_5_6_7")


def _free_base(span: int = 12) -> int:
    """A port with the `span` after it free on 127.0.0.1 (the model's http port; servers follow)."""
    base = free_ports(range(span))
    if base is None:
        pytest.skip("no free range of ports on 127.0.0.1")
    return base


class Site:
    """The example on one fake host, its serving ports moved to a free range."""

    def __init__(self, tmp: Path):
        shutil.copytree(EXAMPLE, tmp / "spec")
        self.spec = tmp / "spec" / "kiln.yaml"
        self.base = _free_base()
        self.edit("      runtime: trtllm-serve\n", f"      runtime: trtllm-serve\n      ports: {{http: {self.base}}}\n")
        self.tmp = tmp
        self.docker_state = tmp / "docker.json"
        self.docker_log = tmp / "docker.jsonl"
        self.generation = 0
        self.script = self.generate()
        (tmp / "host").mkdir()
        self.host = Host(tmp / "host", self.plan)

    def edit(self, old: str, new: str) -> None:
        text = self.spec.read_text(encoding="utf-8")
        assert old in text
        self.spec.write_text(text.replace(old, new, 1), encoding="utf-8")

    def generate(self) -> Path:
        self.generation += 1
        files = generate(self.spec)["h200"]
        self.plan = json.loads(files["desired-state.json"])
        return write_script(files, self.tmp / f"script-{self.generation}")

    def run(self, *args: str, attach: str = "gpus"):
        return self.host.run(self.script, *args, env={
            "KILN_DOCKER": str(FAKES / "fake_docker.py"), "KILN_FAKE_DOCKER_STATE": str(self.docker_state),
            "KILN_FAKE_DOCKER_LOG": str(self.docker_log), "KILN_READY_POLL": "0.2", "KILN_READY_TIMEOUT": "60",
            "KILN_GPU_ATTACH": attach})

    def containers(self) -> dict:
        return json.loads(self.docker_state.read_text(encoding="utf-8")) if self.docker_state.exists() else {}

    def stop(self) -> None:
        for c in self.containers().values():
            try:
                os.kill(c["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass


@pytest.fixture
def site(tmp_path: Path):
    s = Site(tmp_path)
    yield s
    s.stop()


def _changed(stdout: str) -> set[str]:
    return {line.split("change: container ", 1)[1].split(" ", 1)[0] for line in stdout.splitlines()
            if "change: container " in line}


def test_servers_then_the_router_without_a_gpu_and_a_second_run_changes_nothing(site: Site) -> None:
    first = site.run("--image", "serving:1")
    assert first.returncode == 0, output(first)
    assert _changed(first.stdout) == {*SERVERS, ROUTER}
    lines = first.stdout.splitlines()
    router_start = next(i for i, line in enumerate(lines) if f"change: container {ROUTER}" in line)
    for name in SERVERS:  # the router starts once every server on the host answers its readiness paths
        assert next(i for i, line in enumerate(lines) if f"container {name}: ready after" in line) < router_start
    assert f"container {ROUTER}: ready after" in first.stdout
    assert f"start chat (trtllm-serve-disaggregated) on no GPU ports {site.base}" in first.stdout

    c = site.containers()
    router = c[ROUTER]
    assert router["gpus"] == [] and not any(e.startswith("NVIDIA_VISIBLE_DEVICES") for e in router["env"])
    assert router["command"][:4] == ["trtllm-serve", "disaggregated", "--config_file",
                                     "/opt/kiln/llmapi/chat/disagg-config.yaml"]
    assert router["labels"]["kiln.gpu"] == "" and router["labels"]["kiln.runtime"] == "trtllm-serve-disaggregated"
    for name, role, devices in zip(SERVERS, ("prefill", "prefill", "decode"), ('"device=0"', '"device=1"',
                                                                              '"device=4,5,6,7"')):
        assert c[name]["gpus"] == [devices]
        assert c[name]["env"] == ["UCX_TLS=cuda_copy,cuda_ipc,tcp"]  # kv_transfer.ucx.tls, as the spec says
        assert f"/opt/kiln/llmapi/chat/{role}/llm-api-options.yaml" in c[name]["command"]

    second = site.run()  # the recorded image
    assert second.returncode == 0, output(second)
    assert "no changes: the host already matches its desired state" in second.stdout
    check = site.run("--check")
    assert check.returncode == 0 and "drift:" not in check.stdout, output(check)


def test_a_hosts_pair_shares_its_namespaces_and_the_router_runs_in_the_models_directory(site: Site) -> None:
    """Review N5: both roles on one host, so their containers join the host's IPC and PID
    namespaces (UCX cuda_ipc maps the peer's GPU memory only there) and drop --shm-size, which
    sizes a private /dev/shm; the router keeps its own. Review N3: the router runs in the image's
    models directory, where a request's model name is the checkpoint's directory."""
    proc = site.run("--image", "serving:1")
    assert proc.returncode == 0, output(proc)
    c = site.containers()
    for name in SERVERS:
        assert (c[name]["ipc_mode"], c[name]["pid_mode"], c[name]["shm_size"]) == ("host", "host", ""), name
        assert c[name]["workdir"] == ""
    assert (c[ROUTER]["ipc_mode"], c[ROUTER]["pid_mode"], c[ROUTER]["shm_size"]) == ("private", "private", "2g")
    assert c[ROUTER]["workdir"] == "/opt/kiln/models"


def test_servers_on_two_hosts_keep_private_namespaces(tmp_path: Path) -> None:
    """No peer on the same host, no cuda_ipc to enable: each server keeps its private namespaces."""
    shutil.copytree(EXAMPLE, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    text = spec.read_text(encoding="utf-8").replace(
        "      - {index: [4, 5, 6, 7], serves: chat, role: decode}\n",
        "  h200-b:\n    gpu: H200-SXM-141GB\n    count: 8\n    gpus:\n"
        "      - {index: [4, 5, 6, 7], serves: chat, role: decode}\n")
    spec.write_text(text, encoding="utf-8")
    files = generate(spec)
    for host in ("h200", "h200-b"):
        script = files[host]["provision.sh"]
        assert b"--ipc host" not in script and b"--pid host" not in script and b"--shm-size 2g" in script, host


def test_a_prefill_only_change_recreates_the_prefill_servers_only(site: Site) -> None:
    assert site.run("--image", "serving:1").returncode == 0
    pids = {n: c["pid"] for n, c in site.containers().items()}
    # (not its batch: the router scores prefill load against it, N10)
    site.edit("limits: {max_batch_size: 4}", "limits: {max_batch_size: 4}\n          runtime: {chunked_prefill: true}")
    site.script = site.generate()
    # the new image holds the new prefill options; the decode server and the router read nothing new
    again = site.run("--image", "serving:2")
    assert again.returncode == 0, output(again)
    assert _changed(again.stdout) == {"kiln-h200-gpu0", "kiln-h200-gpu1"}
    after = site.containers()
    assert {n: after[n]["pid"] for n in (SERVERS[2], ROUTER)} == {n: pids[n] for n in (SERVERS[2], ROUTER)}
    assert after["kiln-h200-gpu0"]["image"] == "serving:2" and after[ROUTER]["image"] == "serving:1"
    check = site.run("--check")
    assert check.returncode == 0 and "drift:" not in check.stdout, output(check)


def test_an_sla_edit_recreates_no_server(site: Site) -> None:
    """The SLA is what `kiln tune` measures against and the roles are sized for; no server reads it,
    so the servers' fingerprints leave it out (they digested the model's whole spec)."""
    assert site.run("--image", "serving:1").returncode == 0
    site.edit("sla: {ttft_ms: 2000, tpot_ms: 40", "sla: {ttft_ms: 1500, tpot_ms: 40")
    site.script = site.generate()
    again = site.run("--image", "serving:2")
    assert again.returncode == 0, output(again)
    assert _changed(again.stdout) == set()


def test_the_router_type_change_recreates_the_router_and_the_servers_that_publish_kv_events(site: Site) -> None:
    """Round robin instead of KV-aware: the router's config changes, and every server's options
    lose the KV-cache event buffer only a KV-aware router reads (N2)."""
    assert site.run("--image", "serving:1").returncode == 0
    site.edit("router: {kv_aware: true}", "router: {kv_aware: false}")
    site.script = site.generate()
    again = site.run("--image", "serving:2")
    assert again.returncode == 0, output(again)
    assert _changed(again.stdout) == {ROUTER, *SERVERS}


def test_where_docker_attaches_gpus_by_environment_the_router_sees_none(site: Site) -> None:
    proc = site.run("--image", "serving:1", attach="env")
    assert proc.returncode == 0, output(proc)
    c = site.containers()
    assert c[ROUTER]["gpus"] == [] and "NVIDIA_VISIBLE_DEVICES=none" in c[ROUTER]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=4,5,6,7" in c[SERVERS[2]]["env"]


def test_a_gpu_filter_leaves_the_router_alone(site: Site) -> None:
    proc = site.run("--image", "serving:1", "--gpus", "0")
    assert proc.returncode == 0, output(proc)
    assert _changed(proc.stdout) == {"kiln-h200-gpu0"}
    dry = site.run("--dry-run")
    assert f"would: container {ROUTER} (missing)" in dry.stdout and dry.returncode == 0, output(dry)


def test_the_serving_image_carries_each_roles_options_and_the_routers_config(tmp_path: Path) -> None:
    """image-context/h200 (with `image:`): the role files and the router's config of disagg-options,
    byte for byte, at the paths the commands name; the entrypoint serves the router by its id; two
    runs give the same bytes."""
    import hashlib
    import logging

    from compiler.actions import image_context
    from compiler.store.digests import DigestCache
    from compiler.graph.kinds import RunContext
    from compiler.lower import lower
    from compiler.pipeline import validate_path
    from compiler.targets.registry import REGISTRY

    shutil.copytree(EXAMPLE, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    spec.write_text(spec.read_text(encoding="utf-8") + "\nimage: {repository: registry.example.com/inference/disagg}\n",
                    encoding="utf-8")
    v = validate_path(spec)
    graph = lower(v, DigestCache(None))
    log = logging.getLogger("test-disagg-image")
    ctx_action = graph.actions["image-context/h200"]
    assert "disagg-options/chat" in ctx_action.deps and "llmapi-options/chat" not in ctx_action.deps
    options = tmp_path / "disagg-options"
    options.mkdir()
    REGISTRY["disagg-options"].run(graph.actions["disagg-options/chat"].params, RunContext(options, {}, {}, log))
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}\n")
    deps = {"disagg-options/chat": options, "model-source/chat": checkpoint}

    def run(out: Path) -> dict[str, str]:
        out.mkdir()
        image_context.KIND.run(ctx_action.params, RunContext(out, {}, deps, log))
        return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(out.rglob("*")) if p.is_file()}

    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    assert first == second
    layer = tmp_path / "a" / "layers" / "llmapi" / "opt" / "kiln" / "llmapi" / "chat"
    for rel in ("prefill/llm-api-options.yaml", "decode/llm-api-options.yaml", "disagg-config.yaml"):
        assert (layer / rel).read_bytes() == (options / rel).read_bytes()
    assert not (layer / "llm-api-options.yaml").exists()  # the aggregated options serve nothing here
    serve = (tmp_path / "a" / "layers" / "entrypoint" / "opt" / "kiln" / "bin" / "serve").read_text()
    assert "h200/chat-router) shift; need /opt/kiln/llmapi/chat/disagg-config.yaml; exec trtllm-serve disaggregated" \
        in serve


def test_a_router_on_a_host_of_its_own_starts_alone_and_reaches_the_servers_by_host_name(tmp_path: Path) -> None:
    s = Site.__new__(Site)  # the same spec, the router moved to a host without GPU assignments
    shutil.copytree(EXAMPLE, tmp_path / "spec")
    s.spec, s.tmp, s.generation = tmp_path / "spec" / "kiln.yaml", tmp_path, 0
    s.base = _free_base()
    s.edit("      runtime: trtllm-serve\n", f"      runtime: trtllm-serve\n      ports: {{http: {s.base}}}\n")
    s.edit("router: {kv_aware: true}", "router: {kv_aware: true, host: edge}")
    s.spec.write_text(s.spec.read_text(encoding="utf-8") + "  edge:\n    gpu: H200-SXM-141GB\n    count: 1\n    gpus: []\n",
                      encoding="utf-8")
    files = generate(s.spec)
    assert b"chat-router" not in files["h200"]["provision.sh"]
    from compiler.store.digests import DigestCache
    from compiler.lower import lower
    from compiler.pipeline import validate_path

    config = lower(validate_path(s.spec), DigestCache(None)).actions["disagg-options/chat"].params.config
    assert config["context_servers"]["urls"] == [f"h200:{s.base + 3}", f"h200:{s.base + 6}"]
    assert config["generation_servers"]["urls"] == [f"h200:{s.base + 9}"]
    s.plan = json.loads(files["edge"]["desired-state.json"])
    s.script = write_script(files["edge"], tmp_path / "script-edge")
    s.docker_state, s.docker_log = tmp_path / "docker.json", tmp_path / "docker.jsonl"
    (tmp_path / "host").mkdir()
    s.host = Host(tmp_path / "host", s.plan)
    try:
        proc = s.run("--image", "serving:1")
        assert proc.returncode == 0, output(proc)
        assert _changed(proc.stdout) == {"kiln-edge-chat-router"} and "kiln-edge-chat-router: ready after" in proc.stdout
        assert s.containers()["kiln-edge-chat-router"]["gpus"] == []
    finally:
        s.stop()
