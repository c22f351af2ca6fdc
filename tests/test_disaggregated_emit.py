"""What disaggregated serving writes, held to the pinned TensorRT-LLM: each role's LLM-API options
use only LlmArgs fields and values (compiler/actions/data/trtllm_llmapi.json) with the
cache_transceiver_config fields of the pinned line (catalog/data/disaggregated.json), and the
disaggregated server's config uses only the keys its parser reads."""

from __future__ import annotations

import json
from pathlib import Path

from compiler.catalog import disaggregated as facts
from compiler.pipeline import validate_path, validate_text
from compiler.actions import disaggregated as emit
from compiler.runtimes import WORKER

from .test_llmapi_options import FIELDS, check

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "disaggregated" / "kiln.yaml"


def _ir(text: str | None = None):
    v = validate_text(text, EXAMPLE.parent) if text is not None else validate_path(EXAMPLE)
    assert not [d for d in v.diagnostics if d.severity.name == "ERROR"], [d.message for d in v.diagnostics]
    return v.resolved


def test_role_options_use_only_fields_of_the_pinned_version() -> None:
    ir = _ir()
    version = ir.spec.toolchain.tensorrt_llm
    line = facts.transceiver(version)
    for role in emit.ROLES:
        opts = emit.role_options(ir.models["chat"], role, version)
        check(FIELDS, opts, f"{role}: ")
        assert set(opts["cache_transceiver_config"]) <= set(line.fields)
        assert opts["cache_transceiver_config"]["backend"] in line.backends


def test_role_options_carry_each_roles_parallelism_and_limits() -> None:
    ir = _ir()
    rm = ir.models["chat"]
    p = emit.role_options(rm, "prefill", "1.2.1")
    d = emit.role_options(rm, "decode", "1.2.1")
    assert (p["tensor_parallel_size"], d["tensor_parallel_size"]) == (1, 4)
    assert (p["max_batch_size"], d["max_batch_size"]) == (4, 64)
    # the model's settings where the role says nothing; one block size and one buffer for both
    assert p["max_seq_len"] == d["max_seq_len"] == 5120
    assert p["kv_cache_config"]["tokens_per_block"] == d["kv_cache_config"]["tokens_per_block"] == 32
    assert p["cache_transceiver_config"] == d["cache_transceiver_config"] == \
        {"backend": "UCX", "max_tokens_in_buffer": 4096}
    # 1.2 runs no overlap scheduler on context servers; decode keeps TensorRT-LLM's default (on)
    assert p["disable_overlap_scheduler"] is True and "disable_overlap_scheduler" not in d
    assert "disable_overlap_scheduler" not in emit.role_options(rm, "prefill", "1.3.0rc29")


def test_server_config_uses_only_the_keys_the_parser_reads() -> None:
    ir = _ir()
    config = emit.server_config(ir, "chat")
    keys = facts.server_config_keys()
    assert set(config) <= keys["top_level"]
    for section in ("context_servers", "generation_servers"):
        servers = config[section]
        assert set(servers) <= keys["servers"]
        assert set(servers["router"]) <= keys["router"] and servers["router"]["type"] in keys["router_types"]
        # the parser refuses a url count other than num_instances
        assert len(servers["urls"]) == servers["num_instances"] >= 1
        assert all(u.count(":") == 1 for u in servers["urls"])
    assert config["port"] == 8000
    assert config["context_servers"]["urls"] == ["localhost:8003", "localhost:8006"]
    assert config["generation_servers"]["urls"] == ["localhost:8009"]
    # the router hashes in the workers' block size (its own default is 32 whatever the workers use),
    # and scores each role's load against that role's batch (its own default is 64: N10)
    assert config["context_servers"]["router"] == {"type": "kv_cache_aware", "tokens_per_block": 32,
                                                   "max_batch_size": 4, "max_num_tokens": 8192}
    assert config["generation_servers"]["router"]["max_batch_size"] == 64


def test_server_config_reaches_other_hosts_by_name_and_follows_the_block_size() -> None:
    text = EXAMPLE.read_text().replace("runtime: {tokens_per_block: 32}", "runtime: {tokens_per_block: 64}")
    text = text.replace("      - {index: [4, 5, 6, 7], serves: chat, role: decode}\n",
                        "  h200-b:\n    gpu: H200-SXM-141GB\n    count: 8\n    gpus:\n"
                        "      - {index: [4, 5, 6, 7], serves: chat, role: decode}\n")
    text = text.replace("ucx: {tls: [cuda_copy, cuda_ipc, tcp]}", "ucx: {tls: [cuda_copy, cuda_ipc, rc], "
                                                                   "net_devices: [mlx5_0:1]}")
    ir = _ir(text)
    config = emit.server_config(ir, "chat")
    assert config["generation_servers"]["urls"] == ["h200-b:8003"]
    assert config["context_servers"]["urls"] == ["localhost:8003", "localhost:8006"]
    assert config["generation_servers"]["router"]["tokens_per_block"] == 64
    assert emit.role_options(ir.models["chat"], "decode", "1.2.1")["cache_transceiver_config"][
        "max_tokens_in_buffer"] == 4096
    assert emit.ucx_environment(ir.models["chat"]) == {"UCX_TLS": "cuda_copy,cuda_ipc,rc",
                                                       "UCX_NET_DEVICES": "mlx5_0:1"}


def test_dynamo_pieces_follow_the_facts() -> None:
    """Role components are typed prefill/decode (what the planner scales), the frontend routes by KV
    in the workers' block size, and the planner's config uses only keys the facts list."""
    text = EXAMPLE.read_text().replace(
        "        router: {kv_aware: true}",
        "        router: {kv_aware: true}\n        planner: {image: nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.3.1@sha256:"
        + "0" * 64 + ", max_gpus: 16}")
    rm = validate_text(text, EXAMPLE.parent).resolved.models["chat"]
    assert [emit.component_type(r) for r in emit.ROLES] == ["prefill", "decode"]
    assert WORKER.role_args("decode") == ["--disaggregation-mode", "decode"]
    assert emit.frontend_args(rm) == ["--router-mode", "kv", "--kv-cache-block-size", "32"]
    config = emit.planner_config(rm)
    assert set(config) <= set(facts.fact("dynamo_planner")["config_keys"])
    assert (config["ttft_ms"], config["itl_ms"], config["max_gpu_budget"]) == (2000, 40, 16)
    assert (config["prefill_engine_num_gpu"], config["decode_engine_num_gpu"]) == (1, 4)


def test_the_action_writes_each_roles_options_and_the_routers_config(tmp_path) -> None:
    """`disagg-options/<model>` as the executor runs it: the files parse back to what the pure
    functions give, and the same spec gives the same bytes."""
    import logging

    import yaml

    from compiler.actions import disaggregated as kind
    from compiler.actions.base import LowerContext
    from compiler.store.digests import DigestCache
    from compiler.graph.kinds import RunContext

    ir = _ir()
    [action] = kind.KIND.lower(LowerContext(ir, DigestCache(None)))
    assert action.id == "disagg-options/chat"
    outs = []
    for n in range(2):
        out = tmp_path / str(n)
        out.mkdir()
        kind.KIND.run(action.params, RunContext(out, {}, {}, logging.getLogger("test")))
        outs.append({p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert outs[0] == outs[1]
    assert sorted(outs[0]) == ["decode/llm-api-options.yaml", "disagg-config.yaml", "environment.json",
                               "prefill/llm-api-options.yaml"]
    for role in emit.ROLES:
        assert yaml.safe_load(outs[0][f"{role}/llm-api-options.yaml"]) == emit.role_options(
            ir.models["chat"], role, "1.2.1")
    assert yaml.safe_load(outs[0]["disagg-config.yaml"]) == emit.server_config(ir, "chat")
    assert json.loads(outs[0]["environment.json"]) == {"UCX_TLS": "cuda_copy,cuda_ipc,tcp"}
