"""Exact MIG placement search.

Per-profile counts and the compute-slice budget are not enough to know whether a layout fits: GIs are
placed on memory slots, at fixed start slots, and the driver picks first-fit slots when it is not told
where to put them (NVIDIA/k8s-test-infra#886, the MIG guide's `-cgi 19,19,14,9` example). This module
finds an explicit start slot for every instance, or says why none exists.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from dataclasses import dataclass
from typing import Mapping, Sequence

from compiler.catalog.types import MigGeometry, MigProfile


@dataclass(frozen=True)
class Placed:
    request_index: int  # position in the user's list, so diagnostics can point back at it
    profile: MigProfile
    start: int  # memory slot, as in `-cgi <id>:<start>`


@dataclass(frozen=True)
class PlacementResult:
    ok: bool
    placed: tuple[Placed, ...]  # creation order when ok (largest first); empty otherwise
    reason: str | None  # a sentence saying why, when not ok
    blocking: tuple[int, ...]  # request indexes involved in the failure


def search_placement(
    geometry: MigGeometry,
    requests: Sequence[MigProfile],
    fixed: Mapping[int, int] | None = None,
) -> PlacementResult:
    """Find explicit start slots for `requests` on one GPU, or explain why they cannot fit.

    `fixed` pins request index -> start slot. The answer is exact and deterministic: instances are
    tried largest first, each at its lowest workable slot, so larger instances end up at lower slots
    whenever some layout allows it.
    """
    requests = list(requests)
    fixed = dict(fixed or {})
    problem = _check_limits(geometry, requests) or _check_pins(geometry, requests, fixed)
    if problem:
        return _fail(*problem)

    everyone = range(len(requests))
    starts = _solve(geometry, requests, fixed, _pinned_mask(requests, fixed, everyone), everyone)
    if starts is None:
        return _fail(*_explain(geometry, requests, fixed))

    order = sorted(
        starts,
        key=lambda i: (-requests[i].placement_size, -requests[i].compute_slices, starts[i], i),
    )
    placed = tuple(Placed(i, requests[i], starts[i]) for i in order)
    return PlacementResult(True, placed, None, ())


@dataclass(frozen=True)
class Preferred:
    """A placement search that tried to keep instances at earlier starts (a lock file's)."""

    result: PlacementResult
    kept: tuple[int, ...]  # request indexes placed at their preferred start
    moved: Mapping[int, str]  # request index -> why its preferred start could not be kept


def search_preferring(
    geometry: MigGeometry,
    requests: Sequence[MigProfile],
    fixed: Mapping[int, int] | None = None,
    preferred: Mapping[int, int] | None = None,
) -> Preferred:
    """Like search_placement, keeping as many `preferred` starts (soft pins) as a valid layout
    allows: the largest set of them that still places (ties: the set earliest in request order),
    so an edit to one instance leaves its neighbours where they are whenever it can."""
    requests = list(requests)
    fixed = dict(fixed or {})
    soft = {i: s for i, s in sorted((preferred or {}).items()) if i not in fixed and 0 <= i < len(requests)}
    candidates = sorted(soft)
    for size in range(len(candidates), 0, -1):
        for combo in combinations(candidates, size):
            result = search_placement(geometry, requests, {**fixed, **{i: soft[i] for i in combo}})
            if result.ok:
                return Preferred(result, combo, _why_moved(geometry, requests, fixed, soft, combo))
    return Preferred(search_placement(geometry, requests, fixed), (),
                     _why_moved(geometry, requests, fixed, soft, ()))


def _why_moved(geometry: MigGeometry, requests: list[MigProfile], fixed: dict[int, int], soft: dict[int, int],
               kept: tuple[int, ...]) -> dict[int, str]:
    out = {}
    for i in sorted(set(soft) - set(kept)):
        trial = search_placement(geometry, requests, {**fixed, **{j: soft[j] for j in kept}, i: soft[i]})
        out[i] = trial.reason or f"keeping it at slot {soft[i]} leaves no place for another instance"
    return out


def creation_commands(result: PlacementResult) -> list[str]:
    """`<id>:<start>` tuples for `nvidia-smi mig -cgi`, in creation order."""
    if not result.ok:
        raise ValueError(f"no creation commands for an unplaceable layout: {result.reason}")
    return [f"{p.profile.id}:{p.start}" for p in result.placed]


# --- checks that do not need a search ---------------------------------------------------------


def _check_limits(geometry: MigGeometry, requests: list[MigProfile]) -> tuple[str, Sequence[int]] | None:
    everyone = range(len(requests))
    if not geometry.supported:
        return "this GPU does not support MIG", everyone
    for i, p in enumerate(requests):
        known = geometry.profile(p.name)
        if known is None:
            names = ", ".join(geometry.profile_names)
            return f"{p.name} (request {i}) is not a MIG profile of this GPU (it has {names})", [i]
        if known != p:
            return (
                f"{p.name} (request {i}) does not match this GPU's {p.name} "
                f"(ID {known.id}, {known.memory_slices} memory slices)",
                [i],
            )
    if len(requests) > geometry.max_instances:
        limit = geometry.max_instances
        return f"{len(requests)} instances requested; this GPU allows at most {limit}", everyone

    by_name: dict[str, list[int]] = {}
    for i, p in enumerate(requests):
        by_name.setdefault(p.name, []).append(i)
    for name, idx in by_name.items():
        limit = requests[idx[0]].max_count
        if len(idx) > limit:
            return f"{len(idx)}x {name} requested; this GPU allows at most {limit}", idx

    over = _over_budget(requests, geometry.compute_slices)
    if over:
        return over, everyone
    media = [i for i, p in enumerate(requests) if p.has_media_extensions]
    if len(media) > 1:
        return f"{len(media)} media-extension (+me) instances requested; only one fits per GPU", media
    over = _over_budget(requests, geometry.memory_slices, sizes=True)
    return (over, everyone) if over else None


def _over_budget(requests: list[MigProfile], have: int, sizes: bool = False) -> str | None:
    """Why the instances do not fit the GPU's compute slices (or, with `sizes`, its memory slots:
    each instance's placement size); None when they fit."""
    need = sum(p.placement_size if sizes else p.compute_slices for p in requests)
    if need <= have:
        return None
    what = "memory slots" if sizes else "compute slices"
    return f"the layout needs {need} {what} ({_tally(requests, sizes=sizes)}); this GPU has {have}"


def _check_pins(
    geometry: MigGeometry, requests: list[MigProfile], fixed: dict[int, int]
) -> tuple[str, Sequence[int]] | None:
    for i in sorted(fixed):
        if not 0 <= i < len(requests):
            return f"a placement is pinned for request {i}, but there are only {len(requests)} requests", []
        p, start = requests[i], fixed[i]
        if start not in _starts(geometry, p):
            return (
                f"{p.name} (request {i}) is pinned to slot {start}, but {p.name} can start only at "
                f"{_slots_phrase(_starts(geometry, p))}",
                [i],
            )
    pins = sorted(fixed.items(), key=lambda kv: (kv[1], kv[0]))
    for a, (i, si) in enumerate(pins):
        for j, sj in pins[a + 1 :]:
            if _mask(requests[i], si) & _mask(requests[j], sj):
                return (
                    f"{_pinned(requests, i, si)} overlaps {_pinned(requests, j, sj)}",
                    [i, j],
                )
    return None


# --- the search -------------------------------------------------------------------------------


def _solve(
    geometry: MigGeometry,
    requests: list[MigProfile],
    fixed: dict[int, int],
    base: int,
    subset: Sequence[int],
) -> dict[int, int] | None:
    """Start slot per request index in `subset`, or None when no layout exists."""
    groups: dict[MigProfile, list[int]] = {}
    for i in subset:
        if i not in fixed:
            groups.setdefault(requests[i], []).append(i)
    # Largest first: big instances have the fewest starts, so they fail fast and land low.
    profiles = sorted(groups, key=lambda p: (-p.placement_size, -p.compute_slices, len(p.placements), p.id))
    masks = [[(s, _mask(p, s)) for s in _starts(geometry, p)] for p in profiles]
    counts = [len(groups[p]) for p in profiles]
    dead: set[tuple[int, int, int, int]] = set()
    chosen: list[list[int]] = [[] for _ in profiles]

    def place(g: int, left: int, lowest: int, used: int) -> bool:
        if left == 0:
            g += 1
            if g == len(profiles):
                return True
            left, lowest = counts[g], -1
        key = (g, left, lowest, used)  # g and left fix the remaining multiset
        if key in dead:
            return False
        # Copies of one profile are interchangeable: take their starts in increasing order.
        for start, m in masks[g]:
            if start > lowest and not used & m:
                chosen[g].append(start)
                if place(g, left - 1, start, used | m):
                    return True
                chosen[g].pop()
        dead.add(key)
        return False

    if profiles and not place(0, counts[0], -1, base):
        return None
    starts = {i: fixed[i] for i in subset if i in fixed}
    for p, slots in zip(profiles, chosen):
        starts.update(zip(groups[p], slots))
    return starts


def _explain(
    geometry: MigGeometry, requests: list[MigProfile], fixed: dict[int, int]
) -> tuple[str, Sequence[int]]:
    """Drop instances while the rest still cannot be placed, then describe that irreducible core."""
    core = list(range(len(requests)))
    for i in reversed(range(len(requests))):
        rest = [j for j in core if j != i]
        if _solve(geometry, requests, fixed, _pinned_mask(requests, fixed, rest), rest) is None:
            core = rest

    pinned = _pinned_mask(requests, fixed, core)
    parts = [_pinned(requests, i, fixed[i]) for i in core if i in fixed]
    loose: dict[MigProfile, list[int]] = {}
    for i in core:
        if i not in fixed:
            loose.setdefault(requests[i], []).append(i)
    for p, idx in loose.items():
        size = f"{p.placement_size} slot{'s' if p.placement_size != 1 else ''}"
        if len(idx) == 1:
            who, takes = f"{p.name} (request {idx[0]})", f"takes {size}"
        else:
            who, takes = f"{len(idx)}x {p.name} (requests {_join(idx)})", f"take {size} each"
        parts.append(f"{who}, which can start only at {_slots_phrase(_starts(geometry, p))} and {takes}")
    reason = "these instances cannot all be placed: " + "; ".join(parts) + "."

    if pinned:
        free = [s for s in range(geometry.memory_slices) if not pinned >> s & 1]
        reason += f" The pinned instances leave only {_slots_phrase(free, conj='and')} free."
    # Slots no remaining instance can reach (e.g. slot 7 for a 1g, which cannot start there) are
    # the usual culprit; say so when counting them alone proves the point.
    need = sum(p.placement_size * len(idx) for p, idx in loose.items())
    reachable = 0
    for p in loose:
        for s in _starts(geometry, p):
            if not _mask(p, s) & pinned:
                reachable |= _mask(p, s)
    usable = [s for s in range(geometry.memory_slices) if reachable >> s & 1]
    who = "The others" if pinned else "They"
    if not usable:
        reason += f" {who} need {need} slots, but every slot they could start at is taken."
    elif need > len(usable):
        reason += f" {who} need {need} slots, but only {_slots_phrase(usable, conj='and')} can hold them."
    else:
        reason += " Every choice of start slots overlaps."
    return reason, core


# --- helpers ----------------------------------------------------------------------------------


def _fail(reason: str, blocking: Sequence[int]) -> PlacementResult:
    return PlacementResult(False, (), reason, tuple(sorted(blocking)))


def _starts(geometry: MigGeometry, p: MigProfile) -> tuple[int, ...]:
    """Legal start slots that also keep the instance on the GPU (a malformed table must not crash)."""
    last = geometry.memory_slices - p.placement_size
    return tuple(sorted(s for s in set(p.placements) if 0 <= s <= last))


def _mask(p: MigProfile, start: int) -> int:
    return ((1 << p.placement_size) - 1) << start


def _span(p: MigProfile, start: int) -> str:
    end = start + p.placement_size - 1
    return f"slot {start}" if end == start else f"slots {start}-{end}"


def _pinned(requests: list[MigProfile], i: int, start: int) -> str:
    p = requests[i]
    where = f"slot {start}" if p.placement_size == 1 else f"slot {start} ({_span(p, start)})"
    return f"{p.name} (request {i}) pinned at {where}"


def _pinned_mask(requests: list[MigProfile], fixed: dict[int, int], subset: Sequence[int]) -> int:
    used = 0
    for i in subset:
        if i in fixed:
            used |= _mask(requests[i], fixed[i])
    return used


def _slots_phrase(slots: Sequence[int], conj: str = "or") -> str:
    """'slot 0', 'slots 0 or 4', 'slots 0-6' (runs of three or more are collapsed)."""
    slots = sorted(slots)
    if not slots:
        return "no slot"
    runs: list[str] = []
    k = 0
    while k < len(slots):
        j = k
        while j + 1 < len(slots) and slots[j + 1] == slots[j] + 1:
            j += 1
        if j - k >= 2:
            runs.append(f"{slots[k]}-{slots[j]}")
        else:
            runs.extend(str(s) for s in slots[k : j + 1])
        k = j + 1
    if len(slots) == 1:
        return f"slot {runs[0]}"
    words = runs[0] if len(runs) == 1 else ", ".join(runs[:-1]) + f" {conj} " + runs[-1]
    return f"slots {words}"


def _join(idx: Sequence[int]) -> str:
    return ", ".join(str(i) for i in idx)


def _tally(requests: list[MigProfile], sizes: bool = False) -> str:
    counts = Counter(requests)
    out = []
    for p in sorted(counts, key=lambda p: (-p.placement_size, -p.compute_slices, p.name)):
        each = p.placement_size if sizes else p.compute_slices
        n = counts[p]
        out.append(f"{p.name} takes {each}" if n == 1 else f"{n}x {p.name} take {each} each")
    return ", ".join(out)
