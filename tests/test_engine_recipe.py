"""The legacy engine target: the exact quantize.py + trtllm-build recipe, checked against the real
flag set of those programs (compiler/actions/data/trtllm_cli.json, from the TensorRT-LLM 1.x
sources cited there), and the engine's config.json checked against the serving config. No engine
is built here: that needs a GPU, and on this machine the action is deferred, never faked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compiler.actions import engine
from compiler.build import plan_spec
from compiler.graph.builder import Builder
from compiler.store.local import LocalStore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# quickstart edits: (weights line, expected qformat, expected QuantAlgo)
FORMATS = [
    ("weights: fp8", "fp8", "FP8"),
    ("weights: int4_awq", "int4_awq", "W4A16_AWQ"),
    ("weights: int8\n      activations: bf16", "int8_wo", "W8A16"),
    ("weights: int8", "int8_sq", "W8A8_SQ_PER_CHANNEL"),  # int8 activations are int8's default
    ("weights: int4_awq\n      activations: fp8", "w4a8_awq", "W4A8_AWQ"),
    ("weights: bf16", "full_prec", None),
]


def quickstart_engine_spec(tmp_path: Path, weights_line: str = "weights: fp8",
                           extra: dict[str, str] | None = None) -> Path:
    shutil.copytree(EXAMPLES / "quickstart", tmp_path / "spec", ignore=shutil.ignore_patterns(".kiln"))
    spec = tmp_path / "spec" / "kiln.yaml"
    from tests.quickstart import on_engine_target

    text = on_engine_target(spec.read_text(encoding="utf-8"))
    text = text.replace("      weights: fp8\n", f"      {weights_line}\n", 1)
    if weights_line == "weights: bf16":  # an unquantized model takes no calibration
        text = text.replace("      calibration: {data: data/calib-prose.jsonl, samples: 16, max_seq_len: 128, seed: 7}\n",
                            "", 1)
    for old, new in (extra or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    spec.write_text(text, encoding="utf-8")
    return spec


def engine_actions(tmp_path: Path, weights_line: str = "weights: fp8", extra: dict[str, str] | None = None):
    spec = quickstart_engine_spec(tmp_path, weights_line, extra)
    out = plan_spec(spec, LocalStore(tmp_path / "store"), builder=Builder(fixed=frozenset({"torch"})))
    assert out.validation.ok, [d.message for d in out.validation.diagnostics if d.is_error]
    return out


@pytest.mark.parametrize("weights_line,qformat,algo", FORMATS, ids=[f[1] for f in FORMATS])
def test_recipe_uses_only_real_flags_and_values(weights_line: str, qformat: str, algo, tmp_path: Path) -> None:
    out = engine_actions(tmp_path, weights_line)
    params = out.graph.actions["engine/tiny"].params
    assert params.quant.qformat == qformat and params.quant.quant_algo == algo
    rec = engine.recipe(params, "/m", "/c", "/ckpt", "/engine")
    assert engine.check_flags(rec["quantize"]) == []
    assert engine.check_flags(rec["build"]) == []
    build = rec["build"]
    flag = dict(zip(build[1::2], build[2::2]))  # every trtllm-build flag here takes a value
    assert flag["--max_batch_size"] == "8" and flag["--max_num_tokens"] == "2048" and flag["--max_seq_len"] == "512"
    assert flag["--kv_cache_type"] == "paged" and flag["--use_paged_context_fmha"] == "enable"
    assert flag["--use_fp8_context_fmha"] == ("enable" if qformat in ("fp8", "w4a8_awq") else "disable")
    assert ("--gemm_plugin" in flag) == (qformat == "full_prec")
    q = rec["quantize"]
    assert ("--calib_dataset" in q) == (qformat != "full_prec")


def test_flag_check_rejects_invented_flags_and_values() -> None:
    # 1.x has neither: parallelism is fixed at checkpoint time, strongly_typed is hard-coded (facts §1)
    assert engine.check_flags(["trtllm-build", "--tp_size", "2"]) == ["trtllm-build: no such flag --tp_size"]
    assert engine.check_flags(["trtllm-build", "--strongly_typed"]) == ["trtllm-build: no such flag --strongly_typed"]
    assert engine.check_flags(["trtllm-build", "--kv_cache_type", "blocked"]) == [
        "trtllm-build: --kv_cache_type 'blocked' is not one of continuous, paged, disabled"]
    assert engine.check_flags(["quantize.py", "--qformat", "w4a16_awq"])[0].startswith(
        "quantize.py: --qformat 'w4a16_awq' is not one of")
    assert engine.check_flags(["trtllm-build", "--max_batch_size"]) == ["trtllm-build: --max_batch_size needs a value"]


def engine_config(params) -> dict:
    """A config.json laid out as TensorRT-LLM's Engine.save writes it (facts §1, engine output layout)."""
    params = params.to_json()
    return {
        "version": params["tensorrt_llm"],
        "pretrained_config": {"architecture": "LlamaForCausalLM", "dtype": "bfloat16",
                              "mapping": {"world_size": params["tp"] * params["pp"], "tp_size": params["tp"],
                                          "pp_size": params["pp"]},
                              "quantization": {"quant_algo": params["quant"]["quant_algo"],
                                               "kv_cache_quant_algo": params["quant"]["kv_cache_quant_algo"]}},
        "build_config": {**params["limits"], "kv_cache_type": "PAGED",
                         "plugin_config": {"use_paged_context_fmha": True,
                                           "use_fp8_context_fmha": params["build"]["fp8_context_fmha"],
                                           "tokens_per_block": params["build"]["tokens_per_block"]}},
    }


def test_engine_config_is_checked_against_the_serving_config(tmp_path: Path) -> None:
    out = engine_actions(tmp_path, "weights: fp8", {"      weights: int4_awq\n": "      weights: fp8\n      kv_cache: fp8\n"})
    params = out.graph.actions["engine/tiny-awq"].params
    good = engine_config(params)
    assert engine.check_engine_config(good, params) == []

    stale = engine_config(params)
    stale["build_config"]["max_batch_size"] = 64  # built before the spec lowered it
    stale["pretrained_config"]["quantization"]["kv_cache_quant_algo"] = None
    assert engine.check_engine_config(stale, params) == [
        "build_config.max_batch_size is 64, the spec says 8",
        "pretrained_config.quantization.kv_cache_quant_algo is None, the spec says 'FP8'",
    ]
    contiguous = engine_config(params)
    contiguous["build_config"]["kv_cache_type"] = "CONTINUOUS"
    assert engine.check_engine_config(contiguous, params) == [
        "build_config.kv_cache_type is 'CONTINUOUS', the recipe builds PAGED"]


def test_engine_target_waits_for_a_gpu_builder_and_lowers_no_llmapi_artifacts(tmp_path: Path) -> None:
    out = engine_actions(tmp_path)
    kinds = {a.kind for a in out.graph.actions.values()}
    assert "engine" in kinds and not kinds & {"quantize", "quality-gate", "model-source", "llmapi-options"}
    deferred = {p.id: p.deferred for p in out.plan if p.deferred}
    assert deferred == {"engine/tiny": "needs a GPU builder (a CUDA device)",
                        "engine/tiny-awq": "needs a GPU builder (a CUDA device)"}
    assert out.graph.actions["engine/tiny"].deps == ("calibration-set/tiny",)


def test_a_format_quantize_py_lacks_is_refused_by_validate(tmp_path: Path) -> None:
    """fp8_block has no quantize.py format: `kiln validate` refuses it (K312, from the format table)
    instead of accepting it and failing in the engine action, which still refuses it itself."""
    import logging

    from compiler.build import plan_spec
    from compiler.graph.kinds import RunContext

    spec = quickstart_engine_spec(tmp_path, "weights: fp8_block")
    out = plan_spec(spec, LocalStore(tmp_path / "store"), builder=Builder(fixed=frozenset({"torch"})))
    errors = [d for d in out.validation.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["K312"] and out.graph is None
    assert "quantize.py has no format" in errors[0].message
    good = engine_actions(tmp_path / "good").graph.actions["engine/tiny"].params
    bad = good.model_copy(update={"quant": good.quant.model_copy(update={"weights": "fp8_block", "qformat": None,
                                                                         "quant_algo": None})})
    (tmp_path / "out").mkdir()
    with pytest.raises(engine.EngineError, match="quantize.py has no format for fp8_block weights"):
        engine.run(bad, RunContext(tmp_path / "out", {}, {}, logging.getLogger("test")))
