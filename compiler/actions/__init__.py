"""Artifact kinds: each module lowers the spec into actions of its kind and runs them."""

from __future__ import annotations

from types import ModuleType

from . import (calibration, capacity, engine, hostplan, hostscript, llmapi, model_source, quality_gate, quantize,
               snapshot)

KINDS: dict[str, ModuleType] = {m.KIND: m for m in (snapshot, llmapi, calibration, model_source, quantize, quality_gate,
                                                     engine, hostplan, hostscript, capacity)}
