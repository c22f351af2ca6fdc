"""The throughput interval calibrated on left-out groups: what the estimate's error is on rows the
fit did not see, as a function of how far they are from the rows it did.

For each grouping (a whole model, model family, mode, GPU generation, TensorRT-LLM release) every
group is left out in turn, the coefficients refitted on the rest (estimate_fit.fit_groups), and each
left-out row predicted as `kiln plan` would (estimate_unit: the coefficient set and its fallbacks),
with its distance from the refit's rows (estimate_unit.interval_distance). The residuals
ln(measured / estimate) are binned by distance; a bin's interval is their 5th and 95th percentile
(two-sided, 90% stated), each bin at least as wide as the nearer one, and one with too few rows
takes the nearer bin's widened. Published rows only, as the fit.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from compiler.capacity.estimate_fit import Measured, fit_groups, predict, quantile
from compiler.capacity.estimate_unit import (MIN_LOG_SPREAD, STATED_COVERAGE, WIDEN, Traffic, coefficients_for,
                                             interval_distance, interval_logs)
from compiler.catalog.gpus import load_gpu_catalog

GROUPINGS = ("model", "family", "mode", "generation", "release")
#: Upper distance of each bin: the rows' own family and generation; one step away; two; beyond.
BIN_EDGES = (0.75, 1.75, 2.75)
MIN_BIN_ROWS = 20


def estimate_row(c: Measured, table: dict) -> tuple[float, float, float, tuple[float, float]]:
    """(estimate, ceiling, distance, the interval's logs) of a published row from `table`."""
    gpu = load_gpu_catalog()[str(c.facts["gpu"])]
    coef = coefficients_for(gpu.arch, str(c.facts["weights_fmt"]), str(c.facts["release"]), table, memory_class=gpu.memory_class)
    isl, osl = float(c.facts["isl"]), float(c.facts["osl"])
    _, d = interval_distance(c.shape, c.work.batch, Traffic(isl, osl, isl + osl / 2, ""), coef)
    return predict(c.work, coef.coefficients), c.work.output_tokens / c.work.ceiling_s, d, interval_logs(coef, d)


def left_out(cases: Sequence[Measured], groupings: Iterable[str] = GROUPINGS) -> list[tuple[float, float]]:
    """(distance, ln(measured / estimate)) of every row, once per grouping, predicted without its group."""
    out = []
    for fact in groupings:
        for value in sorted({str(c.facts[fact]) for c in cases}):
            train = [c for c in cases if str(c.facts[fact]) != value]
            if not train:
                continue
            table = {"groups": fit_groups(train)}
            for c in cases:
                if str(c.facts[fact]) == value:
                    est, _, d, _ = estimate_row(c, table)
                    out.append((d, math.log(c.tokens_per_s / est)))
    return out


def calibrate(cases: Sequence[Measured], groupings: Iterable[str] = GROUPINGS) -> dict:
    """The interval calibration a coefficient table carries ("interval")."""
    pairs = left_out(cases, groupings)
    tail = (1 - STATED_COVERAGE) / 2
    classes, prev = [], (-MIN_LOG_SPREAD, MIN_LOG_SPREAD)
    floor = 0.0
    for edge in BIN_EDGES:
        res = [r for d, r in pairs if floor < d <= edge or (floor == 0.0 and d == 0.0)]
        if len(res) >= MIN_BIN_ROWS:
            lo, hi = min(prev[0], quantile(res, tail)), max(prev[1], quantile(res, 1 - tail))
        else:
            lo, hi = prev[0] * (1 + WIDEN), prev[1] * (1 + WIDEN)
        classes.append({"max_distance": edge, "rows": len(res), "log_low": round(lo, 4), "log_high": round(hi, 4)})
        prev, floor = (lo, hi), edge
    return {"target_coverage": STATED_COVERAGE, "groupings": list(groupings), "classes": classes,
            "method": "residuals ln(measured/estimate) of rows left out by group, binned by distance "
                      "(compiler/capacity/estimate_calibrate.py)"}
