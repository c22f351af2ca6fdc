"""The stand-in for `tensorrt_llm` (tests/fakes/llmapi) keeps the pinned LLM API, and Kiln's LLM-API
model and options use only that API. The API is data with its sources
(compiler/actions/data/trtllm_llmapi.json, TensorRT-LLM 1.2.x); these tests tie the model code,
the options Kiln writes and the stand-in to it, so none of them can drift from the pinned release.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import json
import sys
from pathlib import Path

import pytest

from compiler.actions import llmapi
from compiler.pipeline import validate_path
from compiler.serving import triton as tr

ROOT = Path(__file__).resolve().parents[1]
FACTS_PATH = ROOT / "compiler" / "actions" / "data" / "trtllm_llmapi.json"
FACTS = json.loads(FACTS_PATH.read_text(encoding="utf-8"))
MODEL_PY = ROOT / "compiler" / "templates" / "triton" / "llmapi" / "model.py"
EXAMPLES = sorted((ROOT / "examples").glob("*/kiln.yaml"))


@pytest.fixture(scope="module")
def standin():
    """The stand-in package, imported under a name of its own (it is `tensorrt_llm` only inside the
    server's model directory)."""
    import os

    os.environ.setdefault("KILN_LLMAPI_FACTS", str(FACTS_PATH))
    path = ROOT / "tests" / "fakes" / "llmapi" / "tensorrt_llm" / "__init__.py"
    spec = importlib.util.spec_from_file_location("kiln_standin_tensorrt_llm", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _literal(name: str):
    tree = ast.parse(MODEL_PY.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in {MODEL_PY}")


def test_the_model_maps_the_pinned_inputs_to_pinned_sampling_fields() -> None:
    inputs = FACTS["triton_model"]["inputs"]
    assert _literal("SAMPLING") == {n: s["sampling"] for n, s in inputs.items() if "sampling" in s and n != "sampling_param_stop"}
    assert set(_literal("SAMPLING").values()) | {"stop"} <= set(FACTS["sampling_params"])
    assert set(_literal("OPTIONAL_OUTPUTS")) <= set(inputs)
    assert set(_literal("OPTIONAL_OUTPUTS").values()) <= set(FACTS["completion_output"])
    assert set(_literal("OPTIONAL_OUTPUTS").values()) <= set(FACTS["triton_model"]["outputs"])


def test_the_standin_has_the_pinned_signatures(standin) -> None:
    assert list(inspect.signature(standin.LLM.generate_async).parameters)[1:] == FACTS["generate_async_arguments"]
    explicit = [p for p, v in inspect.signature(standin.LLM.__init__).parameters.items()
                if v.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD][1:]
    assert explicit == FACTS["llm_explicit_arguments"]
    fields = [f.name for f in dataclasses.fields(standin.SamplingParams)]
    assert fields == list(FACTS["sampling_params"])
    public = {f.name for f in dataclasses.fields(standin.CompletionOutput) if not f.name.startswith("_")}
    assert public | {"text_diff", "length"} == set(FACTS["completion_output"])


def test_the_standin_refuses_what_the_real_api_refuses(standin) -> None:
    with pytest.raises(ValueError, match="got invalid argument: max_tokens_per_batch"):
        standin.check_llm_args({"model": "m", "max_tokens_per_batch": 8})
    with pytest.raises(ValueError, match="kv_cache_config: Extra inputs are not permitted"):
        standin.check_llm_args({"model": "m", "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "fraction": 1}})
    with pytest.raises(ValueError, match="max_batch_size: expected int"):
        standin.check_llm_args({"model": "m", "max_batch_size": True})
    with pytest.raises(ValueError, match="attn_backend"):
        standin.check_llm_args({"model": "m", "attn_backend": "FLASH"})
    with pytest.raises(TypeError):
        standin.SamplingParams(max_new_tokens=4)  # a keyword-only dataclass of the pinned fields
    with pytest.raises(ValueError, match="top_p"):
        standin.SamplingParams(top_p=1.5)
    assert standin.SamplingParams(max_tokens=3).best_of == 1


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_model_yaml_is_accepted_by_the_pinned_llm_constructor(path: Path, standin) -> None:
    """model.yaml (what the Triton model passes to LLM()) for every model of every example, and the
    cuda_graph_config both ways (null and a list)."""
    result = validate_path(path)
    assert result.ok
    for name, rm in result.resolved.models.items():
        from ruamel.yaml import YAML

        doc = YAML(typ="safe", pure=True).load(tr.llm_api_yaml(name, llmapi.options(rm)).decode())
        standin.check_llm_args(doc)
        graphs = {**doc, "cuda_graph_config": llmapi.cuda_graph_config([1, 2, 4])}
        standin.check_llm_args(graphs)
