"""Disaggregated prefill/decode serving: the facts file, the roles in the IR and the capacity figures,
and the checks on specs that the case files (tests/cases/disaggregated/) do not pin down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from compiler import resources
from compiler.catalog import disaggregated as facts
from compiler.catalog import dynamo
from compiler.ir.disaggregated import buffer_tokens
from compiler.pipeline import validate_path, validate_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "disaggregated" / "kiln.yaml"
STATUSES = {"verified", "inferred", "cited"}


def _records(node, path=()):
    """Every dict of the facts file that states a fact (it has a `source`)."""
    if isinstance(node, dict):
        if "source" in node:
            yield path, node
        for k, v in node.items():
            yield from _records(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _records(v, path + (i,))


def test_every_fact_has_a_source_and_a_status() -> None:
    table = json.loads(resources.read_data("catalog", "data", "disaggregated.json"))
    found = list(_records(table))
    assert len(found) >= 12
    for path, rec in found:
        assert rec["status"] in STATUSES, path
        assert len(rec["source"]) > 20, path


def test_the_pinned_lines_have_transceiver_facts() -> None:
    """The TensorRT-LLM this project pins (1.2.x, in the examples) and the one each Dynamo release
    runs must have a transceiver record, or K861/K862 would pass anything silently."""
    pinned = {facts.release_line(yaml.safe_load(p.read_text())["toolchain"]["tensorrt_llm"])
              for p in (ROOT / "examples").glob("*/kiln.yaml")}
    lines = pinned | {facts.release_line(dynamo.release(v + ".0").tensorrt_llm) for v in dynamo.known_lines()}
    assert "1.2" in lines
    for line in sorted(lines):
        t = facts.transceiver(line + ".0")
        assert t is not None, line
        assert t.default_backend.upper() in {b.upper() for b in t.backends}
        assert {"backend", "max_tokens_in_buffer"} <= set(t.fields)
    assert facts.transceiver("1.2.1").backends == ("DEFAULT", "UCX", "NIXL", "MPI")
    assert facts.context_needs_overlap_off("1.2.1") is True
    assert facts.context_needs_overlap_off("1.3.0rc29") is False


def test_server_config_keys_cover_what_kiln_writes() -> None:
    keys = facts.server_config_keys()
    assert {"hostname", "port", "context_servers", "generation_servers"} <= keys["top_level"]
    assert {"num_instances", "urls", "router"} <= keys["servers"]
    assert "kv_cache_aware" in keys["router_types"] and "tokens_per_block" in keys["router"]


def test_the_example_validates_clean() -> None:
    v = validate_path(EXAMPLE)
    assert list(v.diagnostics) == [], [(d.code, d.message) for d in v.diagnostics]


def test_roles_reach_the_units_and_their_capacity_figures() -> None:
    """Each server is sized with its role's parallelism and limits, not the model's."""
    v = validate_path(EXAMPLE)
    units = {u.id: u for u in v.resolved.units}
    prefill, decode = units["h200/gpu0"], units["h200/gpu4+5+6+7"]
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert prefill.figures is not None and decode.figures is not None
    assert prefill.figures.gpus == 1 and decode.figures.gpus == 4
    assert prefill.figures.decode.batch <= 4  # the prefill role's max_batch_size
    assert decode.figures.decode.batch > 4


def _example(**edits) -> str:
    text = EXAMPLE.read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    return text


def test_role_capacity_follows_the_rate() -> None:
    """At the example's rate the roles suffice; ten times the rate needs more of both, and the
    message gives the counts; one decode server more than needed removes the decode shortfall."""
    base = EXAMPLE.parent
    clean = validate_text(EXAMPLE.read_text(), base)
    assert "K462" not in {d.code for d in clean.diagnostics}
    busy = validate_text(_example(**{"requests_per_second: 4": "requests_per_second: 40"}), base)
    [d] = [d for d in busy.diagnostics if d.code == "K462"]
    assert "prefill and decode" in d.message and "recommended:" in d.message
    assert any(n.startswith("prefill:") for n in d.notes) and any(n.startswith("decode:") for n in d.notes)


def test_kubernetes_roles_with_dynamo_and_a_planner_raise_no_disaggregated_rule() -> None:
    text = _example(**{
        "  h200:\n    gpu": "  h200:\n    deploy: kubernetes\n    node_pool: {nodes: 2}\n    gpu",
        "      runtime: trtllm-serve\n": "",
        "        router: {kv_aware: true}":
            "        router: {kv_aware: true}\n        planner: {image: nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.3.1@sha256:0000000000000000000000000000000000000000000000000000000000000000, min_replicas: 1, max_gpus: 16}",
        "          ucx: {tls: [cuda_copy, cuda_ipc, tcp]}":
            "          ucx: {tls: [cuda_copy, cuda_ipc, rc], net_devices: [mlx5_0:1]}",
    }) + ("kubernetes:\n  runtime: dynamo\n  dynamo: {version: \"1.3.0\"}\n"
          "image:\n  repository: registry.example.com/x/disagg\n")
    text = text.replace('tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.3.0rc19"')
    v = validate_text(text, EXAMPLE.parent)
    assert v.resolved is not None and [u.role for u in v.resolved.units] == ["prefill", "prefill", "decode"]
    codes = {d.code for d in v.diagnostics}
    assert not {c for c in codes if c[2:3] == "6"}, [(d.code, d.message) for d in v.diagnostics]
    # each role is a workload of its own on the pool, replicated on every node
    workloads = {w.name: (w.role, w.gpus, w.replicas) for w in v.resolved.pools["h200"].workloads}
    assert workloads == {"chat-h200-prefill": ("prefill", 1, 4), "chat-h200-decode": ("decode", 4, 2)}


@pytest.mark.parametrize("given, block, expected", [(None, 32, 4000), (None, 64, 4032), (None, 128, 4096),
                                                     (3000, 32, 3000)])
def test_buffer_tokens_default_is_the_longest_prompt_in_whole_blocks(given, block, expected) -> None:
    from compiler.spec.models import Model

    m = Model.model_validate({
        "source": {"path": "m"}, "limits": {"max_input_len": 4000, "max_seq_len": 8192},
        "runtime": {"tokens_per_block": block},
        "serving": {"runtime": "trtllm-serve", "disaggregated": {"kv_transfer": {"max_tokens_in_buffer": given}}
                    if given else {}}})
    assert buffer_tokens(m, m.serving.disaggregated) == expected
    assert expected % block == 0 or given is not None


def test_the_hosts_example_builds_servers_and_router_and_k164_is_retired() -> None:
    """K164 refused disaggregated serving on hosts until provision.sh started it: lowering now gives
    the host script each role's servers and the router, and K164 is registered but raised by nothing."""
    from compiler.checks import get_rule
    from compiler.graph.inputs import DigestCache
    from compiler.lower import lower

    v = validate_path(EXAMPLE)
    graph = lower(v, DigestCache(None))
    assert not [d for d in v.diagnostics if d.code == "K164"]
    params = graph.actions["host-script/h200"].params
    assert [(u.id, u.role) for u in params.units] == [("h200/gpu0", "prefill"), ("h200/gpu1", "prefill"),
                                                      ("h200/gpu4+5+6+7", "decode")]
    assert [(r.id, r.port, r.serving.runtime) for r in params.routers] == [
        ("h200/chat-router", 8000, "trtllm-serve-disaggregated")]
    assert get_rule("K164").doc().startswith("Retired")
