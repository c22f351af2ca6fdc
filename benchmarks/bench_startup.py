"""Start-up of `kiln validate` and `kiln plan` in a fresh process (not a test).

Each command runs --repeat times as `python -m compiler ...` on the quickstart (plan against an
empty store in a temporary directory); the run prints, per command, the median and the best wall
time and the median CPU time (user + system of the child: what an idle machine's wall time comes
to, less the disk) beside the 1-minute load average, so figures taken on a busy machine can be
read. Issue 36's targets, on an idle 2-core machine: validate <= 0.5 s, plan <= 1 s.

Run from the repository root: python3 benchmarks/bench_startup.py [--repeat 7] [--spec PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _once(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh `python -m compiler ARGV`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compiler", *argv], capture_output=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 4):
        raise SystemExit(f"kiln {' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "quickstart" / "kiln.yaml")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kiln-bench-startup-") as tmp:
        commands = {"validate": ["validate", str(args.spec)],
                    "plan": ["plan", str(args.spec), "--store", str(Path(tmp) / "store")]}
        _once(commands["validate"])  # warm the page cache (and __pycache__) first
        print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
        for name, command in commands.items():
            runs = [_once(command) for _ in range(args.repeat)]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(f"kiln {name:<8} wall median {statistics.median(walls):.3f} s, best {min(walls):.3f} s; "
                  f"CPU median {statistics.median(cpus):.3f} s  ({args.repeat} fresh processes)")
        print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
