"""How published throughput rows name models, GPUs and precisions, mapped onto Kiln's catalog.

The perf-overview tables print names ("Llama 3.1 70B", "H200 141GB HBM3", "FP8"); other published
tables print them differently ("DeepSeek-R1-0528", "GB300", "NVFP4", "W4A16"). A name is looked up as
the tables print it first, then normalised (lower case, punctuation dropped) against the catalog's
keys, so a row of a model, GPU or precision the calibration rows never had still becomes a case.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

#: Published names -> catalog keys (the names as the perf-overview tables print them).
MODEL_KEYS = {"Llama 3.1 8B": "llama-3.1-8b", "Llama 3.1 70B": "llama-3.1-70b", "Llama 3.3 70B": "llama-3.3-70b",
              "Llama 3.1 405B": "llama-3.1-405b", "Mixtral 8x7B": "mixtral-8x7b", "Mixtral 8x22B": "mixtral-8x22b",
              "Qwen3-235B-A22B": "qwen3-235b-a22b"}
#: Models published under another name than the architecture the catalog keeps them as (DeepSeek-R1
#: is DeepSeek-V3's architecture, its config.json says so).
MODEL_ALIASES = {"deepseekr1": "deepseek-v3", "deepseekv3": "deepseek-v3"}
#: "GH200 480GB" is the GH200 with 96 GB of HBM3 and 480 GB of LPDDR5X (the tables' hardware list).
GPU_KEYS = {"H100 80GB HBM3": "H100-SXM5-80GB", "H100": "H100-SXM5-80GB", "H200 141GB HBM3": "H200-SXM-141GB",
            "H200": "H200-SXM-141GB", "GH200 480GB": "GH200-96GB", "B200": "B200-180GB", "GB200": "GB200-186GB"}
#: Precision -> (weights format, KV cache format). FP8 = FP8 weights and FP8 KV cache; FP4 = NVFP4
#: weights (ModelOpt checkpoints keep an FP8 KV cache); weight-only and 16-bit rows keep a 16-bit KV cache.
PRECISIONS = {"FP8": ("fp8", "fp8"), "FP4": ("nvfp4", "fp8"), "NVFP4": ("nvfp4", "fp8"), "MXFP4": ("mxfp4", "fp8"),
              "BF16": ("bf16", "bf16"), "FP16": ("fp16", "fp16"), "INT8": ("int8", "bf16"), "W8A16": ("int8", "bf16"),
              "INT4": ("int4_awq", "bf16"), "W4A16": ("int4_awq", "bf16"), "INT4 AWQ": ("int4_awq", "bf16"),
              "AWQ": ("int4_awq", "bf16"), "GPTQ": ("int4_gptq", "bf16")}


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def model_key(name: str, catalog: Sequence[str]) -> str | None:
    """The catalog key (of `catalog`, the catalog's names) of a published model name, or None."""
    if name in MODEL_KEYS:
        return MODEL_KEYS[name]
    n = _norm(name)
    for key in catalog:
        if _norm(key) == n:
            return key
    for prefix, key in MODEL_ALIASES.items():
        if n.startswith(prefix):
            return key
    # "Qwen3-32B-FP8", "gpt-oss-120b (MXFP4)": the longest catalog key the name starts with
    hits = [k for k in catalog if n.startswith(_norm(k))]
    return max(hits, key=len) if hits else None


def gpu_key(name: str, catalog: Sequence[str]) -> str | None:
    """The catalog key of a published GPU name ("B300", "GB300 NVL72", "H100 PCIe"), or None: the
    catalog's first key (SXM before PCIe) that starts with the name's first word."""
    if name in GPU_KEYS:
        return GPU_KEYS[name]
    words = name.replace("-", " ").split()
    if not words:
        return None
    full = _norm(name)
    for key in catalog:  # a name that says the form factor too ("H100 PCIe")
        if len(words) > 1 and _norm(key).startswith(full):
            return key
    first = _norm(words[0])
    return next((k for k in catalog if _norm(k.split("-")[0]) == first), None)


#: Catalog models whose published FP8 checkpoint is block-scaled: DeepSeek-V3/R1's config.json has
#: quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128]}, which TensorRT-LLM runs
#: with FP8 block scales (its MoE runner's use_fp8_block_scaling path).
BLOCK_FP8_MODELS = frozenset({"deepseek-v3"})


def precision_formats(row: Mapping, model: str | None = None) -> tuple[str, str] | None:
    """(weights format, KV cache format) of a row: its precision, and its own KV precision if it gives
    one; FP8 of a model published block-scaled (`model`, its catalog key) is fp8_block."""
    p = PRECISIONS.get(str(row.get("precision", "")).upper().strip())
    if p is None:
        return None
    weights = "fp8_block" if p[0] == "fp8" and model in BLOCK_FP8_MODELS else p[0]
    kv = row.get("kv_precision")
    return (weights, PRECISIONS[kv.upper()][1] if kv and kv.upper() in ("FP8", "BF16", "FP16") else p[1])
