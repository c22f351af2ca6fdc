"""The defects of the second serving review (shared reference serving-review-2026-12-05.md,
section 4) in what disaggregated serving writes: each test names its defect and fails on the code
before the fix. The checks' defects (N6, N7's warning, N8, N12) are case files under
tests/cases/disaggregated/; the hosts' (N3, N5) are in tests/test_disaggregated_hosts.py; N10 in
tests/test_disaggregated_emit.py."""

from __future__ import annotations

from pathlib import Path

from compiler.actions import disaggregated as emit
from compiler.runtimes import WORKER
from compiler.catalog import disaggregated as facts
from compiler.pipeline import validate_text

from .test_llmapi_options import FIELDS, check

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "disaggregated" / "kiln.yaml"


def _model(**edits: str):
    text = EXAMPLE.read_text()
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    v = validate_text(text, EXAMPLE.parent)
    assert not [d for d in v.diagnostics if d.severity.name == "ERROR"], [d.message for d in v.diagnostics]
    return v.resolved.models["chat"]


def test_n2_a_kv_aware_router_gets_kv_events_from_both_roles() -> None:
    """The kv_cache_aware router polls /kv_cache_events; a server buffers events only with
    kv_cache_config.event_buffer_max_size > 0 (default 0), and upstream's cache-aware configs set
    1024 with block reuse on both roles."""
    rm = _model()
    for role in emit.ROLES:
        opts = emit.role_options(rm, role, "1.2.1")
        check(FIELDS, opts, f"{role}: ")
        assert opts["kv_cache_config"]["event_buffer_max_size"] == 1024
        assert opts["kv_cache_config"]["enable_block_reuse"] is True
    round_robin = _model(**{"router: {kv_aware: true}": "router: {kv_aware: false}"})
    for role in emit.ROLES:
        assert "event_buffer_max_size" not in emit.role_options(round_robin, role, "1.2.1")["kv_cache_config"]


def test_n4_dynamo_workers_publish_kv_events_where_the_frontend_routes_by_kv() -> None:
    flag = facts.fact("kv_events", "dynamo")["worker_flag"]
    assert flag == "--publish-events-and-metrics"
    for role in emit.ROLES:
        assert WORKER.role_args(role, kv_aware=True) == ["--disaggregation-mode", role, flag]
        assert WORKER.role_args(role, kv_aware=False) == ["--disaggregation-mode", role]


def test_n7_the_transceiver_interface_reaches_every_servers_environment() -> None:
    rm = _model(**{"ucx: {tls: [cuda_copy, cuda_ipc, tcp]}": "ucx: {tls: [cuda_copy, cuda_ipc, tcp], interface: eth0}"})
    env = emit.ucx_environment(rm)
    assert env["TRTLLM_UCX_INTERFACE"] == "eth0" and env["TRTLLM_NIXL_INTERFACE"] == "eth0"
    assert "TRTLLM_UCX_INTERFACE" not in emit.ucx_environment(_model())


def test_n7_an_interface_name_longer_than_linux_allows_is_refused() -> None:
    text = EXAMPLE.read_text().replace("ucx: {tls: [cuda_copy, cuda_ipc, tcp]}",
                                       "ucx: {tls: [cuda_copy, cuda_ipc, tcp], interface: a-name-of-sixteen}")
    v = validate_text(text, EXAMPLE.parent)
    assert [d.code for d in v.diagnostics if d.severity.name == "ERROR"] == ["K106"]  # a malformed value


def test_n9_decode_servers_keep_cuda_graphs_up_to_their_batch() -> None:
    """Without listed sizes the model writes `cuda_graph_config: null` (no graphs anywhere); decode
    servers, where graphs pay most, capture up to their batch with padding (Dynamo's decode.yaml)."""
    rm = _model()
    decode = emit.role_options(rm, "decode", "1.2.1")
    assert decode["cuda_graph_config"] == {"max_batch_size": 64, "enable_padding": True}
    check(FIELDS, decode, "decode: ")
    assert emit.role_options(rm, "prefill", "1.2.1")["cuda_graph_config"] is None
    listed = _model(**{"runtime: {kv_cache_memory_fraction: 0.9}":
                       "runtime: {kv_cache_memory_fraction: 0.9, cuda_graph_batch_sizes: [1, 8, 32]}"})
    assert emit.role_options(listed, "decode", "1.2.1")["cuda_graph_config"] == {
        "batch_sizes": [1, 8, 32], "enable_padding": True}


def _resolved(**edits: str):
    text = EXAMPLE.read_text()
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    v = validate_text(text, EXAMPLE.parent)
    assert v.resolved is not None
    return v.resolved


def test_n11_the_memory_budget_holds_each_servers_transfer_buffers() -> None:
    """Every server pre-allocates a send and a receive buffer of max_tokens_in_buffer tokens of its
    own KV cache before the KV cache is sized (CacheTransBufferManager::preAllocBufferSize)."""
    from compiler.capacity.memory import kv_bytes_per_token

    ir = _resolved()
    rm = ir.models["chat"]
    for u in ir.units:
        cap = u.figures.capacity
        [term] = [t for t in cap.reserve if t.name == "kv-transfer"]
        tp = 4 if u.role == "decode" else 1
        assert term.bytes == 2 * 4096 * kv_bytes_per_token(rm.arch, rm.formats.storage_kv, tp=tp, pp=1,
                                                           seq_len=5120)
        assert cap.reserve_bytes == sum(t.bytes for t in cap.reserve)


def test_n11_ttft_includes_the_kv_transfer_over_the_link_between_the_roles() -> None:
    from compiler.capacity.memory import kv_bytes_per_token
    from compiler.ir.role_capacity import role_capacity

    ir = _resolved()
    rm = ir.models["chat"]
    prefill = role_capacity(ir.spec, ir, "chat").role("prefill")
    moved = 3000 * kv_bytes_per_token(rm.arch, rm.formats.storage_kv)  # the workload's prompt, whole model
    gpu = ir.hosts["h200"].gpu
    assert abs(prefill.transfer_ms - moved / (gpu.nvlink_gbps / 2 * 1e9) * 1e3) < 1e-6
    assert "to move its KV cache" in prefill.note
    # decode on another host: the transfer crosses the network (an assumed RDMA NIC), slower than NVLink
    two = _resolved(**{"      - {index: [4, 5, 6, 7], serves: chat, role: decode}\n":
                       "  h200-b:\n    gpu: H200-SXM-141GB\n    count: 8\n    gpus:\n"
                       "      - {index: [4, 5, 6, 7], serves: chat, role: decode}\n"})
    across = role_capacity(two.spec, two, "chat").role("prefill")
    assert across.transfer_ms > prefill.transfer_ms
    assert abs(across.transfer_ms - moved / (facts.fact("transfer_time")["across_hosts_gbps"] * 1e9) * 1e3) < 1e-6
