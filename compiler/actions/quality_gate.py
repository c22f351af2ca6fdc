"""`quality-gate`: holds a quantized checkpoint to the spec's accuracy budget. It reads the two
figures `quantize/<model>` measured (quality.json: the unquantized and the quantized model on the
eval set) and fails the build, naming both figures and the allowed regression, when the quantized
model is worse by more than `max_regression_pct`. Its key is the quantize key plus the threshold,
so changing only the threshold re-runs this check and no quantization."""

from __future__ import annotations

import json

from compiler.graph.model import Action
from compiler.store.canonical import pretty_json

from .base import LowerContext, RunContext

KIND, VERSION = "quality-gate", 1


class QualityGateFailed(Exception):
    pass


def lower(ctx: LowerContext) -> list[Action]:
    if ctx.spec.target != "llmapi":
        return []  # it compares the figures quantize/<model> measures
    out = []
    for name, model in sorted(ctx.spec.models.items()):
        q = model.quantization
        if not q.quantized or q.quality_gate is None:
            continue
        params = {"model": name, "metric": q.quality_gate.metric, "max_regression_pct": q.quality_gate.max_regression_pct}
        out.append(Action(f"{KIND}/{name}", KIND, VERSION, params, deps=(f"quantize/{name}",)))
    return out


def run(params: dict, ctx: RunContext) -> None:
    src = ctx.deps[f"quantize/{params['model']}"] / "quality.json"
    figures = json.loads(src.read_text(encoding="utf-8"))
    metric, allowed = figures["metric"], params["max_regression_pct"]
    if metric != params["metric"]:
        raise QualityGateFailed(f"quantize measured {metric}, the gate asks for {params['metric']}")
    base, quant, reg = figures["unquantized"], figures["quantized"], figures["regression_pct"]
    recipe = figures.get("recipe", {})
    what = f"{recipe.get('weights', 'quantized')} weights" + (
        f", {recipe['kv_cache']} KV cache" if recipe.get("kv_cache") not in (None, "auto") else "")
    better = "lower" if metric == "perplexity" else "higher"
    summary = (f"{metric} unquantized {base:g}, quantized ({what}) {quant:g} ({better} is better): "
               f"regression {'unbounded' if reg is None else f'{reg:.3f}%'}, allowed {allowed:g}%")
    passed = reg is not None and reg <= allowed
    doc = {**figures, "max_regression_pct": allowed, "passed": passed}
    if not passed:
        raise QualityGateFailed(f"model {params['model']!r} fails its quality gate: {summary} "
                                f"(eval: {figures['samples']} samples)")
    (ctx.out / "quality.json").write_bytes(pretty_json(doc))
    ctx.log.info("passed: %s", summary)
