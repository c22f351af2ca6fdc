"""Time `kiln build` cold against a no-op rebuild, and `kiln plan` on a 1,000-model spec (not a test).

1. The example with the most actions is built into an empty store (cold), then built again with
   nothing changed (no-op: every action cached). Both are timed in process (`build_spec`) and as
   the command a user runs (`python3 -m compiler build`, interpreter start included).
2. The 1,000-model fleet of benchmarks/bench_validate.py is planned against an empty store, in
   process (`plan_spec`: validate, hash inputs, lower, look up every action) and as `kiln plan`;
   validation alone is timed too, so the cost of the graph (lowering, keys, store look-ups) shows.

Run from the repository root: python3 benchmarks/bench_build.py [--repeat 3] [--models 1000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_validate import generate  # noqa: E402

# A bare builder on every machine: model actions (torch, network, GPU) are deferred, so the figures are
# the graph, the store and the pure actions, comparable between machines and revisions.
os.environ["KILN_BUILDER_HAS"] = ""

from compiler.build import build_spec, plan_spec  # noqa: E402
from compiler.pipeline import validate_path  # noqa: E402
from compiler.store.local import LocalStore  # noqa: E402


def largest_example(scratch: Path) -> tuple[str, int]:
    sizes = []
    for spec in sorted((ROOT / "examples").glob("*/kiln.yaml")):
        outcome = plan_spec(spec, LocalStore(scratch / f"count-{spec.parent.name}"))
        if outcome.graph is not None:
            sizes.append((len(outcome.graph.order), spec.parent.name))
    count, name = max(sizes)
    return name, count


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def cli(*args: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "compiler", *args], capture_output=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"kiln {' '.join(args)} failed:\n{proc.stderr.decode()}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is shown")
    ap.add_argument("--models", type=int, default=1000, help="models in the generated spec for `plan`")
    args = ap.parse_args()
    rows: list[tuple[str, str, float, str]] = []

    with tempfile.TemporaryDirectory(prefix="kiln-bench-build-") as tmp:
        scratch = Path(tmp)
        name, n_actions = largest_example(scratch)
        spec_dir = scratch / "example"
        shutil.copytree(ROOT / "examples" / name, spec_dir)
        spec = spec_dir / "kiln.yaml"

        cold, noop, cold_cli, noop_cli = [], [], [], []
        for i in range(args.repeat):
            store = LocalStore(scratch / f"store-{i}")
            seconds, out = timed(lambda: build_spec(spec, store))
            assert not out.failed and len(out.executed) + len(out.deferred) == n_actions
            ran = len(out.executed)
            cold.append(seconds)
            seconds, out = timed(lambda: build_spec(spec, store))
            assert out.executed == []
            noop.append(seconds)
            cli_store = str(scratch / f"cli-store-{i}")
            cold_cli.append(cli("build", str(spec), "--store", cli_store, "-q", "--allow-partial"))
            noop_cli.append(cli("build", str(spec), "--store", cli_store, "-q", "--allow-partial"))
        what = f"{name}, {n_actions} actions ({ran} run, the model actions deferred)"
        rows += [
            ("build, cold (in process)", what, min(cold), ""),
            ("build, no-op (in process)", what, min(noop), f"cold/no-op {min(cold) / min(noop):.1f}x"),
            ("kiln build, cold", what, min(cold_cli), ""),
            ("kiln build, no-op", what, min(noop_cli), f"cold/no-op {min(cold_cli) / min(noop_cli):.1f}x"),
        ]

        fleet = scratch / f"fleet-{args.models}.yaml"
        fleet.write_text(generate(args.models), encoding="utf-8")
        plans, plans_cli, validations = [], [], []
        n_fleet = 0
        for i in range(args.repeat):
            validations.append(timed(lambda: validate_path(fleet))[0])
            seconds, out = timed(lambda: plan_spec(fleet, LocalStore(scratch / f"plan-store-{i}")))
            if not out.validation.ok:
                errors = [d for d in out.validation.diagnostics if d.is_error]
                raise SystemExit(f"the generated spec does not validate: {errors[0].code} {errors[0].message}")
            n_fleet = len(out.plan)
            plans.append(seconds)
            plans_cli.append(cli("plan", str(fleet), "--store", str(scratch / f"plan-cli-store-{i}"),
                                 "--format", "json"))
        what = f"{args.models} models, {n_fleet} actions, {fleet.stat().st_size:,} bytes"
        graph_part = min(plans) - min(validations)
        rows += [
            ("validate only (in process)", what, min(validations), ""),
            ("plan, empty store (in process)", what, min(plans),
             f"{graph_part:.3f}s beyond validation: {graph_part / n_fleet * 1e6:.0f} us/action"),
            ("kiln plan --format json", what, min(plans_cli), ""),
        ]

    print(f"best of {args.repeat} runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    w = max(len(r[0]) for r in rows)
    v = max(len(r[1]) for r in rows)
    print(f"{'what':<{w}}  {'spec':<{v}}  {'seconds':>8}  note")
    print(f"{'-' * w}  {'-' * v}  {'-' * 8}  ----")
    for label, spec_desc, seconds, note in rows:
        print(f"{label:<{w}}  {spec_desc:<{v}}  {seconds:>8.3f}  {note}")


if __name__ == "__main__":
    main()
