"""Artifact kinds: each module lowers the spec into actions of its kind and runs them."""

from __future__ import annotations

from types import ModuleType

from . import calibration, capacity, hostplan, hostscript, llmapi, quality_gate, quantize, snapshot

KINDS: dict[str, ModuleType] = {m.KIND: m for m in (snapshot, llmapi, calibration, quantize, quality_gate, hostplan,
                                                     hostscript, capacity)}
