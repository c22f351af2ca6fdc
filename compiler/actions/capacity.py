"""`capacity-report`: the capacity figures of one host's serving units (`kiln plan` shows the
same), as JSON and markdown. The figures are computed once, by the analysis (compiler/ir), and
are the action's parameters: the report is rebuilt exactly when a figure it shows changes."""

from __future__ import annotations

from typing import Any

from compiler.capacity.render import render_capacity
from compiler.graph.model import Action
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext


class CapacityReportParams(Params):
    effect_of_fields = BUILD_INPUT
    host: str
    rows: list[dict[str, Any]]  # compiler.capacity.render.unit_row per sized unit, in spec order


# The spec values the sizing reads (compiler/capacity/report.py), for the plan's reasons.
_READS = {"dtype": True, "parallelism": True,
          "quantization": {"weights", "activations", "kv_cache", "exclude", "overrides", "block_size"},
          "limits": {"max_seq_len", "max_batch_size", "max_num_tokens"},
          "runtime": {"kv_cache_memory_fraction"}}


def _cause(ctx: LowerContext, host: str) -> dict[str, Any]:
    """Rooted at the spec, so the plan's reasons are spec paths (hosts.<h>.gpus[1].mig[2].profile)."""
    units = ctx.ir.host_units(host)
    return {"hosts": {host: ctx.ir.hosts[host].spec.model_dump(mode="json",
                                                              include={"gpu", "count", "price_per_gpu_hour", "gpus"})},
            "models": {m: ctx.ir.models[m].spec.model_dump(mode="json", include=_READS)
                       for m in sorted({u.model for u in units})}}


class CapacityReport(ActionKind[CapacityReportParams]):
    kind, version, Params = "capacity-report", 2, CapacityReportParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        return [self.action(f"{self.kind}/{name}", CapacityReportParams(host=name, rows=ctx.ir.capacity_rows(name)),
                            cause=_cause(ctx, name),
                            inputs=ctx.limit_inputs(u.model for u in ctx.ir.host_units(name)))
                for name in sorted(ctx.ir.hosts)]

    def run(self, params: CapacityReportParams, ctx: RunContext) -> None:
        (ctx.out / "capacity.json").write_text(render_capacity(params.rows, "json") + "\n", encoding="utf-8")
        (ctx.out / "capacity.md").write_text(render_capacity(params.rows, "markdown") + "\n", encoding="utf-8")
        ctx.log.info("%d serving units", len(params.rows))


KIND = CapacityReport()
