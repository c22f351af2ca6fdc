"""The configuration-space walk at scale (issue 33; not a test): specs from tests/spacewalk.py's
generator (the catalog's GPUs and MIG profiles, its models, the format table, the transfer backends,
the Dynamo releases), each validated; the accepted ones, up to --build of them (spread over the
run), built as `kiln build --allow-partial` builds on a machine without torch, GPU, Docker or
network, the deferred engine, model-source and (with ModelOpt installed) quantize actions' preflights
run, their Kubernetes trees rendered, and every emitted file checked by its consumer's rules.

Building and checking takes a fraction of a second a spec (shellcheck most of it), validating a few
hundredths: all specs are validated, a bounded subset built. Each failure cause is shrunk to a
minimal spec (printed; with --cases DIR written there as a case file for tests/walk_cases/).

Prints counts by outcome: specs generated, accepted, refused (by code), built, artifacts checked,
failures by cause.

Run from the repository root: python3 benchmarks/space_walk.py [--specs 10000] [--build 400] [--seed 1]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.pipeline import validate_text  # noqa: E402
from tests.spacewalk import RandomChooser, ReplayChooser, dump, generate, shrink, walk_one, workspace  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", type=int, default=10_000, help="specs to generate and validate")
    ap.add_argument("--build", type=int, default=400, help="accepted specs to build and check (spread over the run)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=Path, help="write each failure's shrunk spec here as a case file")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kiln-space-walk-"))
    spec_dir = workspace(work / "spec")
    store = work / "store"
    counts: collections.Counter = collections.Counter()
    refusals: collections.Counter = collections.Counter()
    causes: collections.Counter = collections.Counter()
    first: dict[str, list[int]] = {}
    accepted: list[tuple[list[int], str]] = []
    start = time.perf_counter()
    for _ in range(args.specs):
        c = RandomChooser(rng)
        text = dump(generate(c))
        counts["generated"] += 1
        result = validate_text(text, spec_dir)
        if result.ok:
            counts["accepted"] += 1
            accepted.append((c.trace, text))
        else:
            refusals.update({d.code for d in result.diagnostics if d.is_error})
    validated_s = time.perf_counter() - start
    stride = max(1, len(accepted) // max(1, args.build))
    quantize = importlib.util.find_spec("modelopt") is not None  # its preflight builds ModelOpt's configs
    for trace, text in accepted[::stride][:args.build]:
        o = walk_one(text, spec_dir, store, quantize=quantize)
        counts["build attempted"] += 1
        counts["artifacts checked"] += o.artifacts
        if o.status == "built":
            counts["built"] += 1
        else:
            counts["failed"] += 1
            causes[o.cause] += 1
            first.setdefault(o.cause, trace)
    built_s = time.perf_counter() - start - validated_s

    print(f"space walk: seed {args.seed}, {validated_s:.0f} s validating, {built_s:.0f} s building and checking")
    for key in ("generated", "accepted", "build attempted", "built", "failed", "artifacts checked"):
        print(f"  {key:18} {counts[key]}")
    print(f"  refused            {counts['generated'] - counts['accepted']} (specs; codes: "
          + ", ".join(f"{code} {n}" for code, n in refusals.most_common(12)) + ")")
    print("failures by cause:" if causes else "failures by cause: none")
    for i, (cause, n) in enumerate(causes.most_common()):
        print(f"  {n:5}  {cause}")

        def same(spec: dict, cause=cause) -> bool:
            return walk_one(dump(spec), spec_dir, store, quantize=quantize).cause == cause

        small = dump(generate(ReplayChooser(shrink(first[cause], same, budget=150))))
        print("         shrunk to:\n" + "".join(f"           {line}\n" for line in small.splitlines()))
        if args.cases:
            args.cases.mkdir(parents=True, exist_ok=True)
            (args.cases / f"walk-{args.seed}-{i}.yaml").write_text(f"# Found by the walk: {cause}\n" + small,
                                                                   encoding="utf-8")
    return 1 if causes else 0


if __name__ == "__main__":
    sys.exit(main())
