"""Measured beats modelled: `kiln tune` records replace or recalibrate the capacity estimates.

A record (compiler/ir/measured.py) holds the TTFT and TPOT a unit showed at the concurrency it
accepted. Its output tokens/s there is c x O / (TTFT + (O - 1) x TPOT) for O output tokens per
request: each of the c requests in flight takes that long to deliver O tokens. With the SLA's
percentile latencies (p99 by default) this is a floor on the mean rate, which the plan says: the
measured unit's interval runs from it up to the rate at the model's p50 latencies (the model's
p50 / percentile ratio at that concurrency applied to the measured figures).

- The measured unit's estimate becomes that measurement (basis `measured`), with the model's
  prediction at the same concurrency and its residual beside it.
- Every other unit on the same GPU, at the same precision and on the same TensorRT-LLM release
  (one spec pins one) is recalibrated: its modelled figures are scaled by the geometric mean of
  measured / modelled over those records (basis `calibrated`, "from N measurements"), the
  throughput still capped at its ceiling.
- A record the spec has moved away from (K914: other artifacts, toolchain, slice, SLA or workload,
  as the records pass found them, compiler/ir/tune_inputs.py) is used for nothing; neither is one on another GPU or precision for a unit. Each unit's
  estimate lists the records it did not use and why.
"""

from __future__ import annotations

import dataclasses
import math

from compiler.capacity.estimate import compute_precision, point
from compiler.capacity.estimate_latency import Z, latency_point
from compiler.capacity.estimate_unit import coefficients_for, unit_case
from compiler.capacity.roofline import cost_per_million_tokens
from compiler.capacity.workload import traffic_shape

from .passes import sizing
from .types import Resolved


@dataclasses.dataclass(frozen=True)
class _Evaluated:
    ref: str
    unit: str
    gpu: str
    precision: str
    concurrency: int
    tokens_per_s: float
    ttft_ms: float
    tpot_ms: float
    percentile: str
    modelled: float  # the model's output tokens/s at the same concurrency
    # the model's p50 over the record's percentile at its concurrency: a request's time, TTFT, TPOT
    # (each <= 1; 1 for a p50 record): how far the mean may lie from what the percentile bounds
    p50_share: tuple[float, float, float] = (1.0, 1.0, 1.0)


def _lengths(v):
    return v if isinstance(v, int) else tuple((int(b["tokens"]), float(b["share"])) for b in v)


def _evaluate(ir: Resolved, model: str, changes: list[str]) -> tuple[_Evaluated | None, str | None]:
    """The record of `model` as a measurement, or why it cannot be used."""
    rm = ir.models[model]
    m = rm.measured
    rec = m.record
    if changes:
        return None, ("the spec no longer describes what it measured (K914: " + "; ".join(changes[:2])
                      + ("; ..." if len(changes) > 2 else "") + ")")
    unit = next((u for u in ir.units if u.id == rec.unit and u.figures is not None), None)
    if unit is None or unit.figures.estimate is None:
        return None, f"unit {rec.unit} has no estimate to compare it with"
    probe = next((p for p in rec.result.probes if p.concurrency == rec.result.concurrency), None)
    if probe is None or probe.ttft_ms is None or probe.tpot_ms is None:
        return None, f"it has no TTFT and TPOT at its concurrency {rec.result.concurrency}"
    try:
        shape = traffic_shape(_lengths(rec.workload["input_tokens"]), _lengths(rec.workload["output_tokens"]))
    except (KeyError, TypeError, ValueError):
        return None, "its workload cannot be read"
    c, out = probe.concurrency, shape.mean_output
    tps = c * out / ((probe.ttft_ms + (out - 1) * probe.tpot_ms) / 1e3)
    host = ir.hosts[unit.host]
    s = sizing(rm)
    case = unit_case(unit, s, rm.arch, host.gpu, unit.figures)
    coef = coefficients_for(host.gpu.arch, s.weights_fmt, ir.spec.toolchain.tensorrt_llm,
                            memory_class=host.gpu.memory_class)
    modelled = point(case.shape, coef.coefficients, c, shape.mean_input, out,
                     min(shape.decode_context, float(s.max_seq_len))).output_tokens_per_s
    if not (math.isfinite(tps) and tps > 0 and math.isfinite(modelled) and modelled > 0):
        return None, f"its throughput ({tps:.4g} tokens/s) or the model's ({modelled:.4g}) is not a positive number"
    args = (shape.mean_input, out, min(shape.decode_context, float(s.max_seq_len)))
    pct = rec.sla.percentile if rec.sla.percentile in Z else "p99"
    at, mid = (latency_point(case.shape, coef.coefficients, c, *args, q) for q in (pct, "p50"))
    share = ((mid.ttft_ms + (out - 1) * mid.tpot_ms) / (at.ttft_ms + (out - 1) * at.tpot_ms),
             mid.ttft_ms / at.ttft_ms, mid.tpot_ms / at.tpot_ms)
    return _Evaluated(m.ref, unit.id, host.gpu.name, compute_precision(s.weights_fmt), c, tps, probe.ttft_ms,
                      probe.tpot_ms, rec.sla.percentile, modelled, tuple(min(1.0, x) for x in share)), None


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def _scaled(est: dict, k: float, price: float | None, share: float | None) -> dict:
    """The modelled estimate with throughput x k and times / k (throughput capped at the ceiling)."""
    out = dict(est)
    cap = est["ceiling_tokens_per_s"]
    out["output_tokens_per_s"] = {key: _r(min(cap, v * k)) for key, v in est["output_tokens_per_s"].items()}
    for name in ("ttft_ms", "tpot_ms"):
        out[name] = {key: _r(v / k) for key, v in est[name].items()}
    out["curve"] = [{**p, "output_tokens_per_s": _r(p["output_tokens_per_s"] * k), "ttft_ms": _r(p["ttft_ms"] / k),
                     "tpot_ms": _r(p["tpot_ms"] / k)} for p in est["curve"]]
    sat = est.get("saturation")
    if sat:
        t = {key: _r(min(cap, v * k)) for key, v in sat["output_tokens_per_s"].items()}
        out["saturation"] = {**sat, "output_tokens_per_s": t, "ttft_ms": _r(sat["ttft_ms"] / k),
                             "tpot_ms": _r(sat["tpot_ms"] / k), "cost_per_million_tokens": _costs(t, price, share)}
    if price is not None and share is not None:
        out["cost_per_million_tokens"] = _costs(out["output_tokens_per_s"], price, share)
    return out


def _costs(t: dict, price: float | None, share: float | None) -> dict | None:
    """Cost per million tokens of a throughput interval (the low cost goes with the high throughput)."""
    if price is None or share is None:
        return None
    return {"value": _r(cost_per_million_tokens(price, share, t["value"])),
            "low": _r(cost_per_million_tokens(price, share, t["high"])),
            "high": _r(cost_per_million_tokens(price, share, t["low"]))}


def measurements_pass(ir: Resolved) -> Resolved:
    """Each unit's estimate replaced or recalibrated by the records that apply to it (after the
    capacity pass, which models it, and the records pass, which says what each record no longer
    matches), so the checks, the plan and the capacity report read one estimate."""
    changed = {model: list(state.changes) for model, state in ir.records.items()}
    if not changed:
        return ir
    usable: list[_Evaluated] = []
    unused: list[tuple[str, str, str | None, str | None]] = []  # (ref, why, gpu, precision)
    for model in sorted(changed):
        ev, why = _evaluate(ir, model, changed[model])
        if ev is not None:
            usable.append(ev)
        else:
            unused.append((ir.models[model].measured.ref, why, None, None))
    units = []
    for u in ir.units:
        est = u.figures.estimate if u.figures is not None else None
        if est is None:
            units.append(u)
            continue
        rm, host = ir.models[u.model], ir.hosts[u.host]
        s = sizing(rm)
        prec = compute_precision(s.weights_fmt)
        price = host.spec.price_per_gpu_hour
        case = unit_case(u, s, rm.arch, host.gpu, u.figures)
        own = next((e for e in usable if e.unit == u.id), None)
        siblings = [e for e in usable if e.gpu == host.gpu.name and e.precision == prec]
        not_used = [{"record": ref, "why": why} for ref, why, _, _ in unused]
        not_used += [{"record": e.ref, "why": f"measured on {e.gpu} at {e.precision}; this unit is {host.gpu.name} "
                                             f"at {prec}"}
                     for e in usable if e not in siblings]
        if own is not None:
            new = _measured(est, own, price, case.price_share)
        elif siblings:
            k = math.exp(sum(math.log(e.tokens_per_s / e.modelled) for e in siblings) / len(siblings))
            new = _scaled(est, k, price, case.price_share)
            new["basis"] = "calibrated"
            new["calibration"] = {"measurements": len(siblings), "factor": _r(k),
                                  "records": [e.ref for e in siblings]}
            new["sources"] = est["sources"] + [
                f"calibrated from {len(siblings)} measurement{'s' if len(siblings) > 1 else ''} on {host.gpu.name} "
                f"at {prec} ({', '.join(e.ref for e in siblings)}): measured/modelled x{k:.3g}"]
        else:
            new = dict(est)
        new["measurements_not_used"] = not_used
        units.append(dataclasses.replace(u, figures=dataclasses.replace(u.figures, estimate=new)))
    return dataclasses.replace(ir, units=tuple(units))


def _measured(est: dict, e: _Evaluated, price: float | None, share: float | None) -> dict:
    """The measured unit: its record's figures, the model's residual beside them."""
    residual = e.tokens_per_s / e.modelled - 1
    out = _scaled(est, e.tokens_per_s / e.modelled, price, share)
    # the record's rate comes from its percentile's latencies, a floor on the mean: the interval runs
    # from it up to the rate at the model's p50 latencies (its p50 / percentile ratio at that concurrency)
    req, ttft, tpot = e.p50_share
    high = min(e.tokens_per_s / req, est["ceiling_tokens_per_s"])
    out.update({
        "basis": "measured",
        "concurrency": e.concurrency,
        "output_tokens_per_s": {"value": _r(e.tokens_per_s), "low": _r(e.tokens_per_s),
                                "high": _r(max(e.tokens_per_s, high))},
        "ttft_ms": {"value": _r(e.ttft_ms), "low": _r(e.ttft_ms * ttft), "high": _r(e.ttft_ms)},
        "tpot_ms": {"value": _r(e.tpot_ms), "low": _r(e.tpot_ms * tpot), "high": _r(e.tpot_ms)},
        "measured": {"record": e.ref, "concurrency": e.concurrency, "percentile": e.percentile,
                     "modelled_tokens_per_s": _r(e.modelled), "model_residual": _r(residual)},
        "sources": est["sources"] + [f"measured: {e.ref} at concurrency {e.concurrency} ({e.percentile} TTFT and "
                                     f"TPOT; tokens/s = c x O / (TTFT + (O-1) TPOT), a floor on the mean); the "
                                     f"model said {e.modelled:,.0f} tok/s ({residual:+.0%})"],
    })
    if price is not None and share is not None:
        out["cost_per_million_tokens"] = _costs(out["output_tokens_per_s"], price, share)
    return out
