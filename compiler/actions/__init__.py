"""Artifact kinds: each module lowers the spec into actions of its kind and runs them."""

from __future__ import annotations

from types import ModuleType

from . import (calibration, capacity, engine, hostplan, hostscript, image, image_context, llmapi, model_source,
               quality_gate, quantize, snapshot, tokenizer, triton_repo)

KINDS: dict[str, ModuleType] = {m.KIND: m for m in (snapshot, llmapi, calibration, model_source, quantize, quality_gate,
                                                     engine, tokenizer, triton_repo, image_context, image, hostplan, hostscript,
                                                     capacity)}
