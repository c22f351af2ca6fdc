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
the time is up are not run (and are not counted). With --jobs N, N processes share the inputs.
Each input copies a 2 MB store and deletes it again: TMPDIR on a memory file system (/dev/shm) saves
most of the time that is not the commands'.

Run from the repository root: python3 benchmarks/fuzz_store.py [--inputs 10000] [--seed 1] [--minutes M] [--jobs N]
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


def fuzz_share(inputs: int, seed_: int, deadline: float | None, start: float, label: str) -> dict:
    """`inputs` inputs drawn with `seed_`: what they did (picklable, for --jobs)."""
    os.environ["KILN_DEBUG"] = "1"  # an exception escapes main() with its traceback
    tpl = template()
    tried, crashes, outside, codes = 0, [], [], {}

    @seed(seed_)
    @settings(max_examples=inputs, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutations, st.integers(0, 10_000))
    def fuzz(muts, pick) -> None:
        nonlocal tried
        if deadline is not None and time.time() > deadline:
            return
        outcome = tpl.one(muts, pick)
        tried += 1
        for code, n in outcome.codes.items():
            codes[code] = codes.get(code, 0) + n
        crashes.extend((muts, argv, problem) for argv, problem in outcome.crashes)
        if outcome.outside_changed:
            outside.append(muts)
        if tried % 100 == 0:
            print(f"  {label}{tried} inputs, {len(crashes)} crashes, {len(outside)} outside changes, "
                  f"{time.time() - start:.0f}s", flush=True)

    try:
        fuzz()
    finally:
        tpl.dir.cleanup()
    return {"tried": tried, "crashes": crashes, "outside": outside, "codes": codes}


def _share(job: tuple) -> dict:
    return fuzz_share(*job)


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs to try (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=None, help="stop running inputs after this long")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes that share the inputs, process i drawing with seed SEED+i (default 1)")
    ap.add_argument("--show", type=int, default=3, help="crashes to print in full (default 3)")
    args = ap.parse_args(argv)
    if args.inputs < 1 or args.jobs < 1:
        ap.error("--inputs and --jobs take a number of at least 1")
    start = time.time()
    deadline = start + args.minutes * 60 if args.minutes else None
    jobs = min(args.jobs, args.inputs)
    shares = [(args.inputs // jobs + (i < args.inputs % jobs), args.seed + i, deadline, start,
               f"[{i + 1}/{jobs}] " if jobs > 1 else "") for i in range(jobs)]
    if jobs == 1:
        results = [_share(shares[0])]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(_share, shares)
    tried = sum(r["tried"] for r in results)
    crashes = [c for r in results for c in r["crashes"]]
    outside = [m for r in results for m in r["outside"]]
    codes: dict[int, int] = {}
    for r in results:
        for code, n in r["codes"].items():
            codes[code] = codes.get(code, 0) + n
    total = time.time() - start
    print(f"inputs tried: {tried} in {total:.0f}s ({tried / total:.2f}/s), {tried * 7} commands")
    print("exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())))
    print(f"crashes: {len(crashes)}")
    print(f"changes outside the store: {len(outside)}")
    for muts, argv, problem in crashes[: args.show]:
        shown = [(t, h, p[:80] if isinstance(p, bytes) else p) for t, h, p in muts]
        print(f"--- kiln {' '.join(argv)} after {shown}:\n{problem[-3000:]}")
    for muts in outside[: args.show]:
        print(f"--- outside changed after {[(t, h, p[:80] if isinstance(p, bytes) else p) for t, h, p in muts]}")
    return 1 if crashes or outside else 0


if __name__ == "__main__":
    sys.exit(main_())
