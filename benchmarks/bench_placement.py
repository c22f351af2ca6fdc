"""Time the exact MIG placement search over every H100-SXM5-80GB multiset (not a test).

Run from the repository root: python3 benchmarks/bench_placement.py
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler.capacity.placement import search_placement  # noqa: E402
from compiler.catalog.types import MigGeometry, MigProfile  # noqa: E402

# H100-SXM5-80GB, from the GPU catalog reference: name, GI ID, compute, memory slices, max, starts, size.
_ROWS = [
    ("1g.10gb", 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1, ()),
    ("1g.10gb+me", 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, ("me",)),
    ("1g.20gb", 15, 1, 2, 4, (0, 2, 4, 6), 2, ()),
    ("2g.20gb", 14, 2, 2, 3, (0, 2, 4), 2, ()),
    ("3g.40gb", 9, 3, 4, 2, (0, 4), 4, ()),
    ("4g.40gb", 5, 4, 4, 1, (0,), 4, ()),
    ("7g.80gb", 0, 7, 8, 1, (0,), 8, ()),
]
H100 = MigGeometry(
    True, max_instances=7, compute_slices=7, memory_slices=8,
    profiles=tuple(
        MigProfile(n, i, c, m, int(n.split(".")[1].split("gb")[0]), mx, st, sz, at)
        for n, i, c, m, mx, st, sz, at in _ROWS
    ),
)


def multisets(geometry: MigGeometry, most: int = 7) -> list[list[MigProfile]]:
    out = []
    for counts in itertools.product(*(range(p.max_count + 1) for p in geometry.profiles)):
        if 1 <= sum(counts) <= most:
            out.append([p for p, k in zip(geometry.profiles, counts) for _ in range(k)])
    return out


def timed(layouts: list[list[MigProfile]], repeat: int) -> tuple[float, int]:
    best, ok = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        ok = sum(search_placement(H100, r).ok for r in layouts)
        best = min(best, time.perf_counter() - t0)
    return best, ok


def main() -> None:
    every = multisets(H100)
    total, ok = timed(every, repeat=5)
    print(f"all H100 multisets: {len(every)} layouts ({ok} placeable), best of 5: "
          f"{total * 1e3:.1f} ms total, {total / len(every) * 1e6:.1f} us per multiset")

    # Layouts that reach the search (they pass every count check) and the hardest ones.
    searched = [r for r in every if sum(p.compute_slices for p in r) <= 7
                and sum(p.placement_size for p in r) <= 8 and sum(p.has_media_extensions for p in r) <= 1]
    t, _ = timed(searched, repeat=5)
    print(f"layouts that reach the search: {len(searched)}, {t / len(searched) * 1e6:.1f} us each")

    one, two, three = (H100.profile(n) for n in ("1g.10gb", "2g.20gb", "3g.40gb"))
    for label, layout, fixed in [
        ("7x 1g.10gb", [one] * 7, None),
        ("balanced 2x1g+2g+3g (backtracks past 3g@0)", [one, one, two, three], None),
        ("6x 1g.10gb + 1g.20gb, one 1g pinned at 6 (fails, explained)",
         [one] * 6 + [H100.profile("1g.20gb")], {0: 6}),
    ]:
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            search_placement(H100, layout, fixed)
        print(f"{label}: {(time.perf_counter() - t0) / n * 1e6:.1f} us")


if __name__ == "__main__":
    main()
