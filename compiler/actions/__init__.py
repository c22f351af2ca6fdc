"""Artifact kinds: one module per kind, each lowering the IR into actions of its kind and running them.

These are the kinds every deploy target shares (a model's snapshot, quantized checkpoint and engine,
the serving image); each target adds its own (compiler/targets/). The build's registry, common kinds
first, is compiler.targets.registry.REGISTRY.
"""

from __future__ import annotations

from . import (calibration, capacity, disaggregated, engine, image, image_context, llmapi, model_source,
               quality_gate, quantize, snapshot, tokenizer, triton_repo, weights_image)

COMMON = (snapshot.KIND, llmapi.KIND, disaggregated.KIND, calibration.KIND, model_source.KIND, quantize.KIND,
          quality_gate.KIND, engine.KIND, capacity.KIND, tokenizer.KIND, triton_repo.KIND, image_context.KIND,
          image.KIND, weights_image.KIND)

__all__ = ["COMMON"]
