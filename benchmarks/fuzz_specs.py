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

Run from the repository root: python3 benchmarks/fuzz_specs.py [--inputs 10000] [--seed 1]
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
from tests.test_fuzz_specs import _SCRATCH, edited_bytes, edited_texts, mutated_specs  # noqa: E402

COMMANDS = [["plan"], ["plan", "--format", "json"], ["plan", "--format", "markdown"],
            ["validate"], ["validate", "--format", "json"], ["validate", "--format", "sarif"],
            ["build", "-q", "--allow-partial"]]


class Run:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.tried = 0
        self.crashes: list[tuple[str, bytes, str]] = []
        self.slowest: tuple[float, bytes, list[str]] = (0.0, b"", [])
        self.exit_codes: dict[int, int] = {}

    def one(self, raw: bytes, which: int) -> None:
        spec = Path(_SCRATCH.name) / "kiln.yaml"
        spec.write_bytes(raw)
        argv = [*COMMANDS[which % len(COMMANDS)], str(spec)]
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
        self.exit_codes[int(code)] = self.exit_codes.get(int(code), 0) + 1
        if problem is None and caught:
            w = caught[0]
            problem = f"warning reached stderr: {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        if problem is None and int(code) == 3:
            problem = err.getvalue()[-2000:]
        if problem is not None:
            self.crashes.append((" ".join(a for a in argv if not a.startswith("/")), raw, problem))
        if elapsed > self.slowest[0]:
            self.slowest = (elapsed, raw, argv)


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs to try (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=3, help="crashes to print in full (default 3)")
    args = ap.parse_args(argv)
    os.environ["KILN_DEBUG"] = "1"
    os.environ["KILN_BUILDER_HAS"] = ""  # builds run what needs no torch, GPU, network or Docker
    inputs = st.one_of(mutated_specs().map(lambda t: t.encode("utf-8", "surrogatepass")),
                       edited_texts().map(lambda t: t.encode("utf-8", "surrogatepass")),
                       edited_bytes())
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-store-") as tmp:
        run = Run(Path(tmp) / "store")

        @seed(args.seed)
        @settings(max_examples=args.inputs, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(inputs, st.integers(0, len(COMMANDS) - 1))
        def fuzz(raw: bytes, which: int) -> None:
            run.one(raw, which)

        start = time.perf_counter()
        fuzz()
        total = time.perf_counter() - start
    print(f"inputs tried: {run.tried} in {total:.0f}s ({run.tried / total:.1f}/s)")
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
