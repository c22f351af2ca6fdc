"""A long fuzz run of the store's readers over mutated store files (not a test).

The inputs come from the property test's strategies (tests/test_fuzz_store.py): a built quickstart
store with one to three store files mutated (records, refs, the release history, the digest cache,
tree and release manifests, objects, logs, the store's folders and lock files; random bytes, deep
JSON, huge integers, JSON of another type, hostile tree paths, or a link out of the store, a link to
/dev/zero, a FIFO or a directory in their place). Each input runs `kiln store verify`, `plan`,
`export`, `store gc`, `store verify --repair`, `export` again and `store verify`, in process.

A crash is an exit code 3 (an exception escaping a command), a Python warning or a command that
does not answer within a minute (a blocking read); a change to the directory outside the store that
the input's links point to is counted apart. The run prints the inputs tried, the crashes (the
first few in full), the outside changes and the exit codes; with --minutes, the inputs left when
the time is up are not run (and are not counted).

Run from the repository root: python3 benchmarks/fuzz_store.py [--inputs 10000] [--seed 1] [--minutes M]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.test_fuzz_store import mutations, template  # noqa: E402


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs to try (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=None, help="stop running inputs after this long")
    ap.add_argument("--show", type=int, default=3, help="crashes to print in full (default 3)")
    args = ap.parse_args(argv)
    os.environ["KILN_DEBUG"] = "1"  # an exception escapes main() with its traceback
    tpl = template()
    tried, crashes, outside, codes = 0, [], [], {}
    start = time.perf_counter()
    deadline = start + args.minutes * 60 if args.minutes else None

    @seed(args.seed)
    @settings(max_examples=args.inputs, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutations, st.integers(0, 10_000))
    def fuzz(muts, pick) -> None:
        nonlocal tried
        if deadline is not None and time.perf_counter() > deadline:
            return
        outcome = tpl.one(muts, pick)
        tried += 1
        for code, n in outcome.codes.items():
            codes[code] = codes.get(code, 0) + n
        crashes.extend((muts, argv, problem) for argv, problem in outcome.crashes)
        if outcome.outside_changed:
            outside.append(muts)
        if tried % 100 == 0:
            print(f"  {tried} inputs, {len(crashes)} crashes, {len(outside)} outside changes, "
                  f"{time.perf_counter() - start:.0f}s", flush=True)

    fuzz()
    total = time.perf_counter() - start
    print(f"inputs tried: {tried} in {total:.0f}s ({tried / total:.2f}/s), {tried * 7} commands")
    print("exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())))
    print(f"crashes: {len(crashes)}")
    print(f"changes outside the store: {len(outside)}")
    for muts, argv, problem in crashes[: args.show]:
        shown = [(t, h, p[:80] if isinstance(p, bytes) else p) for t, h, p in muts]
        print(f"--- kiln {' '.join(argv)} after {shown}:\n{problem[-3000:]}")
    for muts in outside[: args.show]:
        print(f"--- outside changed after {[(t, h, p[:80] if isinstance(p, bytes) else p) for t, h, p in muts]}")
    tpl.dir.cleanup()
    return 1 if crashes or outside else 0


if __name__ == "__main__":
    sys.exit(main_())
