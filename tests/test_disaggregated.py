"""Disaggregated prefill/decode serving: the facts file, the roles in the IR and the capacity figures,
and the checks on specs that the case files (tests/cases/disaggregated/) do not pin down."""

from __future__ import annotations

import json
import re
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
            "          ucx: {tls: [cuda_copy, cuda_ipc, rc], net_devices: [mlx5_0:1], interface: eth0}",
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
    # the plan counts a node pool's servers per node, and Dynamo's frontend routes
    from compiler.ir.role_capacity import roles_rows

    [row] = roles_rows(v.resolved)
    assert {r["role"]: r["servers"] for r in row["roles"]} == {"prefill": 4, "decode": 2}
    assert row["router"]["runs"] == "dynamo-frontend" and row["router"]["host"] is None


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
    from compiler.store.digests import DigestCache
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


# --- `kiln plan`: the roles, the router and each role's capacity ------------------------------------------


def _plan(spec: Path, store: Path, capsys, fmt: str = "text") -> str:
    from compiler.cli import main

    main(["plan", str(spec), "--store", str(store), "--format", fmt])
    return capsys.readouterr().out


def test_the_plan_labels_each_unit_with_its_role_and_lists_the_router(tmp_path: Path, capsys) -> None:
    text = _plan(EXAMPLE, tmp_path / "store", capsys)
    # the host disruptions, the capacity and the estimate tables say which role a unit serves
    assert "h200 GPU 0: serving-change: nothing -> chat (prefill)" in text
    assert "h200 GPU 4: serving-change: nothing -> chat (decode) (GPUs 4,5,6,7)" in text
    assert re.search(r"^h200/gpu0 \(prefill\) +chat +1 GPU ", text, re.M), text
    assert re.search(r"^h200/gpu4\+5\+6\+7 \(decode\) +chat +tp4 x pp1 \(4 GPUs\)", text, re.M), text
    assert re.search(r"^h200/gpu0 \(prefill\) \(\+1 alike\) +chat ", text, re.M), text
    section = text.split("\nDisaggregated roles\n", 1)[1]
    assert re.search(r"^chat +prefill +2 +tp1 x pp1 +h200/gpu0, h200/gpu1 +\d+ ms per prompt", section, re.M), section
    assert re.search(r"^chat +decode +1 +tp4 x pp1 +h200/gpu4\+5\+6\+7 +batch \d+ at ", section, re.M), section
    assert "chat: router: trtllm-serve disaggregated on h200:8000 (KV-aware)" in section
    assert "chat: at 4 requests/s: recommended 1 prefill : 1 decode (placed 2 : 1)" in section
    md = _plan(EXAMPLE, tmp_path / "store", capsys, "markdown")
    assert "### Disaggregated roles" in md and "| chat | prefill | 2 | tp1 x pp1 |" in md
    assert "| h200 | 0 | serving-change | nothing -> chat (prefill) |" in md


def _recommended(message: str) -> tuple[int, int]:
    m = re.search(r"recommended: (\d+) prefill to (\d+) decode", message)
    assert m, message
    return int(m.group(1)), int(m.group(2))


def test_the_plan_recommends_what_k462_says(tmp_path: Path, capsys) -> None:
    """At ten times the example's rate K462 warns; the plan's section gives the same counts, the
    same short roles and the same ratio, in text and json (both come from one sizing)."""
    spec = tmp_path / "kiln.yaml"
    spec.write_text(_example(**{"requests_per_second: 4": "requests_per_second: 40"}))
    busy = validate_text(spec.read_text(), EXAMPLE.parent)
    [d] = [d for d in busy.diagnostics if d.code == "K462"]
    prefill, decode = _recommended(d.message)
    doc = json.loads(_plan(spec, tmp_path / "store", capsys, "json"))
    [row] = doc["disaggregated"]
    assert row["recommended"] == {"prefill": prefill, "decode": decode}
    assert row["short"] == ["prefill", "decode"] and "prefill and decode" in d.message
    assert {r["role"]: r["needed"] for r in row["roles"]} == {"prefill": prefill, "decode": decode}
    assert [r["basis"] for r in row["roles"]] == list(d.notes)
    assert row["router"] == {"host": "h200", "port": 8000, "kv_aware": True, "runs": "trtllm-serve disaggregated"}
    text = _plan(spec, tmp_path / "store", capsys)
    assert f"recommended {prefill} prefill : {decode} decode (placed 2 : 1); short of prefill and decode servers" in text
    # at the example's rate the plan still recommends a ratio, with nothing short (and no K462)
    doc = json.loads(_plan(EXAMPLE, tmp_path / "store", capsys, "json"))
    assert doc["disaggregated"][0]["short"] == [] and doc["disaggregated"][0]["recommended"] is not None


def test_without_a_rate_the_plan_shows_the_roles_but_no_ratio(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "kiln.yaml"
    spec.write_text(_example(**{", requests_per_second: 4": ""}))
    text = _plan(spec, tmp_path / "store", capsys)
    section = text.split("\nDisaggregated roles\n", 1)[1]
    assert "chat: recommended ratio: - (no workload.requests_per_second and sla to size them against)" in section
    assert re.search(r"^chat +decode +1 +tp4 x pp1 +h200/gpu4\+5\+6\+7 +- +-$", section, re.M), section


def test_a_ttft_no_prefill_server_meets_is_said_in_every_format(tmp_path: Path, capsys) -> None:
    """Issue 36: at ttft_ms 50 one prompt alone is over the target; text and markdown formatted a None."""
    spec = tmp_path / "kiln.yaml"
    spec.write_text(_example(**{"ttft_ms: 2000": "ttft_ms: 50"}))
    for fmt in ("text", "markdown"):
        text = _plan(spec, tmp_path / "store", capsys, fmt)
        assert "over the sla's ttft_ms alone" in text and "sla unreachable" in text, text
    [row] = json.loads(_plan(spec, tmp_path / "store", capsys, "json"))["disaggregated"]
    prefill = next(r for r in row["roles"] if r["role"] == "prefill")
    assert prefill["needed"] == -1 and prefill["per_server"]["busy_max"] is None


def test_a_plan_without_disaggregated_serving_has_no_roles(tmp_path: Path, capsys) -> None:
    quickstart = ROOT / "examples" / "quickstart" / "kiln.yaml"
    text = _plan(quickstart, tmp_path / "store", capsys)
    assert "Disaggregated roles" not in text and "(prefill)" not in text and "(decode)" not in text
    doc = json.loads(_plan(quickstart, tmp_path / "store", capsys, "json"))
    assert "disaggregated" not in doc and all("role" not in r for r in doc["capacity"]["units"])


def test_a_role_change_is_a_serving_change_of_its_gpus() -> None:
    """A GPU that moves from prefill to decode gets another server: the host plan says so."""
    from compiler.actions.gpustate import desired_state
    from compiler.targets.hosts.hostplan import disruptions

    v = validate_path(EXAMPLE)
    before = desired_state(v.resolved.hosts["h200"])
    assert [(g.index, g.role) for g in before.gpus] == [(0, "prefill"), (1, "prefill"), (4, "decode"),
                                                          (5, "decode"), (6, "decode"), (7, "decode")]
    after = before.model_copy(update={"gpus": [g.model_copy(update={"role": "decode"}) if g.index == 1 else g
                                               for g in before.gpus]})
    [d] = disruptions(before, after)
    assert (d.gpu_index, d.kind, d.detail) == (1, "serving-change", "chat (prefill) -> chat (decode)")
    assert disruptions(before, before) == []
