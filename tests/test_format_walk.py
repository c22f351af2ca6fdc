"""`kiln validate` accepts only what `kiln build` can make: every (weights, activations) pair and KV
format, on both targets, on one GPU of every SM generation, for a dense and a mixture-of-experts
model (with every MoE backend): when the spec validates, lowering succeeds and every model action
passes its own preflight (the ModelOpt configuration builds from the pinned ModelOpt's named
configs; quantize.py and trtllm-build accept every flag and value). The checks and the actions
read the same format table, so a spec cannot validate and then raise in a build."""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import shutil
from pathlib import Path

import pytest

from compiler.store.digests import DigestCache
from compiler.lower import lower
from compiler.pipeline import validate_loaded, validate_text
from compiler.spec.loader import LoadResult, load_text
from compiler.spec.models import ActivationFormat, KvCacheFormat, WeightFormat
from compiler.targets.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ("nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:"
         "1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0")
WEIGHTS = list(WeightFormat.__args__)
ACTIVATIONS = [None, *ActivationFormat.__args__]
KV_FORMATS = list(KvCacheFormat.__args__)
GPUS = ["A100-SXM4-80GB", "L40S", "H100-SXM5-80GB", "B200-180GB", "B300-288GB", "RTX-PRO-6000"]  # SM80..SM120
MOE_BACKENDS = [None, "cutlass", "cutedsl", "wideep", "trtllm", "deepgemm", "vanilla", "triton"]
CONFIGS = {"dense": "tiny-dense.json", "moe": "tiny-moe.json", "gpt-oss": "tiny-gpt-oss.json"}


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("walk")
    shutil.copyfile(ROOT / "examples" / "quickstart" / "model" / "config.json", d / CONFIGS["dense"])
    shutil.copyfile(ROOT / "tests" / "cases" / "hardware" / "data" / "tiny-moe-config.json", d / CONFIGS["moe"])
    (d / CONFIGS["gpt-oss"]).write_text(
        '{"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 256,'
        ' "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,'
        ' "head_dim": 32, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 4096,'
        ' "max_position_embeddings": 2048, "sliding_window": 128, "tie_word_embeddings": false}', encoding="utf-8")
    (d / "calib.jsonl").write_text('{"text": "a calibration sample"}\n', encoding="utf-8")
    return d


def spec_text(target: str, gpu: str, model: str, weights: str, acts: str | None, kv: str,
              backend: str | None) -> str:
    q = [f"weights: {weights}", f"kv_cache: {kv}", "calibration: {data: calib.jsonl}"]
    if acts is not None:
        q.append(f"activations: {acts}")
    if kv == "nvfp4" and target == "llmapi":
        q.append("quality_gate: {eval: calib.jsonl, max_regression_pct: 5.0}")
    kernels = f"\n    kernels: {{moe: {backend}}}" if backend else ""
    return f"""kiln: v1
name: walk
target: {target}
toolchain: {{tensorrt_llm: "1.2.1", triton_image: "{IMAGE}", modelopt: "0.47.0"}}
models:
  m:
    source: {{huggingface: kiln/walk, revision: "{'0' * 40}"}}
    architecture: {{config: {CONFIGS[model]}}}
    quantization: {{{', '.join(q)}}}{kernels}
    limits: {{max_batch_size: 4, max_input_len: 256, max_seq_len: 512, max_num_tokens: 512}}
hosts:
  h:
    gpu: {gpu}
    count: 1
    gpus:
      - {{index: 0, serves: m}}
"""


@functools.lru_cache(maxsize=None)
def _preflight(kind: str, params_json: str) -> None:
    """Preflight once per distinct parameter set (most GPUs give the same one)."""
    kinds = REGISTRY[kind]
    kinds.preflight(kinds.Params.model_validate_json(params_json))


def first_valid(spec_dir: Path, target: str, model: str, weights: str, acts, kv: str, backend):
    """The first GPU generation on which the spec validates, with its validation; else (None, errors).

    The text is loaded once and each GPU's spec is that document with the host's GPU replaced:
    loading (YAML) was three quarters of the walk's time and is the same for every GPU.
    validate_loaded(load_text(t)) is what validate_text(t) does."""
    codes = set()
    loaded = load_text(spec_text(target, GPUS[0], model, weights, acts, kv, backend), "kiln.yaml")
    assert loaded.document is not None, loaded.diagnostics
    for gpu in GPUS:
        data = copy.deepcopy(loaded.document.data)
        data["hosts"]["h"]["gpu"] = gpu
        doc = dataclasses.replace(loaded.document, data=data,
                                  text=spec_text(target, gpu, model, weights, acts, kv, backend))
        result = validate_loaded(LoadResult(doc, list(loaded.diagnostics)), spec_dir)
        if result.ok:
            return gpu, result
        codes |= {d.code for d in result.diagnostics if d.is_error}
    return None, codes


def test_an_edited_document_validates_as_its_own_text_does(spec_dir: Path) -> None:
    """The shortcut first_valid takes: the loaded text with its GPU replaced gives the diagnostics
    of that GPU's own text (valid and invalid cases)."""
    for gpu in ("A100-SXM4-80GB", "B200-180GB"):
        args = ("llmapi", "moe", "nvfp4", None, "auto", "cutlass")
        loaded = load_text(spec_text(args[0], GPUS[-1], *args[1:]), "kiln.yaml")
        data = copy.deepcopy(loaded.document.data)
        data["hosts"]["h"]["gpu"] = gpu
        edited = validate_loaded(LoadResult(dataclasses.replace(loaded.document, data=data), []), spec_dir)
        direct = validate_text(spec_text(args[0], gpu, *args[1:]), spec_dir)
        assert [(d.code, d.span.line, d.message) for d in edited.diagnostics] == \
            [(d.code, d.span.line, d.message) for d in direct.diagnostics]
        assert edited.ok == (gpu == "B200-180GB")


def build_accepts(result) -> None:
    graph = lower(result, DigestCache(None))
    for action in graph.actions.values():
        if action.kind in ("quantize", "engine"):
            _preflight(action.kind, action.params.model_dump_json())


CASES = [(t, w, a) for t in ("llmapi", "engine") for w in WEIGHTS for a in ACTIVATIONS]


@pytest.mark.parametrize("target,weights,acts", CASES, ids=[f"{t}-{w}-{a or 'default'}" for t, w, a in CASES])
def test_what_validates_builds(spec_dir: Path, target: str, weights: str, acts) -> None:
    pytest.importorskip("modelopt.torch.quantization", reason="nvidia-modelopt is not installed: the quantize "
                                                              "preflight builds real ModelOpt configs")
    seen = []
    models = ["dense", "moe", "gpt-oss"]
    backends = MOE_BACKENDS if target == "llmapi" else [None]
    for model, backend in itertools.product(models, backends):
        if model == "dense" and backend is not None:
            continue
        if model == "gpt-oss" and backend not in (None, "triton", "trtllm"):
            continue  # the others refuse GPT-OSS's SwiGLU whatever the recipe (moe_backends in the table)
        gpu, result = first_valid(spec_dir, target, model, weights, acts, "auto", backend)
        if gpu is None:
            continue
        build_accepts(result)
        seen.append((model, backend, gpu))
    if (weights, acts) in VALID_SOMEWHERE.get(target, set()):
        assert seen, f"{weights}/{acts} validates nowhere on {target}"


# Recipes that must validate on some GPU (a table that refused them all would pass the walk trivially).
VALID_SOMEWHERE = {
    "llmapi": {("bf16", None), ("fp8", None), ("fp8_block", None), ("nvfp4", None), ("nvfp4", "fp8"),
               ("mxfp4", None), ("mxfp4", "fp8"), ("int8", "bf16"), ("int4_awq", None), ("int4_awq", "fp8")},
    "engine": {("bf16", None), ("fp8", None), ("nvfp4", None), ("int8", None), ("int8", "bf16"),
               ("int4_awq", None), ("int4_awq", "fp8")},
}


@pytest.mark.parametrize("target,kv", [(t, k) for t in ("llmapi", "engine") for k in KV_FORMATS])
def test_what_validates_builds_kv(spec_dir: Path, target: str, kv: str) -> None:
    pytest.importorskip("modelopt.torch.quantization", reason="nvidia-modelopt is not installed: the quantize "
                                                              "preflight builds real ModelOpt configs")
    found = False
    for weights in ("bf16", "fp8"):
        gpu, result = first_valid(spec_dir, target, "dense", weights, None, kv, None)
        if gpu is not None:
            build_accepts(result)
            found = True
    expect_somewhere = kv != "nvfp4" or target == "llmapi"
    assert found == expect_somewhere, (target, kv)


def test_the_issue_verdicts(spec_dir: Path) -> None:
    """The three wrong verdicts the format table fixes, each against TensorRT-LLM's source (the table's)."""
    def codes(text: str) -> set[str]:
        return {d.code for d in validate_text(text, spec_dir).diagnostics if d.is_error}

    # MXFP4 weights with BF16 activations on Hopper: GPT-OSS's deployment (TRITON; CUTLASS too)
    for backend in (None, "triton"):
        assert codes(spec_text("llmapi", "H100-SXM5-80GB", "gpt-oss", "mxfp4", None, "auto", backend)) == set()
    # ... but not on a dense model, whose layers have no W4A16 MXFP4 kernels
    assert codes(spec_text("llmapi", "H100-SXM5-80GB", "dense", "mxfp4", None, "auto", None)) == {"K311"}
    # INT4 AWQ weight-only experts: no fused MoE backend runs them
    assert codes(spec_text("llmapi", "H100-SXM5-80GB", "moe", "int4_awq", None, "auto", None)) == {"K611"}
    # NVFP4 GPT-OSS experts with the default CUTLASS backend: refused; with TRTLLM on B200: valid
    assert codes(spec_text("llmapi", "B200-180GB", "gpt-oss", "nvfp4", None, "auto", None)) == {"K611"}
    assert codes(spec_text("llmapi", "B200-180GB", "gpt-oss", "nvfp4", None, "auto", "trtllm")) == set()
