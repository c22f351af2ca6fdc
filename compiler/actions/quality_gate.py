"""`quality-gate`: holds a quantized checkpoint to the spec's accuracy budget. It reads the two
figures `quantize/<model>` measured (quality.json: the unquantized and the quantized model on the
eval set) and fails the build, naming both figures and the allowed regression, when the quantized
model is worse by more than `max_regression_pct`. Its key is the quantize key plus the threshold,
so changing only the threshold re-runs this check and no quantization."""

from __future__ import annotations

import json

from compiler.graph.model import Action
from compiler.store.canonical import pretty_json
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext

OUTPUT = "quality.json"
MANIFEST_FIELDS = ("metric", "samples", "unquantized", "quantized", "regression_pct", "max_regression_pct", "passed")


class QualityGateFailed(Exception):
    pass


class QualityGateParams(Params):
    effect_of_fields = BUILD_INPUT
    model: str
    metric: str
    max_regression_pct: float


class QualityGate(ActionKind[QualityGateParams]):
    kind, version, Params = "quality-gate", 1, QualityGateParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        if ctx.ir.target != "llmapi":
            return []  # it compares the figures quantize/<model> measures
        out = []
        for name, rm in sorted(ctx.ir.models.items()):
            gate = rm.spec.quantization.quality_gate
            if not rm.formats.quantized or gate is None:
                continue
            out.append(self.action(f"{self.kind}/{name}", QualityGateParams(
                model=name, metric=gate.metric, max_regression_pct=gate.max_regression_pct),
                deps=(f"quantize/{name}",)))
        return out

    def run(self, params: QualityGateParams, ctx: RunContext) -> None:
        src = ctx.deps[f"quantize/{params.model}"] / "quality.json"
        figures = json.loads(src.read_text(encoding="utf-8"))
        metric, allowed = figures["metric"], params.max_regression_pct
        if metric != params.metric:
            raise QualityGateFailed(f"quantize measured {metric}, the gate asks for {params.metric}")
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
            raise QualityGateFailed(f"model {params.model!r} fails its quality gate: {summary} "
                                    f"(eval: {figures['samples']} samples)")
        (ctx.out / OUTPUT).write_bytes(pretty_json(doc))
        ctx.log.info("passed: %s", summary)

    def manifest_entry(self, params: QualityGateParams, tree) -> tuple[str, str, dict] | None:
        data = tree.read(OUTPUT)
        if data is None:
            return None
        doc = json.loads(data)
        return "quality", params.model, {k: doc[k] for k in MANIFEST_FIELDS}


KIND = QualityGate()
