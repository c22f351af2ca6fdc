"""The seams' figures (not a test): `kiln validate` and `kiln plan` start-up in a fresh process, how
many compiler modules each imports (and whether an action kind or a module of compiler/targets/ is
among them), target-name comparisons outside compiler/targets/, the layers' nevers broken
(scripts/import_cycles.py), and functions above McCabe 25 (ruff C901).

Each command runs `--repeat` times in a new interpreter on examples/quickstart/kiln.yaml (a private
store directory, so nothing is built or shared); the median and the fastest wall times are printed.
Run from the repository root: python3 benchmarks/bench_seams.py [--repeat 7] [--spec PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from import_cycles import broken_nevers, module_edges  # noqa: E402  (the test reads the same walks)
from seams import spec_reads, target_comparisons  # noqa: E402

# the modules one command imports, printed by the child itself
_PROBE = """
import sys, runpy, io, contextlib
sys.argv = ["kiln", *sys.argv[1:]]
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        runpy.run_module("compiler", run_name="__main__")
    except SystemExit:
        pass
mods = sorted(m for m in sys.modules if m == "compiler" or m.startswith("compiler."))
print(len(mods), sum(m.startswith(("compiler.actions.", "compiler.targets.")) for m in mods))
"""


def _time(argv: list[str], repeat: int, env: dict) -> tuple[float, float]:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "compiler", *argv], env=env, capture_output=True, check=False)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), min(walls)


def complex_functions(root: Path = ROOT) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "C901",
                           "--config", "lint.mccabe.max-complexity=25", "--output-format", "concise",
                           "compiler"], cwd=root, capture_output=True, text=True, check=False)
    return [line for line in proc.stdout.splitlines() if "C901" in line]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--spec", default=str(ROOT / "examples" / "quickstart" / "kiln.yaml"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KILN_STORE": store}
        for command in ("validate", "plan"):
            median, best = _time([command, args.spec], args.repeat, env)
            probe = subprocess.run([sys.executable, "-c", _PROBE, command, args.spec], env=env,
                                   capture_output=True, text=True, check=False).stdout.split()
            print(f"kiln {command}: median {median * 1000:.0f} ms, fastest {best * 1000:.0f} ms "
                  f"({args.repeat} fresh processes); imports {probe[0]} compiler modules, "
                  f"{probe[1]} of them action kinds or what a target builds (compiler/targets/)")
    found = target_comparisons()
    print(f"target-name comparisons outside compiler/targets/: {len(found)} in "
          f"{len({f.split(':')[0] for f in found})} modules")
    for f in found:
        print(f"  {f}")
    broken = broken_nevers(module_edges())
    print(f"layers' nevers broken, transitively (scripts/import_cycles.py NEVERS): {len(broken)}")
    for line in broken:
        print(f"  {line}")
    reads = spec_reads()
    print(f"reads of the parsed spec in compiler/checks/ (ctx.spec, ctx.ir.spec): {sum(reads.values())}: "
          + ", ".join(f"{p.rsplit('/', 1)[1]} {n}" for p, n in reads.items()))
    cc = complex_functions()
    print(f"functions above McCabe 25 (ruff C901): {len(cc)}")
    for line in cc:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
