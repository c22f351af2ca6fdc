"""Time the quickstart's quantization on this machine (not a test).

Builds examples/quickstart into an empty store with one job (so the two quantize actions do not
share the CPU) and prints each model action's duration, from the store's records; then rebuilds
with nothing changed and prints that no-op build's time. The quantize action covers loading the
model, evaluating it unquantized, calibrating, fake-quantizing, evaluating again and exporting.

Run from the repository root: python3 benchmarks/bench_quantize.py [--jobs 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.build import build_spec  # noqa: E402
from compiler.graph.builder import Builder  # noqa: E402
from compiler.store.local import LocalStore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    spec = ROOT / "examples" / "quickstart" / "kiln.yaml"
    with tempfile.TemporaryDirectory(prefix="kiln-bench-quantize-") as tmp:
        store = LocalStore(Path(tmp) / "store")
        builder = Builder(fixed=frozenset({"torch"}))
        start = time.monotonic()
        cold = build_spec(spec, store, jobs=args.jobs, builder=builder)
        cold_s = time.monotonic() - start
        if cold.failed:
            print("build failed:", [(r.id, r.error) for r in cold.failed])
            return 1
        print(f"cold build of the quickstart ({len(cold.results)} actions, --jobs {args.jobs}): {cold_s:.1f} s")
        for aid in sorted(cold.results):
            r = cold.results[aid]
            if aid.startswith(("quantize/", "quality-gate/", "calibration-set/")):
                print(f"  {aid:28s} {r.duration_s:7.2f} s")
        start = time.monotonic()
        again = build_spec(spec, store, jobs=args.jobs, builder=builder)
        print(f"no-op rebuild: {time.monotonic() - start:.2f} s, {len(again.executed)} executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
