"""Artifact kinds: each module lowers the spec into actions of its kind and runs them."""

from __future__ import annotations

from types import ModuleType

from . import calibration, capacity, hostplan, hostscript, llmapi, quality_gate, quantize, snapshot
from . import model_source, triton_repo  # f6-triton (model_source: a stand-in until main's lands)

KINDS: dict[str, ModuleType] = {m.KIND: m for m in (snapshot, llmapi, calibration, quantize, quality_gate, hostplan,
                                                     hostscript, capacity,
                                                     model_source, triton_repo)}
