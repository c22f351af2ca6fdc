"""A long fuzz run of the registry client against answers drawn from a strategy (not a test).

The inputs come from the property test's strategies (tests/test_fuzz_registry.py): a script of
answers (status codes, headers, bodies, redirects) that a server on 127.0.0.1 gives, request by
request, to one operation of the client (blob and manifest reads and writes, a tag written once,
the build cache's lookup and fetch). A crash is an exception other than the client's own clear
errors, a password in a message, a raw control character in one, or a credential sent to another
origin. The run prints the inputs tried, the rate, the crashes (the first few in full) and the
slowest input.

Run from the repository root: python3 benchmarks/fuzz_registry.py [--inputs 10000] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from tests.test_fuzz_registry import CASES, Case, Harness  # noqa: E402


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs to try (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=3, help="crashes to print in full (default 3)")
    args = ap.parse_args(argv)
    h = Harness()
    tried, crashes, by_op = 0, [], {}
    slowest: tuple[float, Case | None] = (0.0, None)

    @seed(args.seed)
    @settings(max_examples=args.inputs, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(CASES)
    def fuzz(case: Case) -> None:
        nonlocal tried, slowest
        start = time.perf_counter()
        problem = h.run(case)
        elapsed = time.perf_counter() - start
        tried += 1
        by_op[case.operation] = by_op.get(case.operation, 0) + 1
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
    print(f"inputs tried: {tried} in {total:.0f}s ({tried / total:.1f}/s)")
    print("operations: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_op.items())))
    print(f"crashes: {len(crashes)}")
    for case, problem in crashes[: args.show]:
        script = [(a.status, a.headers, a.body[:200], a.repeat) for a in case.script]
        print(f"--- {case.operation} (password {case.password!r}, size {case.size}) on {script}\n{problem}")
    secs, case = slowest
    if case is not None:
        print(f"slowest input: {secs:.2f}s, {case.operation} over {len(case.script)} answer(s)")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main_())
