"""Served checkpoints carry a config.json that the pinned runtime's transformers reads correctly.

TensorRT-LLM 1.2 reads a checkpoint's config.json with transformers 4.57; the builder exports with
transformers 5, which states RoPE only in `rope_parameters`. Read by 4.57, such a config has RoPE
theta 10000 and no scaling: Llama-3.1 (theta 500000, llama3 scaling) and Qwen3 (theta 1e6) would
generate garbage. The acceptance tests build tiny models with those RoPE settings, run Kiln's real
quantize (ModelOpt FP8 on CPU) and model-source actions, and read every checkpoint with the
pinned runtime's transformers version, installed from PyPI into a venv of its own
(tests/runtime_transformers.py).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from compiler.actions import hf_config
from compiler.actions.hf_config import (CheckpointConfigError, config_plan, require_plan, runtime_config,
                                        source_config_bytes)
from compiler.build import build_spec, plan_spec
from compiler.catalog.checkpoint_config import CheckpointConfigError as TableError
from compiler.catalog.checkpoint_config import load_checkpoint_config, parse_table
from compiler.catalog.images import load_image_table
from compiler.resources import read_data
from compiler.store.local import LocalStore
from tests.runtime_transformers import RUNTIME

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"

LLAMA31 = {  # Llama-3.1's RoPE and context, at a size that quantizes on a CPU in seconds
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 4096,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
QWEN3 = {  # Qwen3's RoPE theta, no scaling, tied embeddings as its small models have
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 4096,
    "max_position_embeddings": 40960, "max_window_layers": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "rope_scaling": None, "sliding_window": None, "use_sliding_window": False, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "attention_bias": False}

# What transformers 5.14.1 (and ModelOpt 0.47's export through it) writes for LLAMA31, as observed.
LLAMA31_AS_TRANSFORMERS5_WRITES_IT = {
    **{k: v for k, v in LLAMA31.items() if k not in ("rope_theta", "rope_scaling", "torch_dtype")},
    "dtype": "bfloat16", "pad_token_id": None, "transformers_version": "5.14.1",
    "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_type": "llama3"}}


def plan4():
    plan = config_plan(RUNTIME)
    assert plan is not None
    return plan


# --- the table ----------------------------------------------------------------------------------------
def test_every_tensorrt_llm_version_kiln_supports_has_a_row() -> None:
    table = load_checkpoint_config()
    images = load_image_table()
    assert images.family("nvcr.io/nvidia/tritonserver").tags and images.family(
        "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime").tags
    for version in sorted({v for f in images.families for v in f.tags.values()}):
        row = table.runtime(version)
        assert row is not None, f"TensorRT-LLM {version} (an image Kiln knows ships it) has no runtime row"
        assert row.config_schema in table.schemas
        if row.transformers is None:
            assert row.status in ("inferred", "unverified"), version  # a guess must say so
    # the versions the llmapi target serves (>= 1.2) are read from sources, not inferred
    for version in ("1.2.0", "1.2.1"):
        row = table.runtime(version)
        assert row.transformers == "4.57.3" and row.config_schema == "4" and row.status == "partially-verified"
        assert all(table.sources[s].commit for s in row.sources), "each 1.2 source names the commit it was read at"


def test_the_installer_installs_the_builder_toolchain_the_key_names() -> None:
    """A fresh install gets exactly the versions the quantize action demands (else every quantize
    refuses on a clean CI machine), for the ModelOpt pin of every example that quantizes."""
    table = load_checkpoint_config()
    pyproject = (ROOT / "pyproject.toml").read_text()
    install = (ROOT / "scripts" / "install.sh").read_text()
    extra = re.search(r"^quantize = \[(.*?)\]", pyproject, re.S | re.M).group(1)
    pins = set(re.findall(r'"([A-Za-z0-9_.-]+==[^"]+)"', extra))
    for spec in sorted((ROOT / "examples").glob("*/kiln.yaml")):
        m = re.search(r'modelopt: "([^"]+)"', spec.read_text())
        if not m:
            continue
        row = table.builder(m.group(1))
        assert row is not None, f"{spec}: no builder row for ModelOpt {m.group(1)}"
        assert {f"nvidia-modelopt=={row.modelopt}", f"transformers=={row.transformers}"} <= pins, (spec, pins)
        assert re.search(rf"^  pip_install (--[a-z-]+ )*torch=={re.escape(row.torch)}\n", install, re.M), row.torch


def test_a_table_that_does_not_hold_together_is_refused() -> None:
    doc = json.loads(read_data("catalog", "data", "checkpoint_config.json"))
    bad = copy.deepcopy(doc)
    bad["runtimes"]["1.2.1"]["sources"] = ["nowhere"]
    with pytest.raises(TableError, match="unknown source 'nowhere'"):
        parse_table(bad)
    bad = copy.deepcopy(doc)
    bad["runtimes"]["1.2.1"]["transformers"] = "5.0.0"  # a 5.x reader under the 4.x schema
    with pytest.raises(TableError, match="not of schema 4"):
        parse_table(bad)
    bad = copy.deepcopy(doc)
    bad["config_schemas"]["4"]["rope"] = "somewhere"
    with pytest.raises(TableError, match="rope 'somewhere'"):
        parse_table(bad)


# --- the conversion (pure) ----------------------------------------------------------------------------
def test_a_transformers5_export_gets_the_sources_rope_back() -> None:
    export = {**LLAMA31_AS_TRANSFORMERS5_WRITES_IT, "quantization_config": {"quant_algo": "FP8"}}
    out = runtime_config(export, LLAMA31, plan4())
    assert out["rope_theta"] == 500000.0 and out["rope_scaling"] == LLAMA31["rope_scaling"]
    assert out["torch_dtype"] == "bfloat16" and out["max_position_embeddings"] == 131072
    assert "rope_parameters" not in out and "dtype" not in out  # one RoPE, one dtype, in 4.x's keys
    assert out["quantization_config"] == {"quant_algo": "FP8"}  # the export's own keys stay
    assert out["transformers_version"] == "5.14.1"


def test_a_source_saved_by_transformers5_is_translated_for_the_runtime() -> None:
    source = {k: v for k, v in LLAMA31_AS_TRANSFORMERS5_WRITES_IT.items() if k != "transformers_version"}
    out = json.loads(source_config_bytes(json.dumps(source).encode(), plan4()))
    assert out["rope_theta"] == 500000.0 and out["rope_scaling"] == LLAMA31["rope_scaling"]
    assert out["torch_dtype"] == "bfloat16" and "rope_parameters" not in out
    # and a config already in the runtime's schema is shipped byte for byte
    raw = (QUICKSTART / "model" / "config.json").read_bytes()
    assert source_config_bytes(raw, plan4()) == raw
    qwen = json.dumps(QWEN3, indent=1).encode()
    assert source_config_bytes(qwen, plan4()) == qwen


def test_the_transformers5_schema_is_written_when_a_runtime_reads_it() -> None:
    """The rules are per transformers major version: the same source under schema 5."""
    s5 = load_checkpoint_config().schema("5")
    plan5 = hf_config.ConfigPlan(transformers=None, schema_major="5", rope=s5.rope, dtype_key=s5.dtype_key,
                                 foreign=list(s5.foreign))
    out = runtime_config(dict(LLAMA31), LLAMA31, plan5)
    assert out["rope_parameters"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                                      "rope_theta": 500000.0}
    assert out["dtype"] == "bfloat16" and not {"rope_theta", "rope_scaling", "torch_dtype"} & set(out)
    qwen = runtime_config(dict(QWEN3), QWEN3, plan5)
    assert qwen["rope_parameters"] == {"rope_type": "default", "rope_theta": 1000000.0}


def test_a_rope_the_runtime_schema_cannot_state_is_refused() -> None:
    gemma_like = {**LLAMA31_AS_TRANSFORMERS5_WRITES_IT,
                  "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
    with pytest.raises(CheckpointConfigError, match="per-layer-type rope_parameters"):
        source_config_bytes(json.dumps(gemma_like).encode(), plan4())


def test_a_builder_that_misread_the_sources_rope_is_refused() -> None:
    """A builder whose transformers took the default theta calibrated another model."""
    export = {**LLAMA31_AS_TRANSFORMERS5_WRITES_IT, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    with pytest.raises(CheckpointConfigError, match="theta 10000.0, type default.*theta 500000.0, type llama3"):
        runtime_config(export, LLAMA31, plan4())


# --- the key --------------------------------------------------------------------------------------------
IMAGE_TAG = "26.04-trtllm-python-py3"


def quickstart_copy(dest: Path, edits: dict[str, str]) -> Path:
    shutil.copytree(QUICKSTART, dest, ignore=shutil.ignore_patterns(".kiln"))
    spec = dest / "kiln.yaml"
    text = spec.read_text()
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    spec.write_text(text)
    return spec


def test_the_quantize_key_names_the_builder_toolchain_and_the_runtime_schema(tmp_path: Path) -> None:
    """Computed from the spec and Kiln's table on any machine (no torch imported); pins whose
    runtimes read the same schema share checkpoints."""
    table = load_checkpoint_config()
    graph_a = plan_spec(QUICKSTART / "kiln.yaml", LocalStore(tmp_path / "a")).graph
    a = graph_a.actions["quantize/tiny"]
    builder = table.builder("0.47.0")
    assert (a.params.modelopt, a.params.torch, a.params.transformers) == ("0.47.0", builder.torch,
                                                                         builder.transformers)
    assert a.params.checkpoint_config == config_plan(RUNTIME)
    assert a.params.checkpoint_config.transformers == "4.57.3" and a.params.checkpoint_config.rope == "top-level"
    spec = quickstart_copy(tmp_path / "spec-1.2.0", {'tensorrt_llm: "1.2.1"': 'tensorrt_llm: "1.2.0"',
                                                     IMAGE_TAG: "26.03-trtllm-python-py3"})
    graph_b = plan_spec(spec, LocalStore(tmp_path / "b")).graph
    # 1.2.0 and 1.2.1 read checkpoints with the same transformers: the same checkpoints
    assert graph_b.keys["quantize/tiny"] == graph_a.keys["quantize/tiny"]
    assert graph_b.keys["llmapi-options/tiny"] != graph_a.keys["llmapi-options/tiny"]  # the pin did change


def test_a_runtime_pin_outside_the_table_is_refused_by_validate_and_by_the_actions(tmp_path: Path) -> None:
    """`kiln validate` refuses the pin (K808 at toolchain.tensorrt_llm) before a build would; the
    actions refuse it too, before any model loads, should a graph ever carry no plan."""
    from compiler.pipeline import validate_path
    from compiler.targets.registry import REGISTRY

    spec = quickstart_copy(tmp_path / "spec", {'tensorrt_llm: "1.2.1"': 'tensorrt_llm: "1.3.0"',
                                               IMAGE_TAG: "26.09-trtllm-python-py3"})
    result = validate_path(spec)
    errors = [d for d in result.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["K808"], result.diagnostics
    line = next(i for i, t in enumerate(spec.read_text().splitlines(), 1) if "tensorrt_llm:" in t)
    assert errors[0].span.line == line and "1.3.0" in errors[0].message
    assert plan_spec(spec, LocalStore(tmp_path / "store")).graph is None

    graph = plan_spec(QUICKSTART / "kiln.yaml", LocalStore(tmp_path / "store")).graph
    unplanned = graph.actions["quantize/tiny"].params.model_copy(update={"checkpoint_config": None})
    with pytest.raises(Exception, match="TensorRT-LLM reads config.json with"):
        REGISTRY["quantize"].preflight(unplanned)
    with pytest.raises(CheckpointConfigError, match="no row for it"):
        require_plan(None, "1.3.0")


def test_kilns_schema4_config_reads_the_same_under_transformers5(tmp_path: Path) -> None:
    """Why the Dynamo runtime images' release candidates get schema 4 without a transformers pin
    read: a config Kiln writes in schema 4 gives transformers 5 (this builder's 5.14.1) the source's
    RoPE theta and scaling, dtype and max positions, as it gives 4.57."""
    transformers = pytest.importorskip("transformers")
    assert transformers.__version__.startswith("5."), transformers.__version__
    for source in (LLAMA31, QWEN3):
        out = runtime_config({**LLAMA31_AS_TRANSFORMERS5_WRITES_IT, "quantization_config": {"quant_algo": "FP8"}}
                             if source is LLAMA31 else dict(source), source, plan4())
        d = tmp_path / source["model_type"]
        d.mkdir()
        (d / "config.json").write_text(json.dumps(out))
        cfg = transformers.AutoConfig.from_pretrained(d)
        rope = dict(cfg.rope_parameters)
        assert rope.pop("rope_theta") == source["rope_theta"]
        scaling = source["rope_scaling"] or {"rope_type": "default"}
        assert rope == scaling, (rope, scaling)
        assert str(cfg.dtype) == "torch.bfloat16" and cfg.max_position_embeddings == source["max_position_embeddings"]


# --- the builder runs what the key says ----------------------------------------------------------------
def test_the_quantize_action_refuses_a_builder_with_other_versions(tmp_path: Path) -> None:
    pytest.importorskip("modelopt.torch.quantization", reason="needs nvidia-modelopt, torch and transformers (bash "
                                                              "scripts/install.sh installs them)")
    from compiler.actions.quantize import QuantizeError, check_builder

    params = plan_spec(QUICKSTART / "kiln.yaml", LocalStore(tmp_path)).graph.actions["quantize/tiny"].params
    check_builder(params)  # this builder has the table's toolchain (scripts/install.sh installs it)
    with pytest.raises(QuantizeError, match=r"transformers 5\.14\.1 \(the key says 5\.13\.0\).*"
                                            r"pip install transformers==5\.13\.0"):
        check_builder(params.model_copy(update={"transformers": "5.13.0"}))
    with pytest.raises(QuantizeError, match=r"torch 2\.13\.0 \(the key says 2\.9\.1\)"):
        check_builder(params.model_copy(update={"torch": "2.9.1"}))
    with pytest.raises(QuantizeError, match="no builder toolchain"):
        check_builder(params.model_copy(update={"torch": None, "transformers": None}))


# --- acceptance: the runtime's own transformers reads what Kiln ships -----------------------------------
def make_model(dest: Path, config: dict, *, seed: int, saved_by_transformers5: bool = False) -> Path:
    """A tiny random model with `config`: weights saved by the installed transformers; config.json
    as given (the hub's 4.x-era files) or as transformers 5 saves it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dest.mkdir(parents=True)
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(dest)), dtype=torch.bfloat16)
    model.save_pretrained(str(dest))
    if not saved_by_transformers5:
        (dest / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(QUICKSTART / "model" / name, dest / name)
    return dest


MODELS = {  # name -> (source directory, quantized)
    "llama-fp8": ("llama31", True), "qwen-fp8": ("qwen3", True), "llama-v5-fp8": ("llama31-v5", True),
    "llama-bf16": ("llama31", False), "qwen-bf16": ("qwen3", False), "llama-v5-bf16": ("llama31-v5", False)}


def spec_text() -> str:
    lines = ["kiln: v1", "name: rope", "toolchain:", f'  tensorrt_llm: "{RUNTIME}"',
             f"  triton_image: nvcr.io/nvidia/tritonserver:{IMAGE_TAG}@sha256:" + "1" * 64, '  modelopt: "0.47.0"',
             "models:"]
    for i, (name, (src, quantized)) in enumerate(MODELS.items()):
        q = ("{weights: fp8, calibration: {data: data/calib-prose.jsonl, samples: 4, max_seq_len: 64, seed: 7}}"
             if quantized else "{weights: bf16}")
        lines += [f"  {name}:", f"    source: {{path: models/{src}}}", f"    quantization: {q}",
                  "    limits: {max_batch_size: 2, max_input_len: 128, max_seq_len: 256, max_num_tokens: 256}",
                  f"    serving: {{ports: {{http: {8100 + 10 * i}, grpc: {8101 + 10 * i}, metrics: {8102 + 10 * i}}}}}"]
    lines += ["hosts:", "  dev:", "    gpu: H100-SXM5-80GB", "    count: 1", "    gpus:", "      - index: 0",
              "        mig:"]
    lines += [f"          - {{profile: 1g.10gb, serves: {name}}}" for name in MODELS]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def rope_build(tmp_path_factory):
    """The six checkpoints, built by Kiln's real quantize (ModelOpt FP8 on CPU) and model-source."""
    pytest.importorskip("modelopt.torch.quantization", reason="quantizing needs nvidia-modelopt, torch and "
                                                              "transformers (bash scripts/install.sh installs them)")
    root = tmp_path_factory.mktemp("rope")
    spec_dir = root / "spec"
    make_model(spec_dir / "models" / "llama31", LLAMA31, seed=1)
    make_model(spec_dir / "models" / "qwen3", QWEN3, seed=2)
    make_model(spec_dir / "models" / "llama31-v5", LLAMA31, seed=3, saved_by_transformers5=True)
    v5 = json.loads((spec_dir / "models" / "llama31-v5" / "config.json").read_text())
    assert "rope_parameters" in v5 and "rope_theta" not in v5  # the installed transformers writes 5.x's schema
    (spec_dir / "data").mkdir()
    shutil.copyfile(QUICKSTART / "data" / "calib-prose.jsonl", spec_dir / "data" / "calib-prose.jsonl")
    (spec_dir / "kiln.yaml").write_text(spec_text())
    store = LocalStore(root / "store")
    outcome = build_spec(spec_dir / "kiln.yaml", store)
    assert outcome.validation.ok, [d.message for d in outcome.validation.diagnostics]
    assert not outcome.failed, [(r.id, r.error) for r in outcome.failed]
    out = {}
    for name, (src, quantized) in MODELS.items():
        aid = f"{'quantize' if quantized else 'model-source'}/{name}"
        store.materialize(outcome.results[aid].tree, root / "ckpt" / name)
        out[name] = (spec_dir / "models" / src, root / "ckpt" / name)
    return out


def test_every_checkpoint_reads_like_its_source_in_the_runtimes_transformers(rope_build, runtime_transformers):
    """Rope theta, rope scaling, dtype and max positions (and everything else the config states)
    as the pinned runtime's transformers reads them: the same as the source's."""
    sources = {"llama31": rope_build["llama-bf16"][0], "qwen3": rope_build["qwen-bf16"][0]}
    read = runtime_transformers.read_configs(*sources.values(), *(ckpt for _, ckpt in rope_build.values()))
    want = {"llama31": read[sources["llama31"]], "qwen3": read[sources["qwen3"]]}
    assert want["llama31"]["rope_theta"] == 500000.0 and want["llama31"]["rope_scaling"]["rope_type"] == "llama3"
    assert want["qwen3"]["rope_theta"] == 1000000.0 and want["qwen3"]["rope_scaling"] is None
    for name, (src, ckpt) in rope_build.items():
        expected = want["qwen3" if name.startswith("qwen") else "llama31"]
        got = read[ckpt]
        for field in ("rope_theta", "rope_scaling", "dtype", "max_position_embeddings"):
            assert got[field] == expected[field], (name, field, got[field], expected[field])
        config = {k: v for k, v in got["config"].items() if k != "quantization_config"}
        assert config == expected["config"], name
        assert ("quantization_config" in got["config"]) == name.endswith("fp8")


def test_the_export_as_it_was_shipped_loses_rope_in_the_runtimes_transformers(rope_build, runtime_transformers,
                                                                              tmp_path: Path) -> None:
    """Before Kiln rewrote it, the quantize checkpoint carried ModelOpt's export of config.json as
    the builder's transformers 5 writes it: the runtime then reads theta 10000 and no scaling."""
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM

    src = rope_build["llama-fp8"][0]
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
    model = mtq.quantize(model, mtq.FP8_DEFAULT_CFG, lambda m: m(torch.randint(0, 4096, (1, 8))))
    export_hf_checkpoint(model, dtype=torch.bfloat16, export_dir=tmp_path / "raw")
    raw = runtime_transformers.read_configs(tmp_path / "raw")[tmp_path / "raw"]
    assert (raw["rope_theta"], raw["rope_scaling"]) == (10000.0, None)  # not 500000 with llama3 scaling
    # Kiln's rewrite of that very file is what the runtime reads correctly
    hf_config.write_runtime_config(tmp_path / "raw" / "config.json", src / "config.json", plan4())
    fixed = runtime_transformers.read_configs(tmp_path / "raw")[tmp_path / "raw"]
    assert (fixed["rope_theta"], fixed["rope_scaling"]) == (500000.0, LLAMA31["rope_scaling"])
