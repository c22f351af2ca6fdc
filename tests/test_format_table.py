"""Integrity of the quantization-format table (compiler/catalog/data/formats.json).

The table is data with sources; these tests hold it to the rest of Kiln (the spec's format names,
the checks' pairs, the capacity figures, the quantize.py flag set, the GPU catalog), to the
installed ModelOpt (config names, block sizes, which formats fake-quantize only on CUDA) and to the
TensorRT-LLM facts it was written to encode.
"""

from __future__ import annotations

import copy
import json
import typing
import warnings
from importlib import resources
from pathlib import Path

import pytest

from compiler.catalog import load_gpu_catalog
from compiler.catalog.formats import (FormatTableError, load_format_table, normalize_activations, table_from_dict)
from compiler.spec.models import ActivationFormat, KvCacheFormat, Kernels, WeightFormat

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table():
    return load_format_table()


@pytest.fixture(scope="module")
def raw() -> dict:
    return json.loads((resources.files("compiler.catalog") / "data" / "formats.json").read_text(encoding="utf-8"))


def _mtq():
    try:
        import modelopt.torch.quantization as mtq
    except Exception as e:  # noqa: BLE001 - any import failure means "no ModelOpt here"
        pytest.skip(f"modelopt.torch.quantization is not importable here: {e}")
    return mtq


# --- the table against Kiln's own names ------------------------------------------------------------

def test_every_spec_weight_format_has_storage_facts(table):
    spec = set(typing.get_args(WeightFormat))
    assert spec == set(table.weights), "formats.json weights and the spec's WeightFormat differ"
    for name in spec:
        w = table.weight(name)
        assert w.bits in (4, 8, 16)
        assert w.block_ndim in (1, 2)
        assert w.scale_bytes >= 0
        assert w.sources, name
        if w.blocks.allowed:
            assert w.blocks.default in w.blocks.allowed, name


def test_every_spec_kv_format_is_in_the_table(table):
    assert set(typing.get_args(KvCacheFormat)) == set(table.kv_formats)


def test_recipe_activations_are_spec_activation_formats(table):
    spec = set(typing.get_args(ActivationFormat))
    for r in table:
        assert r.activations is None or r.activations in spec, r.key
        assert r.activations == normalize_activations(r.activations), "store 16-bit activations as null"


def test_pairs_cover_the_spec_formats(table):
    """Every weight format of the spec has recipes, every recipe's activations are a spec activation
    format (or the 16-bit dtype), and the unquantized rows are exactly the 16-bit formats."""
    from compiler.spec.models import UNQUANTIZED, ActivationFormat, WeightFormat

    assert {r.weights for r in table} == set(typing.get_args(WeightFormat))
    assert {r.activations for r in table} <= set(typing.get_args(ActivationFormat)) | {None}
    assert {r.weights for r in table if not r.quantized} == set(UNQUANTIZED)


def test_one_default_recipe_per_weight_format(table):
    for w in table.weights:
        assert [r.default for r in table.recipes_for(w)].count(True) == 1, w
        assert table.recipe(w) is table.default_recipe(w)
        assert table.valid_activations(w)[0] == table.default_activations(w)


def test_moe_backends_are_the_specs(table):
    literal = next(a for a in typing.get_args(Kernels.model_fields["moe"].annotation) if typing.get_args(a))
    spec = {b.upper() for b in typing.get_args(literal)}
    assert spec == set(table.moe_backends)
    assert table.default_moe_backend == "CUTLASS"


def test_every_catalog_gpu_has_a_known_sm(table):
    for gpu in load_gpu_catalog():
        assert gpu.sm_version in table.sms, gpu.name


# --- sources and statuses -------------------------------------------------------------------------

def test_every_fact_cites_existing_sources(table, raw):
    def walk(node, where):
        if isinstance(node, dict):
            if where == "$.conventions":
                return
            if "sources" in node and where != "$":
                assert node["sources"], f"{where}: empty sources"
                for s in node["sources"]:
                    assert s in raw["sources"], f"{where}: unknown source {s!r}"
            if "sms" in node and where != "$":
                assert node["sms"] == sorted(set(node["sms"])), f"{where}: SMs not sorted and unique"
                assert "status" in node or where.startswith("$.moe_backends"), f"{where}: SM list without a status"
            for k, v in node.items():
                if k != "sources" or where == "$":
                    walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(raw, "$")
    for r in table:
        assert r.sources, r.key
    for sid, s in table.sources.items():
        assert s.repository and s.path and s.what, sid


def test_the_loader_refuses_broken_tables(raw):
    bad = copy.deepcopy(raw)
    bad["recipes"][0]["sources"] = ["no-such-source"]
    with pytest.raises(FormatTableError, match="no-such-source"):
        table_from_dict(bad)
    bad = copy.deepcopy(raw)
    bad["recipes"][2]["llmapi"]["sms"] = [75]
    with pytest.raises(FormatTableError, match="SM 75"):
        table_from_dict(bad)
    bad = copy.deepcopy(raw)
    bad["recipes"].append(copy.deepcopy(bad["recipes"][2]))
    with pytest.raises(FormatTableError, match="duplicate"):
        table_from_dict(bad)
    bad = copy.deepcopy(raw)
    bad["recipes"][2]["moe"]["FLUX"] = bad["recipes"][2]["moe"]["CUTLASS"]
    with pytest.raises(FormatTableError, match="backends"):
        table_from_dict(bad)


# --- the engine target against quantize.py's real flag set -----------------------------------------

def test_engine_formats_are_quantize_py_choices(table):
    cli = json.loads((ROOT / "compiler" / "actions" / "data" / "trtllm_cli.json").read_text(encoding="utf-8"))
    qformats = set(cli["quantize.py"]["--qformat"])
    kv_dtypes = set(cli["quantize.py"]["--kv_cache_dtype"])
    for r in table:
        if r.engine is not None:
            assert r.engine.qformat in qformats, r.key
    for k in table.kv_formats.values():
        if k.engine_kv_cache_dtype is not None:
            assert k.engine_kv_cache_dtype in kv_dtypes, k.name
        else:
            assert not k.quantized or not k.engine.sms, f"{k.name}: engine SMs without a --kv_cache_dtype"


def test_fp8_context_fmha_follows_trtllm_build(table):
    """trtllm-build keeps --use_fp8_context_fmha only for FP8, W4A8_AWQ and NVFP4 checkpoints."""
    kept = {r.engine.quant_algo for r in table if r.engine is not None and r.engine.fp8_context_fmha}
    assert kept == {"FP8", "W4A8_AWQ", "NVFP4"}


# --- the llmapi target against the installed ModelOpt ----------------------------------------------

def test_modelopt_config_names_exist(table):
    mtq = _mtq()
    for r in table:
        if r.modelopt is not None:
            for name in r.modelopt.config_names:
                assert isinstance(getattr(mtq, name, None), dict), f"{r.key}: no {name} in modelopt"
    for k in table.kv_formats.values():
        if k.modelopt_config is not None:
            assert isinstance(getattr(mtq, k.modelopt_config, None), dict), k.name
    assert not any(n for n in dir(mtq) if "GPTQ" in n and n.endswith("_CFG")), \
        "this ModelOpt has a GPTQ config: the int4_gptq row's modelopt should no longer be null"


def _method(algorithm) -> str | None:
    """A ModelOpt config's calibration algorithm name ("max", {"method": "awq_lite", ...} or None)."""
    return algorithm.get("method") if isinstance(algorithm, dict) else algorithm


def _weight_entry(cfg: dict) -> dict:
    for e in cfg["quant_cfg"]:
        if e.get("quantizer_name") == "*weight_quantizer" and "parent_class" not in e:
            c = e["cfg"]
            return c[0] if isinstance(c, list) else c
    raise AssertionError("no *weight_quantizer entry")


def test_modelopt_block_sizes_are_the_defaults(table):
    mtq = _mtq()
    for r in table:
        if r.modelopt is None:
            continue
        block = (_weight_entry(getattr(mtq, r.modelopt.config)).get("block_sizes") or {}).get(-1)
        allowed = table.allowed_blocks(r.weights, r.activations)
        default = r.blocks.default if r.blocks is not None else table.weight(r.weights).blocks.default
        if block is None:
            assert not allowed, f"{r.key}: block sizes for a format ModelOpt does not block-scale"
        else:
            assert block == default and block in allowed, f"{r.key}: ModelOpt blocks {block}, table {default}"


def test_modelopt_algorithms(table):
    mtq = _mtq()
    for r in table:
        if r.modelopt is None:
            continue
        if r.modelopt.algorithm != _method(getattr(mtq, r.modelopt.config).get("algorithm")):
            assert r.modelopt.note and "algorithm" in r.modelopt.note, f"{r.key}: algorithm differs without a note"
        if r.calibration.calibrates and r.quantized:
            assert r.modelopt.algorithm is not None, f"{r.key}: calibrates but runs no calibration"


def test_cuda_only_formats_fail_on_cpu_and_the_others_run(table):
    """ModelOpt fake-quantizes nvfp4 and the MX formats only on CUDA; everything else runs on a CPU."""
    mtq = _mtq()
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available, so the CPU-only behaviour cannot be observed here")
    for r in table:
        if r.modelopt is None:
            continue
        model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.Linear(128, 128))
        ok = True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mtq.quantize(model, _table_config(mtq, r), lambda m: m(torch.randn(4, 128)))
                model(torch.randn(4, 128))
        except (AssertionError, RuntimeError, ImportError):
            ok = False
        assert ok is not r.modelopt.cuda_only, f"{r.key}: cuda_only={r.modelopt.cuda_only} but CPU run ok={ok}"


def _is(e: dict, quantizer: str) -> bool:
    return e.get("quantizer_name") == quantizer and "parent_class" not in e


def _table_config(mtq, r) -> dict:
    """The ModelOpt config a recipe row describes: its config's entries, the input quantizer disabled
    or taken from the activations config, and the row's calibration algorithm."""
    m = r.modelopt
    cfg = copy.deepcopy(getattr(mtq, m.config))
    if m.inputs == "disabled":
        inp = {"quantizer_name": "*input_quantizer", "enable": False}
    elif m.inputs == "activations_config":
        inp = next(e for e in getattr(mtq, m.activations_config)["quant_cfg"] if _is(e, "*input_quantizer"))
    else:
        inp = None
    if inp is not None:
        cfg["quant_cfg"] = [copy.deepcopy(inp) if _is(e, "*input_quantizer") else e for e in cfg["quant_cfg"]]
    if m.algorithm != _method(cfg.get("algorithm")):
        cfg["algorithm"] = m.algorithm
    return cfg


# --- the facts the table was written to correct ----------------------------------------------------

def test_mxfp4_w4a16_runs_gpt_oss_experts_on_hopper_with_triton(table):
    r = table.recipe("mxfp4", None)
    assert r.quant_algo == "W4A16_MXFP4" and r.experts_only
    assert table.moe_support(r, "TRITON", 90, "swiglu_gptoss")
    assert table.moe_support(r, "CUTLASS", 90)
    assert not table.moe_support(r, "CUTLASS", 100)
    assert not table.supports(r, "llmapi", 90), "dense layers have no W4A16_MXFP4 method"
    assert table.moe_backends_for(r, 100, "swiglu_gptoss") == ("TRTLLM",)


def test_no_fused_moe_backend_runs_w4a16_awq(table):
    r = table.recipe("int4_awq", None)
    fused = [b for b in table.moe_backends if b != "VANILLA"]
    assert not any(table.moe_support(r, b, sm) for b in fused for sm in table.sms)
    w4a8 = table.recipe("int4_awq", "fp8")
    assert table.moe_backends_for(w4a8, 90)[0] == "CUTLASS"
    assert not table.moe_support(w4a8, "CUTLASS", 100)


def test_nvfp4_gpt_oss_experts_need_trtllm(table):
    r = table.recipe("nvfp4", "nvfp4")
    assert table.moe_support(r, "CUTLASS", 100)
    assert not table.moe_support(r, "CUTLASS", 100, "swiglu_gptoss")
    assert table.moe_support(r, "TRTLLM", 100, "swiglu_gptoss")
    assert not table.moe_support(r, "TRTLLM", 120)
    assert table.moe_backends_for(r, 120, "swiglu_gptoss") == ()
    with pytest.raises(ValueError):
        table.moe_support(r, "CUTLASS", 100, "geglu_plus")


def test_gpt_oss_catalog_entries_name_their_expert_activation(table):
    from compiler.catalog import arch_from_hf_config, load_model_catalog

    models = load_model_catalog()
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        assert models[name].moe_activation in table.moe_activations
    assert models["mixtral-8x7b"].moe_activation is None
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64,
              "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
              "num_key_value_heads": 8, "num_local_experts": 32, "experts_per_token": 4, "vocab_size": 201088,
              "max_position_embeddings": 131072}
    assert arch_from_hf_config(config, "g").moe_activation == "swiglu_gptoss"
    assert arch_from_hf_config({**config, "model_type": "mixtral"}, "m").moe_activation is None


def test_targets_that_cannot_build(table):
    assert not table.buildable(table.recipe("int4_gptq", None), "llmapi")
    assert not table.buildable(table.recipe("int4_gptq", None), "engine")
    assert not table.supports(table.recipe("int8", "int8"), "llmapi", 90)
    assert table.supports(table.recipe("int8", "int8"), "engine", 80)
    assert table.buildable(table.recipe("fp8_block", "fp8"), "llmapi")
    assert not table.buildable(table.recipe("fp8_block", "fp8"), "engine")
    assert table.kv("nvfp4").engine.sms == ()
