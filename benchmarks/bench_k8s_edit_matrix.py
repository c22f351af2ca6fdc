"""The whole generated edit matrix of issue 32 (tests/k8s_edit_matrix.py): every spec field of
examples/k8s-two-pools that reaches the Kubernetes tree, changed one at a time on both runtimes, and
`--pairs N` seeded pairs per runtime; each change is simulated (compiler/targets/kubernetes/sim/)
and checked (tests/k8s_edit_matrix.check). Prints the matrix's size, its outcomes and its time.

    PYTHONPATH=. python3 benchmarks/bench_k8s_edit_matrix.py [--pairs 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.k8s_edit_matrix import RUNTIMES, check, pairs, single_edits  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.monotonic()
    outcomes: Counter = Counter()
    failures = []
    with tempfile.TemporaryDirectory(prefix="kiln-matrix-") as tmp:
        for runtime in RUNTIMES:
            t0 = time.monotonic()
            singles = single_edits(runtime, Path(tmp) / runtime / "gen")
            edits = singles + pairs(singles, args.pairs, args.seed)
            gen = time.monotonic() - t0
            for i, edit in enumerate(edits):
                try:
                    outcome, _ = check(edit, Path(tmp) / runtime / f"e{i}")
                except AssertionError as e:
                    outcome = "FAILED"
                    failures.append(f"{edit.name}: {e}")
                outcomes[(runtime, outcome)] += 1
                print(f"{runtime:<10} {outcome:<24} {edit.name}", flush=True)
            print(f"{runtime}: {len(singles)} fields reach the tree, {len(edits) - len(singles)} pairs; "
                  f"generated in {gen:.1f}s, checked in {time.monotonic() - t0 - gen:.1f}s", flush=True)
    print(f"matrix: {sum(outcomes.values())} changes in {time.monotonic() - start:.1f}s")
    for (runtime, outcome), n in sorted(outcomes.items()):
        print(f"  {runtime:<10} {outcome:<24} {n}")
    for f in failures:
        print("FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
