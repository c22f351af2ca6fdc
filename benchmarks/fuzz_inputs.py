"""A long fuzz run of the two inputs a team adds beside a spec (not a test): `--gpu-profiles`
captures through `kiln validate`, model config.json files through `kiln plan`.

The inputs come from the property tests' strategies (tests/test_fuzz_inputs.py). A crash is an exit
code other than 0 or 1, an "internal error" or an exception. The run prints, per kind, the inputs
tried, the rate, the crashes (the first few in full, grouped by their last line) and the slowest
input.

Run from the repository root: python3 benchmarks/fuzz_inputs.py [--inputs 10000] [--seed 1] [--kind capture|config]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from tests.test_fuzz_inputs import Harness, capture_cases, config_cases  # noqa: E402


def _site(problem: str) -> str:
    """The line that names the crash: kiln's "internal error" line, else the exception's last line."""
    lines = problem.strip().splitlines()
    return next((line for line in lines if "internal error" in line), lines[-1])[:160]


def run(kind: str, inputs: int, seed_: int, show: int) -> int:
    h = Harness()
    tried, crashes = 0, []
    slowest = (0.0, None)
    strategy, check = (capture_cases(), h.run_capture) if kind == "capture" else (config_cases(), h.run_config)

    @seed(seed_)
    @settings(max_examples=inputs, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def fuzz(case) -> None:
        nonlocal tried, slowest
        start = time.perf_counter()
        problem = check(case)
        elapsed = time.perf_counter() - start
        tried += 1
        if problem is not None:
            crashes.append((case, problem))
        if elapsed > slowest[0]:
            slowest = (elapsed, case)

    start = time.perf_counter()
    try:
        fuzz()
    finally:
        h.close()
    total = time.perf_counter() - start
    print(f"{kind}: inputs tried: {tried} in {total:.0f}s ({tried / total:.1f}/s); crashes: {len(crashes)}")
    sites = Counter(_site(problem) for _, problem in crashes)
    for site, n in sites.most_common():
        print(f"  {n} x {site}")
    for case, problem in crashes[:show]:
        print(f"--- {case!r:.600}\n{problem}")
    print(f"  slowest input: {slowest[0]:.2f}s: {slowest[1]!r:.300}")
    return len(crashes)


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs to try per kind (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", choices=["capture", "config", "both"], default="both")
    ap.add_argument("--show", type=int, default=3, help="crashes to print in full per kind (default 3)")
    args = ap.parse_args(argv)
    kinds = ["capture", "config"] if args.kind == "both" else [args.kind]
    return 1 if sum(run(k, args.inputs, args.seed, args.show) for k in kinds) else 0


if __name__ == "__main__":
    sys.exit(main_())
