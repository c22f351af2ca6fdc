"""AIPerf's output files -> the search result of a tuning run (pure: files in, data out).

Files (AIPerf 0.13.0; docs/api/search-history.md, docs/sweeping/find-max-passing-concurrency.md):
  - every benchmark run writes profile_export_aiperf.json: per metric {unit, avg, p50, p90, p95,
    p99, ...}, the run's configuration (`input_config`, whose profiling phase holds the concurrency)
    and `is_complete` / `was_cancelled`. TTFT is `time_to_first_token`, TPOT `inter_token_latency`,
    failures `request_error_rate` (avg, in percent).
  - the adaptive styles (smooth_isotonic, monotonic) write search_history.json at the top of the
    artifact directory: `iterations` (variation values, feasible, non_monotonic_warning),
    `boundary_summary` (feasible_max.value; infeasible_min.value and its first_breach; smooth_isotonic
    also boundary_type smooth|cliff and binding_constraint) and `convergence_reason`; each
    iteration's runs are under search_iter_<NNNN>/.
  - a concurrency sweep (Kiln's grid) writes one directory per concurrency; Kiln judges each run
    against the SLA itself (see compiler/tune/aiperf.py for why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from compiler.boundedjson import BoundedJSONError, loads_bounded
from compiler.ir.inputs import read_regular
from compiler.ir.measured import Breach, Probe, SlaRecord

from .aiperf import ERROR_METRIC, METRICS

EXPORT = "profile_export_aiperf.json"
HISTORY = "search_history.json"


class ResultError(Exception):
    """AIPerf's outputs are missing or say something Kiln cannot use."""


@dataclass(frozen=True)
class Outcome:
    """What a search found, before the operator's acceptance and the record around it."""

    feasible_max: int | None
    first_failing: int | None
    first_breach: Breach | None
    binding_constraint: str | None
    boundary_type: str | None  # "smooth" | "cliff" | None (not assessed by the style)
    monotonic: bool
    convergence: str | None
    probes: tuple[Probe, ...]
    result_file: str  # relative to the outputs directory


MAX_OUTPUT_BYTES = 64 << 20  # AIPerf's summaries are kilobytes; its per-request records are not read here


def _load(path: Path) -> dict:
    """One of AIPerf's JSON files: a regular file, bounded in size, depth and number length (they
    sit in an outputs directory another process wrote; a FIFO or a link to a device is refused)."""
    try:
        doc = loads_bounded(read_regular(path, MAX_OUTPUT_BYTES), max_depth=64, max_number_chars=100)
    except OSError as e:
        raise ResultError(f"cannot read {path}: {e.strerror or e}") from None
    except BoundedJSONError as e:
        raise ResultError(f"cannot read {path}: {e}") from None
    if not isinstance(doc, dict):
        raise ResultError(f"{path} is not a JSON object")
    return doc


def _obj(value) -> dict:
    """`value` when it is an object, else an empty one: a field of the wrong shape reads as absent."""
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _int(value) -> int | None:
    return value if type(value) is int else None


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value) -> str | None:
    return value if isinstance(value, str) else None


def _stat(doc: dict, metric: str, stat: str) -> float | None:
    return _num(_obj(doc.get(metric)).get(stat))


def _concurrency(doc: dict) -> int | None:
    for phase in _list(_obj(doc.get("input_config")).get("phases")):
        if isinstance(phase, dict) and phase.get("name") == "profiling" and _int(phase.get("concurrency")):
            return phase["concurrency"]
    return _int(_obj(_obj(doc.get("run_info")).get("variation_values")).get("phases.profiling.concurrency"))


def read_probe(path: Path, sla: SlaRecord, feasible: bool | None = None) -> Probe:
    """One run's SLA statistics; `feasible` as AIPerf judged it, else as `judge` does."""
    doc = _load(path)
    c = _concurrency(doc)
    if c is None or c < 1:
        raise ResultError(f"{path} names no profiling concurrency")
    pct = sla.percentile
    requests = _stat(doc, "request_count", "avg")
    try:
        probe = Probe(concurrency=c, feasible=False, ttft_ms=_stat(doc, METRICS["ttft_ms"], pct),
                      tpot_ms=_stat(doc, METRICS["tpot_ms"], pct), error_rate_pct=_stat(doc, ERROR_METRIC, "avg"),
                      requests=int(requests) if requests is not None and math.isfinite(requests) else None)
    except ValidationError as e:  # a latency of 0, below 0 or past an hour: not a measurement to record
        first = e.errors(include_url=False)[0]
        raise ResultError(f"{path}: {'.'.join(str(p) for p in first['loc'])} = {first['input']!r}: {first['msg']}") \
            from None
    ok = feasible if feasible is not None else (doc.get("is_complete", True) is True
                                                and doc.get("was_cancelled") in (None, False)
                                                and not breaches(probe, sla))
    return probe.model_copy(update={"feasible": bool(ok)})


def breaches(probe: Probe, sla: SlaRecord) -> list[Breach]:
    """The SLA targets a run missed (a statistic it lacks counts as missed: no request succeeded)."""
    out = []
    for key, metric in METRICS.items():
        target = getattr(sla, key)
        if target is None:
            continue
        seen = getattr(probe, key)
        if seen is None or seen > target:
            out.append(Breach(metric=metric, stat=sla.percentile, op="le", threshold=target, observed=seen))
    limit = sla.max_error_rate * 100
    if probe.error_rate_pct is None or probe.error_rate_pct >= limit:
        out.append(Breach(metric=ERROR_METRIC, stat="avg", op="lt", threshold=limit, observed=probe.error_rate_pct))
    return out


def grid_outcome(outputs: Path, sla: SlaRecord, points: tuple[int, ...]) -> Outcome:
    """Kiln's bounded grid: every point judged against the SLA. The feasible maximum is the largest
    passing concurrency below the lowest failing one; a passing point above a failing one makes the
    result non-monotonic."""
    runs = sorted(outputs.rglob(EXPORT))
    probes = sorted((read_probe(p, sla) for p in runs), key=lambda p: p.concurrency)
    missing = sorted(set(points) - {p.concurrency for p in probes})
    if missing:
        raise ResultError(f"AIPerf wrote no {EXPORT} for concurrency {', '.join(map(str, missing))} under {outputs}")
    failing = [p for p in probes if not p.feasible]
    first_fail = failing[0] if failing else None
    below = [p.concurrency for p in probes if p.feasible and (first_fail is None or p.concurrency < first_fail.concurrency)]
    monotonic = first_fail is None or not any(p.feasible and p.concurrency > first_fail.concurrency for p in probes)
    breach = breaches(first_fail, sla)[0] if first_fail is not None else None
    return Outcome(feasible_max=max(below) if below else None,
                   first_failing=first_fail.concurrency if first_fail else None, first_breach=breach,
                   binding_constraint=breach.metric if breach else None, boundary_type=None, monotonic=monotonic,
                   convergence="grid", probes=tuple(probes),
                   result_file=str(runs[0].relative_to(outputs)) if runs else "")


def adaptive_outcome(outputs: Path, sla: SlaRecord) -> Outcome:
    """AIPerf's own verdict: search_history.json's boundary summary, and each iteration's run."""
    path = outputs / HISTORY
    if not path.is_file():
        raise ResultError(f"AIPerf wrote no {HISTORY} in {outputs} (see its log there)")
    doc = _load(path)
    iterations = [it for it in _list(doc.get("iterations")) if isinstance(it, dict)]
    probes = []
    for it in iterations:
        idx = _int(it.get("iteration_idx"))
        runs = sorted((outputs / f"search_iter_{idx:04d}").rglob(EXPORT)) if idx is not None and 0 <= idx < 10**4 \
            else []
        if runs:
            probes.append(read_probe(runs[0], sla, feasible=it.get("feasible") is True))
    summary = _obj(doc.get("boundary_summary"))
    fmax = _num(_obj(summary.get("feasible_max")).get("value"))
    infeasible = _obj(summary.get("infeasible_min"))
    breach = None
    fb = _obj(infeasible.get("first_breach"))
    if _str(fb.get("metric_tag")):
        breach = Breach(metric=fb["metric_tag"], stat=str(fb.get("stat")), op=str(fb.get("op")),
                        threshold=_num(fb.get("threshold")) or 0.0, observed=_num(fb.get("observed")))
    monotonic = not (any(it.get("non_monotonic_warning") for it in iterations) or summary.get("non_monotonic_warning"))
    boundary = summary.get("boundary_type")
    return Outcome(feasible_max=int(fmax) if fmax is not None and fmax >= 1 else None,
                   first_failing=_int(infeasible.get("value")), first_breach=breach,
                   binding_constraint=_str(summary.get("binding_constraint")) or (breach.metric if breach else None),
                   boundary_type=boundary if boundary in ("smooth", "cliff") else None, monotonic=monotonic,
                   convergence=_str(doc.get("convergence_reason")), probes=tuple(probes), result_file=HISTORY)
