"""The accepting side of the hardware rule families (K3xx, K5xx-K8xx): the shipped examples and valid
specs that sit right next to each rule's boundary must produce no diagnostic at all.

The failing side lives in tests/cases/hardware/<family>/*.yaml (inline expectations)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.pipeline import validate_path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(ROOT.glob("examples/*/kiln.yaml"))
FAMILIES = ("K3", "K5", "K6", "K7", "K8")

IMAGE = ("nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3@sha256:"
         "1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0")
LLAMA = "{huggingface: meta-llama/Llama-3.1-8B-Instruct, revision: 0e9e39f249a16976918f6564b8830bc894c89659}"
MIXTRAL = "{huggingface: mistralai/Mixtral-8x7B-Instruct-v0.1, revision: 41bd4c9e7e4fb318ca40e721131d4933966c2cc1}"


def _example_id(p: Path) -> str:
    return p.parent.name


@pytest.mark.parametrize("example", EXAMPLES, ids=_example_id)
def test_examples_trip_no_hardware_rule(example: Path) -> None:
    result = validate_path(example)
    mine = [d for d in result.diagnostics if d.code.startswith(FAMILIES)]
    assert not mine, "\n".join(f"{d.span.line}:{d.span.column} {d.code} {d.message}" for d in mine)


CLEAN: dict[str, str] = {
    # FP8 KV cache alone on Ampere is in the PyTorch matrix; W4A16 AWQ and weight-only int8 run on SM80.
    "ampere-llmapi": f"""
kiln: v1
name: clean
toolchain: {{tensorrt_llm: "1.2.1", triton_image: "{IMAGE.format(tag='26.04')}", modelopt: "0.47.0"}}
models:
  kv:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{kv_cache: fp8, calibration: {{data: calib.jsonl}}}}
  awq:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: int4_awq, block_size: 64, calibration: {{data: calib.jsonl}}}}
    serving: {{ports: {{http: 8100, grpc: 8101, metrics: 8102}}}}
  wo:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: int8, activations: bf16}}
    serving: {{ports: {{http: 8200, grpc: 8201, metrics: 8202}}}}
hosts:
  a100:
    gpu: A100-SXM4-80GB
    count: 3
    driver: ">=450.80.02"
    clocks: {{graphics_mhz: [1200, 1410], memory_mhz: 1593}}
    power_limit_w: 400
    gpus:
      - {{index: 0, serves: kv}}
      - {{index: 1, serves: awq}}
      - {{index: 2, serves: wo}}
""",
    # The engine target takes SmoothQuant, INT4 on Blackwell and fp8_context_fmha on fp8 checkpoints.
    "engine-target": f"""
kiln: v1
name: clean
target: engine
toolchain: {{tensorrt_llm: "1.0.3", triton_image: "{IMAGE.format(tag='25.11')}", modelopt: "0.47.0"}}
models:
  sq:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: int8, calibration: {{data: calib.jsonl}}}}
  awq:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: int4_awq, calibration: {{data: calib.jsonl}}}}
    serving: {{ports: {{http: 8100, grpc: 8101, metrics: 8102}}}}
  fp8:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: fp8, kv_cache: fp8, calibration: {{data: calib.jsonl}}}}
    kernels: {{attention: trtllm, fp8_context_fmha: true}}
    serving: {{ports: {{http: 8200, grpc: 8201, metrics: 8202}}}}
hosts:
  h100:
    gpu: H100-SXM5-80GB
    count: 2
    gpus:
      - {{index: 0, serves: sq}}
      - {{index: 1, serves: fp8}}
  b200:
    gpu: B200
    count: 1
    application_clocks: {{memory_mhz: 3996, graphics_mhz: 1965}}
    gpus:
      - {{index: 0, serves: awq}}
""",
    # Blackwell formats at their accepted block sizes, MoE parallelism inside tp, locked per-entry MIG clocks.
    "blackwell": f"""
kiln: v1
name: clean
toolchain: {{tensorrt_llm: "1.2.1", triton_image: "{IMAGE.format(tag='26.07')}", modelopt: "0.47.0"}}
models:
  w4a8:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: nvfp4, activations: fp8, block_size: 32, calibration: {{data: calib.jsonl}}}}
    runtime: {{cuda_graph_batch_sizes: [1, 2, 4, 64]}}
  mx:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization: {{weights: mxfp4, activations: mxfp8, block_size: 32}}
    serving: {{ports: {{http: 8100, grpc: 8101, metrics: 8102}}}}
  kv4:
    source: {LLAMA}
    architecture: llama-3.1-8b
    quantization:
      weights: nvfp4
      kv_cache: nvfp4
      exclude: [lm_head, "model.layers.0.*"]
      overrides: [{{match: "*down_proj", weights: fp8}}]
      calibration: {{data: calib.jsonl}}
      quality_gate: {{eval: calib.jsonl, max_regression_pct: 2.0}}
    serving: {{ports: {{http: 8200, grpc: 8201, metrics: 8202}}}}
  moe:
    source: {MIXTRAL}
    architecture: mixtral-8x7b
    quantization: {{weights: fp8_block, exclude: ["*mlp.gate"]}}
    parallelism: {{tp: 2, pp: 2, ep: 2}}
    kernels: {{moe: deepgemm}}  # CUTLASS has no FP8 block-scale experts on SM103 (format table)
    limits: {{max_input_len: 16384, max_seq_len: 32768, max_num_tokens: 4096}}
    runtime: {{chunked_prefill: true}}
    serving: {{ports: {{http: 8300, grpc: 8301, metrics: 8302}}}}
hosts:
  b300:
    gpu: B300-288GB
    count: 6
    driver: ">=580.82.07"
    gpus:
      - {{index: 0, serves: w4a8}}
      - index: 1
        clocks: {{graphics_mhz: 1800, memory_mhz: 3996}}
        power_limit_w: 1000
        mig:
          - {{profile: 3g.135gb, serves: mx}}
          - {{profile: 3g.135gb, serves: kv4}}
      - {{index: [2, 3, 4, 5], serves: moe}}
""",
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_boundary_specs_are_clean(name: str, tmp_path: Path) -> None:
    (tmp_path / "calib.jsonl").write_text('{"text": "calibration sample"}\n', encoding="utf-8")
    spec = tmp_path / "kiln.yaml"
    spec.write_text(CLEAN[name].lstrip(), encoding="utf-8")
    result = validate_path(spec)
    assert not result.diagnostics, "\n".join(f"{d.span.line}:{d.span.column} {d.code} {d.message}"
                                             for d in result.diagnostics)


def test_k401_suggests_a_larger_mig_profile_only_where_the_whole_gpu_would_hold_the_model() -> None:
    cases = ROOT / "tests" / "cases" / "hardware" / "memory"
    helps = {d.message.split("'")[1]: d.help for d in validate_path(cases / "weights-do-not-fit-mig.yaml").diagnostics
             if d.code == "K401"}
    assert helps["small"].startswith("use a larger MIG profile")  # 15 GiB: a whole H100 holds it
    assert helps["big"].startswith("not even a whole H100-SXM5-80GB (79.6 GiB) holds it")
    assert "larger MIG profile" not in helps["big"]
    (whole_gpu,) = [d.help for d in validate_path(cases / "weights-do-not-fit.yaml").diagnostics if d.code == "K401"]
    assert "MIG" not in whole_gpu  # no MIG involved
