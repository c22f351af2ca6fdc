"""Artifact kinds: one module per kind, each lowering the IR into actions of its kind and running them.

`REGISTRY` is what a build gives the planner and the executor; its order is the lowering order.
"""

from __future__ import annotations

from compiler.graph.kinds import KindRegistry

from . import (calibration, capacity, disaggregated, engine, hostplan, hostscript, image, image_context, k8s_deployment,
               k8s_dgd, k8s_nodes, k8s_release, llmapi, model_source, quality_gate, quantize, snapshot, tokenizer,
               triton_repo)

REGISTRY = KindRegistry([snapshot.KIND, llmapi.KIND, disaggregated.KIND, calibration.KIND, model_source.KIND, quantize.KIND,
                         quality_gate.KIND, engine.KIND, hostplan.KIND, hostscript.KIND, capacity.KIND,
                         tokenizer.KIND, triton_repo.KIND, image_context.KIND, image.KIND,
                         k8s_nodes.KIND, k8s_deployment.KIND, k8s_dgd.KIND, k8s_release.KIND])

__all__ = ["REGISTRY"]
