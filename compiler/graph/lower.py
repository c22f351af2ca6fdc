"""Lowering: a checked spec becomes the action graph."""

from __future__ import annotations

from compiler.actions import (calibration, capacity, engine, hostplan, hostscript, llmapi, model_source, quality_gate,
                              quantize, snapshot, tokenizer, triton_repo)
from compiler.actions import image, image_context
from compiler.actions.base import LowerContext
from compiler.graph.inputs import DigestCache, tree_digests
from compiler.pipeline import Validation

from .model import Graph


class NotBuildable(Exception):
    """The spec has errors; lowering needs a spec that validated."""


def model_inputs(ctx: LowerContext) -> dict[str, dict[str, str]]:
    """Digests of every file each model reads: weights/tokenizer/config, calibration and eval data."""
    out: dict[str, dict[str, str]] = {}
    for name, model in sorted(ctx.spec.models.items()):
        roles: dict[str, str] = {}
        if model.source.path is not None:
            for rel, digest in tree_digests(ctx.base_dir / model.source.path, ctx.digests).items():
                roles[f"source/{rel}"] = digest
        q = model.quantization
        if q.calibration is not None:
            roles["calibration"] = ctx.file_digest(q.calibration.data)
        if q.quality_gate is not None:
            roles["eval"] = ctx.file_digest(q.quality_gate.eval)
        out[name] = roles
    return out


def lower(result: Validation, digests: DigestCache) -> tuple[Graph, LowerContext]:
    if not result.ok or result.spec is None or result.resolved is None:
        raise NotBuildable(f"{result.file} has errors; run `kiln validate` for details")
    ctx = LowerContext(result.spec, result.document, result.resolved, result.base_dir, digests)
    actions = []
    actions += snapshot.lower(ctx, model_inputs(ctx))
    actions += llmapi.lower(ctx)
    actions += calibration.lower(ctx)
    actions += model_source.lower(ctx)
    actions += quantize.lower(ctx)
    actions += quality_gate.lower(ctx)
    actions += engine.lower(ctx)
    actions += hostplan.lower(ctx)
    actions += hostscript.lower(ctx)
    actions += capacity.lower(ctx)
    actions += tokenizer.lower(ctx)
    actions += triton_repo.lower(ctx)
    if ctx.spec.image is not None:  # serving images only when the spec names a repository
        actions += image_context.lower(ctx) + image.lower(ctx)
    return Graph.build(actions), ctx
