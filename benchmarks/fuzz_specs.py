"""A long fuzz run of `kiln validate` and `kiln plan` over mutated specs (not a test).

The inputs come from the property tests' strategies (tests/test_fuzz_specs.py: structured mutations
of the example specs, raw text edits and byte edits, with hostile paths, YAML directives and
anchors among the values). Each input is written as a spec next to the examples' data files and run
through the command line in-process, `kiln plan` (text, markdown or JSON) against a scratch store
or `kiln validate` (text, JSON or SARIF), so everything a user would see is exercised: loading,
parsing, resolution, the passes, the checks, lowering, the plan and the renderers, and (one input in
seven) `kiln build` as a builder without torch, a GPU, the network or Docker, so the actions that
need none of them run.

A crash is an exit code 3 (an exception escaping a command), and so is a Python warning: a library
warning would reach the user's stderr. The run prints the inputs tried, the crashes (each with its
input and traceback, the first few in full) and the slowest input.

`--kind` picks the inputs: `specs` (the above), `pools` (the same, each spec given Kubernetes node
pools, serving runtimes or hostile names first), `locks` (the lock file beside an example spec: its
own mutated, hostile JSON, links out of the repository, a device, a FIFO) or `records` (the tune
record a measured limit reads, likewise), each run through validate, plan and (locks) `lock --check`.
Besides exit 3 and warnings, a raw control character in text output counts as a crash (a name must
reach the terminal escaped).

Run from the repository root: python3 benchmarks/fuzz_specs.py [--kind specs] [--inputs 10000] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from compiler.cli import main  # noqa: E402
from tests.test_fuzz_specs import (_SCRATCH, _place, edited_bytes, edited_texts, lock_files, lock_specs,  # noqa: E402
                                   mutated_specs, pool_specs, tune_record_path, tune_records, tune_spec)

COMMANDS = [["plan"], ["plan", "--format", "json"], ["plan", "--format", "markdown"],
            ["validate"], ["validate", "--format", "json"], ["validate", "--format", "sarif"],
            ["build", "-q", "--allow-partial"]]
INPUT_COMMANDS = {"locks": [["validate"], ["validate", "--format", "json"], ["lock", "--check"], ["plan"]],
                  "records": [["validate"], ["validate", "--format", "sarif"], ["plan"], ["plan", "--format", "json"]]}


class Run:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.tried = 0
        self.crashes: list[tuple[str, bytes, str]] = []
        self.slowest: tuple[float, bytes, list[str]] = (0.0, b"", [])
        self.exit_codes: dict[int, int] = {}

    def one(self, raw: bytes, which: int, spec: Path | None = None, commands: list[list[str]] = COMMANDS) -> None:
        """`raw` as the spec (or, given `spec`, whatever the caller placed beside it) through one command."""
        if spec is None:
            spec = Path(_SCRATCH.name) / "kiln.yaml"
            spec.write_bytes(raw)
        argv = [*commands[which % len(commands)], str(spec)]
        if argv[0] in ("plan", "build"):
            argv += ["--store", str(self.store)]
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        problem = None
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            try:
                code = main(argv)
            except BaseException:  # KILN_DEBUG=1 lets the exception through with its traceback
                code = 3
                problem = traceback.format_exc()
        elapsed = time.perf_counter() - start
        self.tried += 1
        if self.tried % 500 == 0:  # a long run shows where it is (and what it found so far)
            print(f"  {self.tried} inputs, {len(self.crashes) + (problem is not None)} crashes", flush=True)
        self.exit_codes[int(code)] = self.exit_codes.get(int(code), 0) + 1
        if problem is None and caught:
            w = caught[0]
            problem = f"warning reached stderr: {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        if problem is None and int(code) == 3:
            problem = err.getvalue()[-2000:]
        if problem is None:
            raw_out = [ln for ln in (out.getvalue() + err.getvalue()).split("\n") if not ln.isprintable()]
            if raw_out:
                problem = f"a raw control character reached the terminal: {raw_out[0][:300]!r}"
        if problem is not None:
            self.crashes.append((" ".join(a for a in argv if not a.startswith("/")), raw, problem))
        if elapsed > self.slowest[0]:
            self.slowest = (elapsed, raw, argv)


def _shown(item: tuple) -> bytes:
    """The input as the report shows it: the file's bytes, or what stood in its place."""
    kind, payload = item
    return payload if kind == "bytes" else f"<{kind} {payload}>".encode()


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs to try (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", choices=["specs", "pools", "locks", "records"], default="specs",
                    help="what to mutate (default specs)")
    ap.add_argument("--show", type=int, default=3, help="crashes to print in full (default 3)")
    args = ap.parse_args(argv)
    os.environ["KILN_DEBUG"] = "1"
    os.environ["KILN_BUILDER_HAS"] = ""  # builds run what needs no torch, GPU, network or Docker
    if args.kind == "specs":
        inputs = st.one_of(mutated_specs().map(lambda t: t.encode("utf-8", "surrogatepass")),
                           edited_texts().map(lambda t: t.encode("utf-8", "surrogatepass")),
                           edited_bytes())
    elif args.kind == "pools":
        inputs = pool_specs().map(lambda t: t.encode("utf-8", "surrogatepass"))
    elif args.kind == "locks":
        inputs = lock_files()
    else:
        inputs = tune_records()
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-store-") as tmp:
        run = Run(Path(tmp) / "store")

        @seed(args.seed)
        @settings(max_examples=args.inputs, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(inputs, st.integers(0, 6))
        def fuzz(item, which: int) -> None:
            if args.kind in ("specs", "pools"):
                run.one(item, which)
            elif args.kind == "locks":
                spec = lock_specs()[item[0]][0]
                _place(spec.with_suffix(".lock"), item[1])
                run.one(_shown(item[1]), which, spec, INPUT_COMMANDS["locks"])
            else:
                _place(tune_record_path(), item)
                run.one(_shown(item), which, tune_spec()[0], INPUT_COMMANDS["records"])

        start = time.perf_counter()
        fuzz()
        total = time.perf_counter() - start
    print(f"{args.kind}: inputs tried: {run.tried} in {total:.0f}s ({run.tried / total:.1f}/s)")
    print("exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(run.exit_codes.items())))
    print(f"crashes: {len(run.crashes)}")
    for cmd, raw, problem in run.crashes[: args.show]:
        print(f"--- {cmd} on {len(raw)} bytes:\n{raw[:3000].decode('utf-8', 'replace')}\n--- {problem}")
    secs, raw, argv = run.slowest
    first = raw.split(b"\n", 1)[0][:80].decode("utf-8", "replace")
    command = " ".join(a for a in argv if not a.startswith("/"))  # without the scratch paths
    print(f"slowest input: {secs:.2f}s, `kiln {command}` on {len(raw)} bytes (first line: {first!r})")
    return 1 if run.crashes else 0


if __name__ == "__main__":
    sys.exit(main_())
