"""TEMPORARY shim of the format table (replaced by the data-backed module from branch h-formats)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

_DEFAULT_ACTS = {
    "bf16": None, "fp16": None, "fp8": "fp8", "fp8_block": "fp8", "fp8_rowwise": "fp8", "mxfp8": "mxfp8",
    "nvfp4": "nvfp4", "mxfp4": None, "int8": "int8", "int4_awq": None, "int4_gptq": None,
}
_VALID = {
    "fp8": ("fp8",), "fp8_block": ("fp8",), "fp8_rowwise": ("fp8",), "mxfp8": ("mxfp8",),
    "nvfp4": ("nvfp4", "fp8"), "mxfp4": (None, "fp8", "mxfp8"), "int8": ("int8", None),
    "int4_awq": (None, "fp8"), "int4_gptq": (None,),
}


@dataclass(frozen=True)
class Recipe:
    weights: str
    activations: str | None


@dataclass(frozen=True)
class KvFormat:
    name: str


class FormatTable:
    def default_act_quant(self, weights: str) -> str | None:
        return _DEFAULT_ACTS.get(weights)

    def effective_activations(self, weights: str, activations: str | None, dtype: str) -> str:
        if activations is not None:
            return activations
        return _DEFAULT_ACTS.get(weights) or dtype

    def recipe(self, weights: str, act_quant: str | None) -> Recipe | None:
        return Recipe(weights, act_quant) if act_quant in _VALID.get(weights, ()) else None

    def kv(self, fmt: str) -> KvFormat:
        return KvFormat(fmt)


@lru_cache(maxsize=1)
def load_format_table() -> FormatTable:
    return FormatTable()
