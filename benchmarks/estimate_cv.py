"""Cross-validated error of the performance estimate (compiler/capacity/estimate.py), and plan time.

For each way of grouping the published rows every group is left out in turn: by model, by model
family (Llama, Mixtral, Qwen3: a family the fit never saw), by mode (dense or MoE: the MoE rows are
two families only, so leaving them all out is what a new MoE architecture looks like), by GPU
generation (Hopper, Blackwell), by GPU and by TensorRT-LLM release. The coefficients are refitted
on the other rows (estimate_fit.fit_groups), the left-out rows are predicted with the coefficient
set `kiln plan` would pick from that refit (its fallbacks included), and the error of the output
tokens/s at saturation is recorded, with whether the interval `kiln plan` would print holds the
measured value, the interval calibrated (estimate_calibrate) on the training rows alone (nested:
the left-out group is in neither the fit nor the interval's calibration). Printed: per grouping and per left-out group, median |error|, the median signed
error (bias), the fraction within +-25% and +-50%, and the interval's coverage beside the coverage
it states; then how many rows are above the ceiling (the roofline) and how many estimates are.
Attention-DP and expert-parallel rows: the published rows have none, so no fold can leave them out
(the report says so rather than print a number).

Then the time `validate_path` (the analysis `kiln plan` runs, estimates included) takes per example
spec, in process, best of --repeat.

Run from the repository root: python3 benchmarks/estimate_cv.py [--repeat 5] [--rows FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.capacity.estimate_fit import fit_groups, predict, published_case  # noqa: E402
from compiler.capacity.estimate_calibrate import calibrate, estimate_row  # noqa: E402
from compiler.capacity.estimate_unit import STATED_COVERAGE, coefficients_for  # noqa: E402
from compiler.catalog.gpus import load_gpu_catalog  # noqa: E402

ROWS = ROOT / "tests" / "data" / "perf" / "trtllm-published-throughput.json"
GROUPINGS = {"model": "model", "family": "family", "mode": "mode", "generation": "generation", "GPU": "gpu",
             "release": "release"}


def stats(results: list[tuple[float, bool]]) -> tuple[float, float, float, float, float]:
    """median |error|, median error, within 25%, within 50%, interval coverage."""
    a = [abs(e) for e, _ in results]
    n = len(a)
    return (statistics.median(a), statistics.median(e for e, _ in results), sum(x <= 0.25 for x in a) / n,
            sum(x <= 0.5 for x in a) / n, sum(cov for _, cov in results) / n)


def estimate_of(c, table) -> tuple[float, bool]:
    """(relative error of the estimate, whether its interval holds the measured value) for a row,
    with the coefficient set and interval `kiln plan` would give it from `table`."""
    value, ceiling, _, (lo, hi) = estimate_row(c, table)
    low, high = value * math.exp(lo), min(ceiling, value * math.exp(hi))
    return value / c.tokens_per_s - 1, low <= c.tokens_per_s <= high


def left_out_errors(cases, fact: str) -> dict[str, list[tuple[float, bool]]]:
    out: dict[str, list[tuple[float, bool]]] = {}
    for value in sorted({str(c.facts[fact]) for c in cases}):
        train = [c for c in cases if str(c.facts[fact]) != value]
        # nested: the interval too is calibrated on the training rows' own left-out groups
        table = {"groups": fit_groups(train), "interval": calibrate(train)}
        out[value] = [estimate_of(c, table) for c in cases if str(c.facts[fact]) == value]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=Path, default=ROWS)
    p.add_argument("--repeat", type=int, default=5, help="plan timing repeats (0: no timing)")
    args = p.parse_args()
    rows = json.loads(args.rows.read_text(encoding="utf-8"))["rows"]
    cases = [c for c in (published_case(r) for r in rows) if c is not None]
    print(f"{len(cases)} of {len(rows)} published rows usable\n")
    print(f"interval: states {STATED_COVERAGE:.0%} coverage (two-sided); 'covered' is the share of left-out rows "
          f"whose measured value it holds\n")
    head = (f"{'left out':10} {'group':24} {'rows':>5} {'median |err|':>13} {'median err':>11} {'within 25%':>11} "
            f"{'within 50%':>11} {'covered':>8}")
    print(head)

    def line(name, value, res):
        m, bias, w25, w50, cov = stats(res)
        print(f"{name:10} {value:24} {len(res):5} {m:13.1%} {bias:+11.1%} {w25:11.0%} {w50:11.0%} {cov:8.0%}")

    every = []
    for name, fact in GROUPINGS.items():
        per = left_out_errors(cases, fact)
        for value, res in per.items():
            line(name, value, res)
        every += [r for res in per.values() for r in res]
        line(name, "(all left-out rows)", [r for res in per.values() for r in res])
        print()
    line("(every)", "all folds' left-out rows", every)
    print()
    print("attention-DP / expert-parallel: no published row has either, so no fold can leave them out\n")
    table = {"groups": fit_groups(cases), "interval": calibrate(cases)}
    line("(none)", "in-sample, all rows", [estimate_of(c, table) for c in cases])
    print()
    gpus = load_gpu_catalog()
    over_ceiling = sum(c.tokens_per_s > c.work.output_tokens / c.work.ceiling_s for c in cases)
    est_over = 0
    for c in cases:
        coef = coefficients_for(gpus[str(c.facts["gpu"])].arch, str(c.facts["weights_fmt"]), str(c.facts["release"]),
                                table)
        est_over += predict(c.work, coef.coefficients) > c.work.output_tokens / c.work.ceiling_s * (1 + 1e-9)
    print(f"rows above the ceiling: {over_ceiling} of {len(cases)}; estimates above it: {est_over}")
    ratios = sorted(c.tokens_per_s / (c.work.output_tokens / c.work.ceiling_s) for c in cases)
    print(f"measured / ceiling: median {statistics.median(ratios):.2f}, "
          f"p10 {ratios[len(ratios) // 10]:.2f}, p90 {ratios[len(ratios) * 9 // 10]:.2f}\n")

    if args.repeat < 1:
        return 0
    from compiler.pipeline import validate_path

    print("plan analysis time per example (validate_path, in process, best of %d):" % args.repeat)
    for spec in sorted((ROOT / "examples").glob("*/kiln.yaml")):
        best = math.inf
        for _ in range(args.repeat):
            t = time.perf_counter()
            v = validate_path(spec)
            v.resolved.capacity_rows()
            best = min(best, time.perf_counter() - t)
        print(f"  {spec.parent.name:28} {best * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
