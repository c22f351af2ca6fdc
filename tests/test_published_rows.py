"""Published rows under other tables' names become cases (compiler/capacity/published_rows.py,
estimate_fit.published_case): models, GPUs and precisions the calibration rows never had, and
attention-DP rows, each estimated under its ceiling."""

from __future__ import annotations

import pytest

from compiler.capacity.estimate_calibrate import estimate_row
from compiler.capacity.estimate_fit import published_case
from compiler.capacity.estimate_unit import coefficient_table
from compiler.capacity.published_rows import gpu_key, model_key, precision_formats
from compiler.catalog.gpus import load_gpu_catalog
from compiler.catalog.models import load_model_catalog


def test_names_as_other_tables_print_them() -> None:
    models, gpus = load_model_catalog().names, load_gpu_catalog().names
    assert model_key("Llama 3.1 70B", models) == "llama-3.1-70b"
    assert model_key("DeepSeek-R1-0528", models) == "deepseek-v3"  # R1 is V3's architecture
    assert model_key("gpt-oss-120b", models) == "gpt-oss-120b"
    assert model_key("GPT-OSS 20B", models) == "gpt-oss-20b"
    assert model_key("Qwen3-32B-FP8", models) == "qwen3-32b"
    assert model_key("Llama 2 70B", models) == "llama-2-70b"
    assert model_key("Falcon 180B", models) is None
    assert gpu_key("GB300", gpus) == "GB300-288GB" and gpu_key("B300", gpus) == "B300-288GB"
    assert gpu_key("H100 PCIe", gpus) == "H100-PCIe-80GB" and gpu_key("H100", gpus) == "H100-SXM5-80GB"
    assert gpu_key("RTX PRO 6000", gpus) == "RTX-PRO-6000-Blackwell-Server-96GB"
    assert gpu_key("L40S", gpus) == "L40S-48GB" and gpu_key("MI300X", gpus) is None
    assert precision_formats({"precision": "W4A16"}) == ("int4_awq", "bf16")
    assert precision_formats({"precision": "FP4", "kv_precision": "BF16"}) == ("nvfp4", "bf16")
    assert precision_formats({"precision": "FP6"}) is None
    # DeepSeek-R1's FP8 checkpoint is block-scaled (weight_block_size [128, 128]); Llama's is not
    assert precision_formats({"precision": "FP8"}, "deepseek-v3") == ("fp8_block", "fp8")
    assert precision_formats({"precision": "FP8"}, "llama-3.1-8b") == ("fp8", "fp8")


@pytest.mark.parametrize("row", [
    {"model": "DeepSeek-R1", "precision": "FP8", "gpu": "H200", "tp": 8, "attention_dp": True},
    {"model": "gpt-oss-120b", "precision": "MXFP4", "gpu": "B200", "tp": 1},
    {"model": "Llama 3.3 70B", "precision": "FP4", "gpu": "GB300", "tp": 1},
    {"model": "Llama 3.1 8B", "precision": "FP8", "gpu": "RTX PRO 6000", "tp": 1, "concurrency": 64},
], ids=lambda r: f"{r['model']}-{r['gpu']}")
def test_rows_without_calibration_rows_are_estimated_under_the_ceiling(row) -> None:
    c = published_case({"doc_version": "1.2", "isl": 1024, "osl": 1024, "value": 1.0, **row})
    assert c is not None
    est, ceiling, distance, (lo, hi) = estimate_row(c, coefficient_table())
    assert 0 < est <= ceiling and lo < 0 < hi and distance > 0
    assert c.facts["parallelism"] == ("attention-DP" if row.get("attention_dp") else "tensor")
    if "concurrency" in row:
        assert c.work.batch == 64
