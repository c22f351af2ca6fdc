"""The LLM-API options Kiln writes use only TensorRT-LLM 1.2 field names and values.

The fields, their types and their choices are data with their sources
(compiler/actions/data/trtllm_llmapi.json: LlmArgs, KvCacheConfig, SchedulerConfig, CudaGraphConfig,
MoeConfig); KvCacheConfig and the other nested configs are strict models there, so an unknown key
would fail at load time on a GPU host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler.actions import llmapi
from compiler.ir import ResolvedModel
from compiler.serving import triton as tr
from compiler.spec.models import Model

FIELDS = json.loads((Path(__file__).parents[1] / "compiler" / "actions" / "data" / "trtllm_llmapi.json")
                    .read_text(encoding="utf-8"))["llm_args"]
KINDS = {"int": int, "bool": bool, "str": str, "float": float, "dict": dict, "list": list}


def options(model: Model) -> dict:
    return llmapi.options(ResolvedModel("m", model, None, ""))


def check(fields: dict, opts: dict, where: str = "") -> None:
    assert set(opts) <= set(fields), set(opts) - set(fields)
    for key, value in opts.items():
        spec = fields[key]
        if value is None:
            assert spec.get("nullable"), f"{where}{key}"
            continue
        kind = KINDS[spec["type"]]
        assert isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool)), f"{where}{key}"
        assert value in spec.get("values", [value]), f"{where}{key}={value!r}"
        if "fields" in spec:
            check(spec["fields"], value, f"{where}{key}.")


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
    check(FIELDS, opts)
    assert 0 < opts["kv_cache_config"]["free_gpu_memory_fraction"] <= 1
    assert set(opts["scheduler_config"]) == {"capacity_scheduler_policy"}
    if opts["cuda_graph_config"] is not None:
        sizes = opts["cuda_graph_config"]["batch_sizes"]
        assert set(opts["cuda_graph_config"]) == {"batch_sizes", "enable_padding"} and sizes == sorted(sizes)
        # graphs are keyed by the exact batch size: without padding a batch between two sizes runs eagerly
        assert opts["cuda_graph_config"]["enable_padding"] is True


@pytest.mark.parametrize("sizes", [None, [1, 2, 4]], ids=["unset", "listed"])
def test_cuda_graphs_mean_the_same_on_both_targets(sizes) -> None:
    """Unset: no graphs on either target (TorchLlmArgs would default to CudaGraphConfig(), graphs on,
    so the options say null; the engine backend's cuda_graph_mode defaults to false). Listed: graphs
    for exactly those sizes on the llmapi target; the engine target refuses a list (K603) and its
    mode follows it."""
    model = Model.model_validate({"source": {"path": "m"}, "runtime": {"cuda_graph_batch_sizes": sizes}})
    opts = options(model)
    doc = YAML(typ="safe", pure=True).load(tr.llm_api_yaml("m", opts).decode())
    assert "cuda_graph_config" in doc  # written out, never left to the runtime's default
    engine = tr.model_params(ResolvedModel("m", model, None, ""), 1)
    if sizes is None:
        assert doc["cuda_graph_config"] is None and engine.cuda_graph_mode is False
    else:
        assert doc["cuda_graph_config"] == {"batch_sizes": sizes, "enable_padding": True}
        assert engine.cuda_graph_mode is True


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
    assert opts["cuda_graph_config"] == {"batch_sizes": [1, 4, 8], "enable_padding": True}
