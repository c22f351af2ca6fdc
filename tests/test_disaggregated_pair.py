"""A disaggregated pair served through the programs Kiln emits, on a CPU: the host's boot unit
(kiln-host-<host>.service, its ExecStart) runs the generated provision.sh, which starts a prefill
server, a decode server and then the router with the container commands and options it holds
(`trtllm-serve ...`, `trtllm-serve disaggregated ...`, --env, --workdir) in the serving image's
file layout (the image context Kiln builds, with the quickstart's tiny checkpoint). Docker and the
GPU are stand-ins (tests/fakes/fake_docker.py runs each container's command on this machine;
tests/disagg_standin.py is trtllm-serve, checking the argv against the pinned flag tables); the
rest is Kiln's output as it is. A text request named by the model's name streams through the
router, prefilled on one server and decoded on the other, with the tokens the model generates
whole; the second time the KV-aware router finds the prompt's blocks on the prefill server, from
the KV-cache events Kiln's options turn on (review N2), having tokenized it in the models
directory Kiln's router runs in (review N3). Then AIPerf (the benchmark `kiln tune` runs) streams
its own completions through the router.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from compiler.actions import image_context
from compiler.store.digests import DigestCache
from compiler.graph.kinds import RunContext
from compiler.lower import lower
from compiler.pipeline import validate_path
from compiler.targets.registry import REGISTRY
from tests.aiperf_env import Unavailable, aiperf_executable
from tests.services import free_ports
from tests.test_host_scripts import FAKES, Host, generate, output, write_script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "disaggregated"
MODEL = ROOT / "examples" / "quickstart" / "model"
PROMPT = ("Disaggregated serving computes the prompt on one server and generates the answer on another, "
          "so the first token waits for the transfer of the whole KV cache between them.")


def _spec(tmp: Path, base: int) -> Path:
    """The example with one prefill and one decode server, short limits, the model's port at `base`."""
    shutil.copytree(EXAMPLE, tmp / "spec")
    spec = tmp / "spec" / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    for old, new in {
        "      - {index: 1, serves: chat, role: prefill}\n": "",
        "max_input_len: 4096, max_seq_len: 5120": "max_input_len: 256, max_seq_len: 512",
        "    workload: {input_tokens: 3000, output_tokens: 300, requests_per_second: 4}\n": "",
        "    sla: {ttft_ms: 2000, tpot_ms: 40, percentile: p50}\n": "",
        "          max_tokens_in_buffer: 4096\n": "",
        "      runtime: trtllm-serve\n": f"      runtime: trtllm-serve\n      ports: {{http: {base}}}\n",
    }.items():
        assert old in text, old
        text = text.replace(old, new)
    spec.write_text(text + "\nimage: {repository: registry.example.com/inference/disagg}\n", encoding="utf-8")
    return spec


def _image_root(spec: Path, tmp: Path) -> Path:
    """The serving image's files: the image context Kiln builds for the host, its layers merged."""
    log = logging.getLogger("test-disagg-pair")
    graph = lower(validate_path(spec), DigestCache(None))
    ctx_action = graph.actions["image-context/h200"]
    deps = {}
    for aid in ctx_action.deps:
        out = tmp / aid.replace("/", "_")
        if aid.startswith("model-source/"):
            shutil.copytree(MODEL, out)
        else:
            out.mkdir()
            REGISTRY[graph.actions[aid].kind].run(graph.actions[aid].params, RunContext(out, {}, deps, log))
        deps[aid] = out
    context = tmp / "context"
    context.mkdir()
    image_context.KIND.run(ctx_action.params, RunContext(context, {}, deps, log))
    root = tmp / "image"
    for layer in sorted((context / "layers").iterdir()):
        shutil.copytree(layer, root, dirs_exist_ok=True)
    return root


def _stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    chunks = []
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for line in resp:
            line = line.strip()
            if not line:
                continue
            assert line.startswith(b"data: "), line
            if line == b"data: [DONE]":
                break
            chunks.append(json.loads(line[6:]))
    return chunks


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_the_boot_unit_starts_the_pair_and_a_stream_goes_through_it(tmp_path: Path) -> None:
    base = free_ports(range(12))
    if base is None:
        pytest.skip("no free range of ports on 127.0.0.1")
    spec = _spec(tmp_path, base)
    files = generate(spec)["h200"]
    script = write_script(files, tmp_path / "script")
    root = _image_root(spec, tmp_path)
    assert (root / "opt/kiln/models/chat/config.json").is_file()
    assert (root / "opt/kiln/llmapi/chat/disagg-config.yaml").is_file()

    # the boot unit: its ExecStart's arguments, the image the last deploy recorded
    unit = files["kiln-host-h200.service"].decode()
    [exec_start] = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/provision.sh")
    (tmp_path / "host").mkdir()
    host = Host(tmp_path / "host", json.loads(files["desired-state.json"]))
    host.state_dir.mkdir(parents=True)
    (host.state_dir / "image").write_text("serving:1\n")
    state = tmp_path / "docker.json"
    env = {"KILN_DOCKER": str(FAKES / "fake_docker.py"), "KILN_FAKE_DOCKER_STATE": str(state),
           "KILN_FAKE_DOCKER_LOG": str(tmp_path / "docker.jsonl"), "KILN_FAKE_DOCKER_EXEC_ROOT": str(root),
           "KILN_FAKE_DOCKER_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "KILN_GPU_ATTACH": "env",
           "KILN_READY_TIMEOUT": "280"}
    try:
        proc = host.run(script, *argv[1:], env=env)
        assert proc.returncode == 0, output(proc) + "".join(
            p.read_text(errors="replace")[-2000:] for p in (root / "logs").glob("*.log"))
        containers = json.loads(state.read_text())
        router = next(n for n in containers if n.endswith("-router"))
        assert containers[router]["workdir"] == "/opt/kiln/models"
        servers = [c for n, c in containers.items() if n != router]
        assert len(servers) == 2 and all(c["ipc_mode"] == c["pid_mode"] == "host" for c in servers)  # N5
        assert "kiln-h200-chat-router: ready after" in proc.stdout

        body = {"model": "chat", "prompt": PROMPT, "max_tokens": 6, "stream": True}
        chunks = _stream(f"http://127.0.0.1:{base}/v1/completions", body)
        streamed = [t for c in chunks for t in c["choices"][0]["token_ids"]]
        assert len(chunks) == 6 and len(streamed) == 6
        # the same prompt generated whole on the decode server
        whole = _post(f"http://127.0.0.1:{base + 6}/v1/completions", {**body, "stream": False})
        assert streamed == whole["choices"][0]["token_ids"]
        assert _get(f"http://127.0.0.1:{base + 3}/stats") == {"context_only": 1, "generation_only": 0, "whole": 0}
        assert _get(f"http://127.0.0.1:{base + 6}/stats") == {"context_only": 0, "generation_only": 1, "whole": 1}

        # again: the router now holds the prompt's blocks from the prefill server's KV-cache events
        again = _stream(f"http://127.0.0.1:{base}/v1/completions", body)
        assert [t for c in again for t in c["choices"][0]["token_ids"]] == streamed
        first, second = _get(f"http://127.0.0.1:{base}/stats")[:2]
        assert first["context"] == 0 and second["context"] >= 32, (first, second)

        # AIPerf, the benchmark `kiln tune` runs, streams completions through the router
        try:
            exe = aiperf_executable()
        except Unavailable as e:
            pytest.skip(f"AIPerf cannot be installed here: {e}")
        out = tmp_path / "aiperf"
        run = subprocess.run([exe, "profile", "--model", "chat", "--url", f"http://127.0.0.1:{base}",
                              "--endpoint-type", "completions", "--streaming",
                              "--tokenizer", str(root / "opt/kiln/models/chat"),
                              "--isl", "40", "--isl-stddev", "0", "--osl", "4", "--osl-stddev", "0",
                              "--extra-inputs", "ignore_eos:true", "--request-count", "4", "--concurrency", "1",
                              "--random-seed", "1", "--artifact-dir", str(out), "--ui", "none",
                              "--no-server-metrics", "--no-gpu-telemetry"],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        export = json.loads(next(out.rglob("profile_export_aiperf.json")).read_text(encoding="utf-8"))
        assert export["request_count"]["avg"] == 4 and export.get("error_request_count") is None, export
        assert export["time_to_first_token"]["avg"] > 0 and export["output_sequence_length"]["avg"] == 4
        assert len(_get(f"http://127.0.0.1:{base}/stats")) == 2 + 4  # every request went through the router
    finally:
        for c in (json.loads(state.read_text()) if state.exists() else {}).values():
            try:
                os.killpg(c["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
