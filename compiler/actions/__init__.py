"""Artifact kinds: each module lowers the spec into actions of its kind and runs them."""

from __future__ import annotations

from types import ModuleType

from . import calibration, capacity, hostplan, hostscript, llmapi, quality_gate, quantize, snapshot
from . import image, image_context, model_source, triton_repo  # issue 6 (model_source, triton_repo: stand-ins)

KINDS: dict[str, ModuleType] = {m.KIND: m for m in (snapshot, llmapi, calibration, quantize, quality_gate, hostplan,
                                                     hostscript, capacity)}
KINDS.update({m.KIND: m for m in (triton_repo, model_source, image_context, image)})  # issue 6
