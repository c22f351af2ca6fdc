"""Cross-validated error of the performance estimate (compiler/capacity/estimate.py), and plan time.

For each way of grouping the published rows (by model, by GPU, by TensorRT-LLM release) every group
is left out in turn: the coefficients are refitted on the other rows (estimate_fit.fit_groups), the
left-out rows are predicted with the coefficient set `kiln plan` would pick from that refit (its
fallbacks included), and the error of the output tokens/s at saturation is recorded. Printed: per
grouping and per left-out group, median |error| and the fraction within +-25% and +-50%; and how
many rows are above the ceiling (the roofline) and how many estimates are.

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

from compiler.capacity.estimate_fit import PRECISIONS, fit_groups, predict, published_case  # noqa: E402
from compiler.capacity.estimate_unit import coefficients_for  # noqa: E402
from compiler.catalog.gpus import load_gpu_catalog  # noqa: E402

ROWS = ROOT / "tests" / "data" / "perf" / "trtllm-published-throughput.json"
GROUPINGS = {"model": "model", "GPU": "gpu", "release": "release"}


def stats(errors: list[float]) -> tuple[float, float, float]:
    a = [abs(e) for e in errors]
    return statistics.median(a), sum(x <= 0.25 for x in a) / len(a), sum(x <= 0.5 for x in a) / len(a)


def left_out_errors(cases, fact: str) -> dict[str, list[float]]:
    gpus = load_gpu_catalog()
    out: dict[str, list[float]] = {}
    for value in sorted({str(c.facts[fact]) for c in cases}):
        train = [c for c in cases if str(c.facts[fact]) != value]
        table = {"groups": fit_groups(train)}
        for c in cases:
            if str(c.facts[fact]) != value:
                continue
            wfmt, _ = PRECISIONS[str(c.facts["precision"])]
            coef = coefficients_for(gpus[str(c.facts["gpu"])].arch, wfmt, str(c.facts["release"]), table)
            out.setdefault(value, []).append(predict(c.work, coef.coefficients) / c.tokens_per_s - 1)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=Path, default=ROWS)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    rows = json.loads(args.rows.read_text(encoding="utf-8"))["rows"]
    cases = [c for c in (published_case(r) for r in rows) if c is not None]
    print(f"{len(cases)} of {len(rows)} published rows usable\n")
    print(f"{'left out':10} {'group':24} {'rows':>5} {'median |err|':>13} {'within 25%':>11} {'within 50%':>11}")
    for name, fact in GROUPINGS.items():
        per = left_out_errors(cases, fact)
        for value, errs in per.items():
            m, w25, w50 = stats(errs)
            print(f"{name:10} {value:24} {len(errs):5} {m:13.1%} {w25:11.0%} {w50:11.0%}")
        allerr = [e for errs in per.values() for e in errs]
        m, w25, w50 = stats(allerr)
        print(f"{name:10} {'(all left-out rows)':24} {len(allerr):5} {m:13.1%} {w25:11.0%} {w50:11.0%}\n")
    table = {"groups": fit_groups(cases)}
    gpus = load_gpu_catalog()
    over_ceiling = sum(c.tokens_per_s > c.work.output_tokens / c.work.ceiling_s for c in cases)
    est_over = 0
    for c in cases:
        wfmt, _ = PRECISIONS[str(c.facts["precision"])]
        coef = coefficients_for(gpus[str(c.facts["gpu"])].arch, wfmt, str(c.facts["release"]), table)
        est_over += predict(c.work, coef.coefficients) > c.work.output_tokens / c.work.ceiling_s * (1 + 1e-9)
    print(f"rows above the ceiling: {over_ceiling} of {len(cases)}; estimates above it: {est_over}")
    ratios = sorted(c.tokens_per_s / (c.work.output_tokens / c.work.ceiling_s) for c in cases)
    print(f"measured / ceiling: median {statistics.median(ratios):.2f}, "
          f"p10 {ratios[len(ratios) // 10]:.2f}, p90 {ratios[len(ratios) * 9 // 10]:.2f}\n")

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
