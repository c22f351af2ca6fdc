"""One serving unit's estimate as plan data: the coefficient set that applies, the figures with their
interval, the curve over concurrency, and what the estimate rests on.

The coefficient set is the one fitted for the unit's GPU generation x precision x TensorRT-LLM
release (data/estimate_coefficients.json); else the nearest earlier release of the same generation
and precision; else the nearest generation and precision with rows (coefficients_for). Every step
away, and every fact of the unit outside the rows the set was fitted on, is named in
`outside_calibration` and adds to the unit's distance from those rows (interval_distance). The
throughput interval is the 5th-95th percentile of the residuals of rows left out by group at that
distance (estimate_calibrate.py; 90% stated, two-sided), and never above the ceiling.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from compiler.capacity.estimate import FLOORS, Shape, compute_precision, concurrency_points
from compiler.capacity.estimate_latency import largest_meeting, latency_point
from compiler.capacity.estimate_fit import release_of
from compiler.capacity.memory import mig_bandwidth_tbps
from compiler.capacity.roofline import cost_per_million_tokens
from compiler.catalog.models import estimate_params
from compiler.resources import read_data

#: Interval growth per reason the unit is outside what the coefficients were fitted on.
WIDEN = 0.5
#: Smallest half-width of the interval (ln): no fit is trusted to better than about 10%.
MIN_LOG_SPREAD = 0.1
#: The throughput interval is the 5th-95th percentile of left-out residuals: it states 90% coverage.
STATED_COVERAGE = 0.90
#: TTFT was never fitted (the published rows give throughput only): its interval is this many times wider.
UNFITTED_SPREAD = 2.0


@lru_cache(maxsize=1)
def coefficient_table() -> dict:
    return json.loads(read_data("capacity", "data", "estimate_coefficients.json"))


@lru_cache(maxsize=1)
def memory_systems() -> dict:
    return json.loads(read_data("capacity", "data", "memory_systems.json"))


def memory_scale(memory_class: str) -> float:
    """What the HBM-fitted memory efficiency is multiplied by on a GPU of `memory_class`: the share of
    peak a streaming kernel reaches on HBM over the share it reaches on that memory system
    (data/memory_systems.json, measured)."""
    classes = memory_systems()["classes"]
    if memory_class == "HBM" or memory_class not in classes:
        return 1.0
    return classes["HBM"]["stream_fraction"] / classes[memory_class]["stream_fraction"]


@dataclass(frozen=True)
class CoefficientSet:
    key: str  # the group the figures were fitted on
    coefficients: Mapping[str, float]
    residuals: Mapping[str, float]
    range: Mapping[str, object]
    basis: str = "modelled"  # "calibrated" when refitted on the deployment's own measurements
    reasons: tuple[str, ...] = ()  # why the set is a stand-in
    sources: tuple[str, ...] = field(default_factory=tuple)
    distance: float = 0.0  # generations, precisions and memory systems between the unit and the set's rows
    interval: Mapping | None = None  # the table's interval calibration (estimate_calibrate.calibrate)


def _version_tuple(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split(".") if p.isdigit())


#: Where each GPU generation sits, for the nearest generation with rows when one has none: a
#: generation's tensor cores and memory system are closer to the next one than to the one after.
GENERATION_ORDER = {"Ampere": 0.0, "Ada Lovelace": 0.5, "Hopper": 1.0, "Blackwell": 2.0, "Blackwell Ultra": 2.5}
#: Another precision on the same generation is nearer than the same precision a generation away:
#: the efficiencies are the GPU's (its memory system, its kernels) more than the number format's.
PRECISION_STEP = 0.75


def coefficients_for(gpu_arch: str, weights_fmt: str, runtime_version: str, table: Mapping | None = None,
                     memory_class: str = "HBM") -> CoefficientSet:
    """The coefficient set for a unit: the one fitted on its GPU generation x precision x release;
    else the nearest earlier release of the same generation and precision (releases carry over:
    the leave-one-release-out folds hold); else the nearest generation and precision with rows,
    by GENERATION_ORDER and precision, never a pool dominated by another generation. Every step
    away is a reason, and `distance` counts the architectural ones (generation, precision, memory
    system) for the interval. The features are priced at the unit's own GPU's peaks, so a
    stand-in set carries efficiencies, not speeds."""
    doc = table or coefficient_table()
    groups = doc["groups"]
    prec, release = compute_precision(weights_fmt), release_of(runtime_version)
    provenance = doc.get("provenance", {})
    published = f"fitted on published TensorRT-LLM throughput ({provenance.get('script', 'fit')}, " \
                f"{provenance.get('date', '?')})"

    scale = memory_scale(memory_class)

    def make(key: str, reasons: tuple[str, ...], distance: float) -> CoefficientSet:
        g = groups[key]
        coefficients = g["coefficients"]
        if scale != 1.0:
            # streamed at the share of its own peak its memory system reaches, never past the roofline
            coefficients = {**coefficients, "memory": max(FLOORS["memory"], coefficients["memory"] * scale)}
        return CoefficientSet(key, coefficients, g["residuals"], g["range"], reasons=reasons,
                              sources=(f"{published}: {key}, {g['residuals']['rows']} rows",), distance=distance,
                              interval=doc.get("interval"))

    memory_reason: tuple[str, ...] = ()
    distance = 0.0
    if memory_class != "HBM":
        memory_reason = (f"no published rows on a {memory_class} GPU; the memory efficiency fitted on HBM GPUs "
                         f"scaled by {scale:.2f}, the share of peak a streaming kernel reaches on each "
                         "(data/memory_systems.json), the other efficiencies as fitted",)
        distance += 1.0
    fitted = [k for k in groups if not k.endswith("/*") and k != "*"]
    exact = f"{gpu_arch}/{prec}/{release}"
    if exact in groups:
        return make(exact, memory_reason, distance)

    def near(key: str) -> tuple:
        gen, p, rel = key.split("/")
        d = abs(GENERATION_ORDER.get(gen, 1.0) - GENERATION_ORDER.get(gpu_arch, 1.0)) + PRECISION_STEP * (p != prec)
        later = _version_tuple(rel) > _version_tuple(release)
        return d, later, tuple(-v for v in _version_tuple(rel)) if not later else _version_tuple(rel)

    if not fitted:
        return make("*", memory_reason + ("no fitted coefficient sets; the pooled set",), distance + 2.0)
    key = min(fitted, key=near)
    gen, p, rel = key.split("/")
    reasons = list(memory_reason)
    if (gen, p) != (gpu_arch, prec):
        reasons.append(f"no published rows for {gpu_arch} {prec}; the nearest fitted, {gen} {p} "
                       f"(TensorRT-LLM {rel}), stands in at this GPU's own peaks")
    out = make(key, tuple(reasons), distance + near(key)[0])
    if (gen, p) == (gpu_arch, prec):
        # another release of the same generation and precision: not a reason to widen (the
        # leave-one-release-out folds hold), but said where the figures come from
        out = dataclasses.replace(out, sources=out.sources + (
            f"TensorRT-LLM {release} has no published rows for {gpu_arch} {prec}: the coefficients of {rel}",))
    return out


def _interval(value: float, lo_log: float, hi_log: float) -> dict:
    return {"value": _r(value), "low": _r(value * math.exp(lo_log)), "high": _r(value * math.exp(hi_log))}


def _r(x: float) -> float:
    return float(f"{x:.4g}")


@dataclass(frozen=True)
class Traffic:
    mean_input: float
    mean_output: float
    decode_context: float  # as the ceiling charges it
    described: str


def unit_estimate(*, shape: Shape, batch: int, traffic: Traffic, coef: CoefficientSet, ceiling_tokens_per_s: float,
                  price_share: float | None, price_per_gpu_hour: float | None, sla: Mapping | None = None,
                  extra_reasons: tuple[str, ...] = ()) -> dict:
    """The estimate of one unit as JSON data. `batch`: the concurrency the scheduler admits (the
    capacity bound, capped by max_batch_size); `ceiling_tokens_per_s`: the roofline at that batch.

    Without an sla the headline is at that batch (saturation). With one, it is at the largest
    concurrency whose TTFT and TPOT at the sla's percentile meet it (estimate_latency), and the
    saturation figures follow as a second figure; when not even one request meets it, the headline
    is at concurrency 1 and `sla_met` is false."""
    c = coef.coefficients
    pct = (sla or {}).get("percentile") or ("p99" if sla else "p50")
    args = (traffic.mean_input, traffic.mean_output, traffic.decode_context)
    sat = latency_point(shape, c, batch, *args, pct)
    reasons, distance = interval_distance(shape, batch, traffic, coef, extra_reasons)
    lo, hi = interval_logs(coef, distance)
    at_sla = largest_meeting(shape, c, batch, *args, sla) if sla else None
    head = at_sla or (latency_point(shape, c, 1, *args, pct) if sla else sat)
    spread = max(-lo, hi) * UNFITTED_SPREAD

    def tput_of(p) -> dict:
        t = _interval(p.output_tokens_per_s, lo, hi)
        t["high"] = min(t["high"], _r(min(ceiling_tokens_per_s, p.ceiling_tokens_per_s)))
        t["value"] = min(t["value"], t["high"])
        t["low"] = min(t["low"], t["value"])
        return t

    def cost_of(t: dict) -> dict | None:
        if price_per_gpu_hour is None or price_share is None:
            return None
        # cheaper when faster: the low cost goes with the high throughput
        costs = {k: cost_per_million_tokens(price_per_gpu_hour, price_share, t[k]) for k in ("value", "low", "high")}
        return {"value": _r(costs["value"]), "low": _r(costs["high"]), "high": _r(costs["low"])}

    tput = tput_of(head)
    out = {
        "output_tokens_per_s": tput,
        # a step's time is the inverse of throughput at a fixed batch: the interval flips
        "tpot_ms": _interval(head.tpot_ms, -hi, -lo),
        "ttft_ms": _interval(head.ttft_ms, -spread, spread),
        "percentile": pct,
        "concurrency": head.concurrency,
        "ceiling_tokens_per_s": _r(ceiling_tokens_per_s),
        "basis": coef.basis,
        "coefficients": coef.key,
        "sources": list(coef.sources),
        "outside_calibration": reasons,
        "traffic": traffic.described,
        "notes": [f"TTFT and TPOT are {pct} of a closed loop at each concurrency, from the step model (the "
                  "prompts that start in the same pass, the pass a request waits for); TTFT is modelled from "
                  "the throughput fit, no published TTFT was fitted"],
        "curve": [],
        "cost_per_million_tokens": cost_of(tput),
        "sla_concurrency": at_sla.concurrency if at_sla else None,
        "sla_met": None if not sla else at_sla is not None,
        "saturation": None,
    }
    if sla:
        sat_t = tput_of(sat)
        out["saturation"] = {"concurrency": batch, "output_tokens_per_s": sat_t, "cost_per_million_tokens": cost_of(sat_t),
                             "ttft_ms": _r(sat.ttft_ms), "tpot_ms": _r(sat.tpot_ms)}
    pts = [latency_point(shape, c, b, *args, pct) for b in concurrency_points(batch)]
    out["curve"] = [{"concurrency": p.concurrency, "output_tokens_per_s": _r(min(p.output_tokens_per_s,
                                                                               p.ceiling_tokens_per_s)),
                     "ttft_ms": _r(p.ttft_ms), "tpot_ms": _r(p.tpot_ms)} for p in pts]
    return out


def interval_reasons(shape: Shape, batch: int, traffic: Traffic, coef: CoefficientSet,
                     extra: tuple[str, ...] = ()) -> list[str]:
    """Why the unit is away from what its coefficient set was fitted on (each widens the interval)."""
    return interval_distance(shape, batch, traffic, coef, extra)[0]


def interval_distance(shape: Shape, batch: int, traffic: Traffic, coef: CoefficientSet,
                      extra: tuple[str, ...] = ()) -> tuple[list[str], float]:
    """The reasons, and the unit's distance from the rows its coefficients were fitted on: the
    architectural steps of the stand-in set (generation, precision, memory system: coef.distance),
    one for a model family the rows do not hold, one for a mode (dense or MoE, attention DP) they
    do not hold,
    and half for each other fact outside them (lengths, batch, formats, parallelism)."""
    rng = coef.range
    mine: list[str] = []
    d = coef.distance
    family = family_of(shape.arch.name)
    if rng.get("families") and family not in rng["families"]:
        mine.append(f"model family {family} has no published rows (fitted: {', '.join(rng['families'])})")
        d += 1.0
    mode = "MoE" if shape.arch.is_moe else "dense"
    if rng.get("modes") and mode not in rng["modes"]:
        mine.append(f"no published {mode} rows in the fit")
        d += 1.0
    if shape.attention_dp and "attention-DP" not in (rng.get("parallelisms") or ["tensor"]):
        # a parallelism mode of its own: its exchanges and per-rank batches were never measured
        mine.append("attention data parallelism has no published rows in the fit")
        d += 1.0
    other = list(extra) + _outside(shape, batch, traffic, rng)
    return list(coef.reasons) + mine + other, d + 0.5 * len(other)


def interval_logs(coef: CoefficientSet, distance: float) -> tuple[float, float]:
    """ln(low / value) and ln(high / value) of the throughput interval at `distance` from the rows:
    the residuals of left-out groups at that distance (coef.interval, estimate_calibrate.py), two
    sided; beyond the farthest class calibrated, that class widened by WIDEN per unit of distance."""
    classes = (coef.interval or {}).get("classes") or []
    if not classes:  # a table without a calibration: the set's own residuals, widened per unit of distance
        res, widen = coef.residuals, 1 + WIDEN * distance
        return (min(-MIN_LOG_SPREAD, float(res.get("log_p05", 0.0))) * widen,
                max(MIN_LOG_SPREAD, float(res.get("log_p95", 0.0))) * widen)
    for k in classes:
        if distance <= k["max_distance"]:
            return k["log_low"], k["log_high"]
    last = classes[-1]
    widen = 1 + WIDEN * (distance - last["max_distance"])
    return last["log_low"] * widen, last["log_high"] * widen


def family_of(name: str) -> str:
    """A model's family from its catalog key, config model_type or published name: "llama-3.1-70b",
    "Llama 3.1 70B" -> "llama"; "qwen3_moe" -> "qwen3"; "DeepSeek-V3" -> "deepseek"."""
    return re.split(r"[-_ .]", name.strip().lower())[0]


def _outside(shape: Shape, batch: int, traffic: Traffic, rng: Mapping) -> list[str]:
    """The unit's facts outside the span its coefficient set was fitted on."""
    out = []

    def check(name: str, value: float, what: str) -> None:
        span = rng.get(name)
        if span and not span[0] <= value <= span[1]:
            out.append(f"{what} {value:,.0f} is outside the fitted {span[0]:,}-{span[1]:,}")

    check("isl", traffic.mean_input, "prompt length")
    check("osl", traffic.mean_output, "output length")
    check("tp", shape.tp, "tensor parallelism")
    check("batch", batch, "batch")
    check("active_params", estimate_params(shape.arch)[1], "active parameters")
    if shape.pp > 1:
        out.append(f"pipeline parallelism (pp {shape.pp}) was never fitted")
    if shape.compute_share < 1 or shape.derate < 1:
        out.append("a MIG slice was never fitted (its bandwidth and compute share are assumed)")
    gpus = rng.get("gpus") or []
    if gpus and shape.gpu.name not in gpus:
        out.append(f"{shape.gpu.name} is not among the GPUs fitted ({', '.join(gpus)})")
    if shape.kv_fmt not in ("fp8",):
        out.append(f"KV cache {shape.kv_fmt} (the published rows use an FP8 KV cache)")
    return out


def mig_shape_args(gpu, profile, shared: bool, derate: float) -> dict:
    """Bandwidth, compute share and derate of a MIG instance, as the ceiling takes them."""
    return {"bandwidth_tbps": mig_bandwidth_tbps(gpu, profile),
            "compute_share": profile.compute_slices / (gpu.mig.compute_slices or 7),
            "derate": derate if shared else 1.0}


@dataclass(frozen=True)
class UnitCase:
    """What a sized unit's estimate is computed from: its shape, traffic, batch and ceiling."""

    shape: Shape
    traffic: Traffic
    batch: int
    ceiling_tokens_per_s: float
    price_share: float
    reasons: tuple[str, ...]


def unit_case(unit, sizing, arch, gpu, figures) -> UnitCase | None:
    """The estimate's inputs for a sized unit (report.UnitFigures) at the batch and context its
    ceiling uses, or None when it has no ceiling (it does not fit, or the model decodes nothing)."""
    from compiler.capacity.report import SHARED_GPU_DERATE
    from compiler.capacity.roofline import mig_gpu_share

    if figures.decode is None:
        return None
    profile = unit.mig.profile if unit.mig is not None else None
    common = dict(arch=arch, gpu=gpu, weights_fmt=sizing.weights_fmt, kv_fmt=sizing.kv_fmt, exclude=sizing.exclude,
                  overrides=sizing.overrides, block_size=sizing.block_size, max_num_tokens=sizing.max_num_tokens)
    if profile is not None:
        shape = Shape(**common, **mig_shape_args(gpu, profile, unit.instances_on_gpu > 1, SHARED_GPU_DERATE))
        share = mig_gpu_share(gpu, profile)
    else:
        shape = Shape(**common, tp=sizing.tp, pp=sizing.pp, attention_dp=sizing.attention_dp and sizing.tp > 1)
        share = float(figures.gpus)
    w = sizing.workload
    reasons: tuple[str, ...] = ()
    if w is None:
        # as the ceiling: every sequence at max_seq_len; prompts of half of it (an assumption, said)
        mean_in = mean_out = sizing.max_seq_len / 2
        traffic = Traffic(mean_in, mean_out, float(sizing.max_seq_len),
                          f"no workload: {mean_in:,.0f} in / {mean_out:,.0f} out assumed, context at max_seq_len")
        reasons = ("the spec has no workload (lengths assumed)",)
    else:
        context = min(w.decode_context, float(sizing.max_seq_len))
        traffic = Traffic(w.mean_input, w.mean_output, context, w.describe())
        if w.distribution:
            reasons = ("lengths are a distribution; the fit saw fixed lengths (its means are used)",)
    return UnitCase(shape, traffic, figures.decode.batch, figures.decode.tokens_per_s_at_batch, share, reasons)


def figures_estimate(unit, sizing, arch, gpu, figures, *, runtime_version: str, price_per_gpu_hour: float | None,
                     sla: Mapping | None = None) -> dict | None:
    """The modelled estimate of a sized unit, or None when it has no ceiling."""
    case = unit_case(unit, sizing, arch, gpu, figures)
    if case is None:
        return None
    return unit_estimate(shape=case.shape, batch=case.batch, traffic=case.traffic,
                         coef=coefficients_for(gpu.arch, sizing.weights_fmt, runtime_version,
                                               memory_class=gpu.memory_class),
                         ceiling_tokens_per_s=case.ceiling_tokens_per_s, price_share=case.price_share,
                         price_per_gpu_hour=price_per_gpu_hour, sla=sla, extra_reasons=case.reasons)
