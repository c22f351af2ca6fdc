"""The LLM-API options Kiln writes use only TensorRT-LLM 1.2 field names and values.

The field facts below are typed from ../shared/reference/trtllm-triton-facts.md §2 (LlmArgs,
KvCacheConfig, SchedulerConfig, CudaGraphConfig, MoeConfig, attention backends); KvCacheConfig and
QuantConfig are strict models there, so an unknown key would fail at load time on a GPU host.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler.actions import llmapi
from compiler.ir import ResolvedModel
from compiler.spec.models import Model


def options(model: Model) -> dict:
    return llmapi.options(ResolvedModel("m", model, None, ""))

TOP_LEVEL = {
    "tensor_parallel_size": int, "pipeline_parallel_size": int, "moe_expert_parallel_size": int,
    "max_batch_size": int, "max_num_tokens": int, "max_seq_len": int, "max_input_len": int,
    "max_beam_width": int, "enable_chunked_prefill": bool, "attn_backend": str, "enable_attention_dp": bool,
    "kv_cache_config": dict, "scheduler_config": dict, "cuda_graph_config": dict, "moe_config": dict,
}
KV_CACHE = {"free_gpu_memory_fraction": float, "enable_block_reuse": bool, "tokens_per_block": int, "dtype": str}
ATTN = {"TRTLLM", "VANILLA", "FLASHINFER", "FLASHINFER_STAR_ATTENTION"}
MOE = {"CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON"}
POLICIES = {"MAX_UTILIZATION", "GUARANTEED_NO_EVICT", "STATIC_BATCH"}
KV_DTYPES = {"auto", "fp8"}

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*/kiln.yaml"))


def _models() -> list[tuple[str, Model]]:
    out = []
    for path in EXAMPLES:
        data = YAML(typ="safe", pure=True).load(path.read_text())
        for name, m in data["models"].items():
            out.append((f"{path.parent.name}/{name}", Model.model_validate(m)))
    every_knob = {
        "source": {"path": "m"}, "quantization": {"weights": "fp8", "kv_cache": "fp8"},
        "parallelism": {"tp": 4, "pp": 2, "ep": 4, "attention_dp": True},
        "kernels": {"attention": "flashinfer", "moe": "deepgemm"},
        "runtime": {"kv_cache_memory_fraction": 0.85, "scheduler": "max_utilization", "chunked_prefill": True,
                    "block_reuse": False, "tokens_per_block": 64, "cuda_graph_batch_sizes": [8, 1, 4]},
    }
    out.append(("every-knob", Model.model_validate(every_knob)))
    return out


@pytest.mark.parametrize("name,model", _models(), ids=lambda v: v if isinstance(v, str) else "")
def test_options_use_only_known_fields(name: str, model: Model) -> None:
    opts = options(model)
    assert set(opts) <= set(TOP_LEVEL), set(opts) - set(TOP_LEVEL)
    for key, value in opts.items():
        assert isinstance(value, TOP_LEVEL[key]) and not (TOP_LEVEL[key] is int and isinstance(value, bool)), key
    assert set(opts["kv_cache_config"]) <= set(KV_CACHE)
    for key, value in opts["kv_cache_config"].items():
        assert isinstance(value, KV_CACHE[key]), key
    assert 0 < opts["kv_cache_config"]["free_gpu_memory_fraction"] <= 1
    assert opts["kv_cache_config"]["dtype"] in KV_DTYPES
    assert opts["attn_backend"] in ATTN
    assert set(opts["scheduler_config"]) == {"capacity_scheduler_policy"}
    assert opts["scheduler_config"]["capacity_scheduler_policy"] in POLICIES
    if "moe_config" in opts:
        assert set(opts["moe_config"]) == {"backend"} and opts["moe_config"]["backend"] in MOE
    if "cuda_graph_config" in opts:
        sizes = opts["cuda_graph_config"]["batch_sizes"]
        assert set(opts["cuda_graph_config"]) == {"batch_sizes"} and sizes == sorted(sizes)


def test_every_knob_reaches_its_field() -> None:
    opts = dict(_models())["every-knob"]
    opts = options(opts)
    assert opts["tensor_parallel_size"] == 4 and opts["pipeline_parallel_size"] == 2
    assert opts["moe_expert_parallel_size"] == 4 and opts["enable_attention_dp"] is True
    assert opts["attn_backend"] == "FLASHINFER" and opts["moe_config"] == {"backend": "DEEPGEMM"}
    assert opts["kv_cache_config"] == {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": False,
                                       "tokens_per_block": 64, "dtype": "fp8"}
    assert opts["scheduler_config"] == {"capacity_scheduler_policy": "MAX_UTILIZATION"}
    assert opts["enable_chunked_prefill"] is True
    assert opts["cuda_graph_config"] == {"batch_sizes": [1, 4, 8]}
