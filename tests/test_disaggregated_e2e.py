"""End to end on a CPU: what Kiln writes for a disaggregated model drives a prefill server, a decode
server and the router in front (tests/disagg_standin.py, a stand-in for TensorRT-LLM's, which needs
GPUs), and a request is prefilled on one server and decoded on the other with the same tokens the
model generates whole."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from compiler.actions import disaggregated as kind
from compiler.actions.base import LowerContext
from compiler.store.digests import DigestCache
from compiler.graph.kinds import RunContext
from compiler.pipeline import validate_text
from tests.services import free_ports

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "disaggregated" / "kiln.yaml"
MODEL = ROOT / "examples" / "quickstart" / "model"
STANDIN = ROOT / "tests" / "disagg_standin.py"
READY_S = 600  # three processes loading on a busy machine


def _free_base() -> int:
    """A port P with P, P+3 and P+6 free (the router and the first server of each role)."""
    base = free_ports((0, 3, 6))
    if base is None:
        pytest.fail("no free ports")
    return base


def _spec(base: int) -> str:
    """The example with one prefill and one decode server, short limits, the model's port at `base`."""
    text = EXAMPLE.read_text()
    text = text.replace("      - {index: 1, serves: chat, role: prefill}\n", "")
    text = text.replace("max_input_len: 4096, max_seq_len: 5120", "max_input_len: 64, max_seq_len: 128")
    text = text.replace("    workload: {input_tokens: 3000, output_tokens: 300, requests_per_second: 4}\n", "")
    text = text.replace("    sla: {ttft_ms: 2000, tpot_ms: 40, percentile: p50}\n", "")
    text = text.replace("          max_tokens_in_buffer: 4096\n", "")
    return text.replace("      runtime: trtllm-serve\n", f"      runtime: trtllm-serve\n      ports: {{http: {base}}}\n")


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {}


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _wait(urls: list[str], procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + READY_S
    pending = list(urls)
    while pending:
        for p in procs:
            assert p.poll() is None, f"a stand-in process exited with {p.returncode}"
        try:
            if _get(pending[0])[0] == 200:
                pending.pop(0)
                continue
        except OSError:
            pass
        assert time.monotonic() < deadline, f"not ready: {pending}"
        time.sleep(0.5)


def test_a_request_is_prefilled_on_one_server_and_decoded_on_the_other(tmp_path: Path) -> None:
    base = _free_base()
    v = validate_text(_spec(base), EXAMPLE.parent)
    assert v.ok, [d.message for d in v.diagnostics]
    [action] = kind.KIND.lower(LowerContext(v.resolved, DigestCache(None)))
    out = tmp_path / "disagg-options"
    out.mkdir()
    kind.KIND.run(action.params, RunContext(out, {}, {}, logging.getLogger("test")))
    config = yaml.safe_load((out / "disagg-config.yaml").read_text())
    assert config["port"] == base
    assert config["context_servers"]["urls"] == [f"localhost:{base + 3}"]
    assert config["generation_servers"]["urls"] == [f"localhost:{base + 6}"]
    config["hostname"] = "127.0.0.1"  # the test binds loopback only; Kiln's router listens on all interfaces
    (tmp_path / "router.yaml").write_text(yaml.safe_dump(config))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, str(STANDIN), "server", "--role", "context", "--model", str(MODEL),
                          "--options", str(out / "prefill" / "llm-api-options.yaml"), "--port", str(base + 3)],
                         env=env),
        subprocess.Popen([sys.executable, str(STANDIN), "server", "--role", "generation", "--model", str(MODEL),
                          "--options", str(out / "decode" / "llm-api-options.yaml"), "--port", str(base + 6)],
                         env=env),
        subprocess.Popen([sys.executable, str(STANDIN), "router", "--config", str(tmp_path / "router.yaml")], env=env),
    ]
    try:
        ctx, gen, router = (f"http://127.0.0.1:{p}" for p in (base + 3, base + 6, base))
        _wait([f"{ctx}/health", f"{gen}/health", f"{router}/health"], procs)
        prompt = list(range(5, 30))
        code, disagg = _post(f"{router}/v1/completions", {"model": "chat", "prompt": prompt, "max_tokens": 8})
        assert code == 200, disagg
        code, whole = _post(f"{gen}/v1/completions", {"model": "chat", "prompt": prompt, "max_tokens": 8})
        assert code == 200, whole
        assert disagg["choices"][0]["token_ids"] == whole["choices"][0]["token_ids"]
        assert len(disagg["choices"][0]["token_ids"]) == 8
        # the prefill happened on the context server, the decode on the generation server
        assert _get(f"{ctx}/stats")[1] == {"context_only": 1, "generation_only": 0, "whole": 0}
        assert _get(f"{gen}/stats")[1] == {"context_only": 0, "generation_only": 1, "whole": 1}
        # the transfer buffer Kiln sized (the longest prompt, 64 tokens) refuses a longer one
        code, refused = _post(f"{router}/v1/completions", {"model": "chat", "prompt": list(range(5, 105)),
                                                           "max_tokens": 4})
        assert code == 400 and "max_tokens_in_buffer 64" in refused["error"]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
