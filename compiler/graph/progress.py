"""What a build says about an action while it runs: its phase, how long it has run, and how long
it is expected to take, from what the store recorded of earlier builds (the same figure `kiln plan
--base` sums as the expected build time)."""

from __future__ import annotations

from compiler.store.local import LocalStore


def expected_duration(store: LocalStore, spec_name: str, aid: str, key: str | None = None) -> float | None:
    """How long the action took the last time this store built it: the record of `key` (an earlier
    key of the slot), else of the slot's last build for the spec; None when neither is recorded."""
    for k in (key, (store.get_ref(spec_name, aid) or {}).get("key")):
        if k:
            rec = store.get_action(k)
            if rec is not None:
                return rec.duration_s
    return None


def estimate(store: LocalStore, spec_name: str, graph, aid: str) -> tuple[float | None, str]:
    """(seconds, what they come from): the slot's last build in this store, else the last build of
    another action of the same kind in the spec (a new model is quantized like the others)."""
    found = expected_duration(store, spec_name, aid)
    if found is not None:
        return found, "its last build here"
    kind = graph.actions[aid].kind
    for other in graph.order:
        if other != aid and graph.actions[other].kind == kind:
            found = expected_duration(store, spec_name, other)
            if found is not None:
                return found, f"{other}'s last build here"
    return None, ""


def duration(seconds: float) -> str:
    """12s, 4m05s, 1h02m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    minutes, s = divmod(s, 60)
    return f"{minutes}m{s:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def running_line(aid: str, elapsed: float, phase: str | None = None, expected: float | None = None,
                 basis: str = "its last build here") -> str:
    """`still running quantize/tiny: calibrating, 40s of ~1m20s expected (its last build here)`: the
    line a long action reports every few seconds; `basis` says where the estimate comes from."""
    head = f"{aid}: {phase}" if phase else aid
    if expected is None:
        return f"still running {head}, {duration(elapsed)} (no earlier build here to estimate from)"
    if elapsed <= expected:
        return f"still running {head}, {duration(elapsed)} of ~{duration(expected)} expected ({basis})"
    return f"still running {head}, {duration(elapsed)}; {basis} took {duration(expected)}"


def phase_line(aid: str, phase: str, elapsed: float) -> str:
    return f"{aid}: {phase} ({duration(elapsed)} in)"
