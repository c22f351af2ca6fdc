"""Fitting the estimate's coefficients (estimate.py) to measured throughput: published rows and a
deployment's own `kiln tune` records use the same least squares.

Each measurement is a cohort (Work) and the time it took, `batch x output / tokens_per_s`. The fit
minimises the squared relative error of that time, sum((sum_k c_k f_k / T - 1)^2), subject to each
coefficient's floor (estimate.FLOORS), by solving every subset of free coefficients and keeping the
best feasible one: five coefficients, 32 small systems, no numerical library needed. Pure: rows in,
coefficients and residuals out.

Published rows (TensorRT-LLM perf-overview tables, trtllm-bench, max-load offline) become cohorts
the way trtllm-bench sets them up: the KV pool at its memory fraction holds sequences of isl + osl
tokens (GUARANTEED_NO_EVICT), the batch is that, at most 4096, and max_num_tokens is batch x
(1 + isl/osl) within [2048, 32768] (tensorrt_llm/bench/build/tuning.py, finetune_setting, read at
v0.20; its rounding to multiples is left out).
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from compiler.capacity.estimate import FEATURES, FLOORS, Shape, Work, cohort_work, compute_precision
from compiler.capacity.memory import gpu_memory_bytes, unit_capacity
from compiler.catalog.gpus import load_gpu_catalog
from compiler.capacity.published_rows import gpu_key, model_key, precision_formats
from compiler.catalog.models import estimate_params, load_model_catalog

#: trtllm-bench's setup (tuning.py) and the fraction of free memory the published runs gave the KV
#: cache ("--kv_cache_free_gpu_mem_fraction 0.95 in many cases", the tables' methodology).
BENCH_MAX_BATCH = 4096
BENCH_TOKENS = (2048, 32768)
BENCH_KV_FRACTION = 0.95


def release_of(version: str) -> str:
    """"1.2.1" or "v0.20" -> "1.2" / "0.20": the release line a coefficient set belongs to."""
    parts = version.lstrip("v").split(".")
    return ".".join(parts[:2])


def group_key(gpu_arch: str, weights_fmt: str, release: str) -> str:
    """A coefficient set's key: GPU architecture (its generation; "Blackwell Ultra" is its own) /
    the tensor-core precision the matmuls run at / the release line."""
    return f"{gpu_arch}/{compute_precision(weights_fmt)}/{release}"


@dataclass(frozen=True)
class Measured:
    """One measurement as the fit sees it: the cohort and its observed output tokens/s."""

    label: str
    group: str
    work: Work
    tokens_per_s: float
    facts: Mapping[str, object]  # model, gpu, release, tp, isl, osl... (for grouping and ranges)
    shape: Shape | None = None  # what the estimate was asked (None: a record without one)

    @property
    def seconds(self) -> float:
        return self.work.output_tokens / self.tokens_per_s


def bench_batch_and_tokens(sequences: int, isl: int, osl: int) -> tuple[int, int]:
    batch = max(1, min(sequences, BENCH_MAX_BATCH))
    lo, hi = BENCH_TOKENS
    return batch, int(min(hi, max(lo, math.ceil(batch * (1 + isl / osl)))))


def published_case(row: Mapping) -> Measured | None:
    """A published row as a measurement, or None when its model, GPU or precision is not in the
    catalog or it does not fit (the tables only list configurations that ran, so that would be a
    catalog gap). Optional row fields: `attention_dp` (each of the tp ranks its own requests), `ep`
    (expert parallelism; the whole group under attention DP when not given),
    `concurrency` (the benchmark's concurrency, when it was not trtllm-bench's maximum load) and
    `kv_precision`."""
    models, gpus = load_model_catalog(), load_gpu_catalog()
    key = model_key(str(row["model"]), models.names) or ""
    arch = models.get(key)
    gpu = gpus.get(gpu_key(str(row["gpu"]), gpus.names) or "")
    formats = precision_formats(row, key)
    if arch is None or gpu is None or formats is None:
        return None
    wfmt, kvfmt = formats
    tp, isl, osl = int(row["tp"]), int(row["isl"]), int(row["osl"])
    adp = bool(row.get("attention_dp")) and tp > 1
    # TensorRT-LLM's published attention-DP configurations run the experts expert-parallel over the group
    ep = int(row.get("ep") or (tp if adp else 1))
    tokens = 8192
    batch = 1
    for _ in range(2):  # the reserve depends on max_num_tokens, which depends on the batch
        cap = unit_capacity(arch, gpu_memory_bytes(gpu), weights_fmt=wfmt, kv_fmt=kvfmt, tp=tp,
                            max_seq_len=isl + osl, max_batch_size=BENCH_MAX_BATCH, max_num_tokens=tokens,
                            kv_cache_memory_fraction=BENCH_KV_FRACTION, attention_dp=adp, ep=ep)
        if not cap.fits or cap.max_sequences < 1:
            return None
        held = cap.max_sequences if not row.get("concurrency") else min(cap.max_sequences, int(row["concurrency"]))
        batch, tokens = bench_batch_and_tokens(held, isl, osl)
    shape = Shape(arch=arch, gpu=gpu, weights_fmt=wfmt, kv_fmt=kvfmt, tp=tp, max_num_tokens=tokens, attention_dp=adp)
    work = cohort_work(shape, batch, isl, osl, isl + osl / 2)
    release = release_of(str(row["doc_version"]))
    facts = {"model": row["model"], "gpu": gpu.name, "release": release, "precision": row["precision"],
             "weights_fmt": wfmt, "tp": tp, "isl": isl, "osl": osl, "batch": batch,
             "active_params": estimate_params(arch)[1], "family": model_family(str(row["model"])),
             "mode": "MoE" if arch.is_moe else "dense", "generation": gpu.arch,
             "parallelism": "attention-DP" if adp else "tensor"}
    label = f"{row['doc_version']} {row['model']} {row['precision']} {row['gpu']} tp{tp} {isl}/{osl}"
    return Measured(label, group_key(gpu.arch, wfmt, release), work, float(row["value"]), facts, shape)


def model_family(name: str) -> str:
    """"Llama 3.1 70B" -> "llama", "Qwen3-235B-A22B" -> "qwen3": what a left-out-family fold leaves out
    (the same normalisation as estimate_unit.family_of, which a plan applies to its model's name)."""
    return re.split(r"[-_ .]", name.strip().lower())[0]


# --- least squares under floors ------------------------------------------------------------------------
def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(cases: Sequence[Measured], features: Sequence[str] = FEATURES,
        floors: Mapping[str, float] = FLOORS) -> dict[str, float]:
    """Coefficients minimising the squared relative time error, each at or above its floor (FLOORS
    unless given). Features no case exercises (all zero) stay at their floor."""
    if not cases:
        raise ValueError("nothing to fit")
    cols = [k for k in features if any(c.work.terms[k] > 0 for c in cases)]
    # rows: f_k / T, target 1 - sum(floor_k f_k / T); columns scaled to unit RMS for conditioning
    x = [[c.work.terms[k] / c.seconds for k in cols] for c in cases]
    y = [1.0 - sum(floors[k] * c.work.terms[k] for k in features) / c.seconds for c in cases]
    scale = [math.sqrt(sum(r[j] ** 2 for r in x) / len(x)) or 1.0 for j in range(len(cols))]
    xs = [[r[j] / scale[j] for j in range(len(cols))] for r in x]
    # the normal equations once; each subset is then a small system and its residual sum of squares
    # y'y - 2 d'(X'y)_S + d' G_S d, with no further pass over the rows
    n = len(cols)
    gram = [[sum(r[i] * r[j] for r in xs) for j in range(n)] for i in range(n)]
    xty = [sum(r[i] * y[k] for k, r in enumerate(xs)) for i in range(n)]
    yty = sum(v * v for v in y)
    best, best_sse = [0.0] * n, yty
    for size in range(1, n + 1):
        for subset in itertools.combinations(range(n), size):
            d = _solve([[gram[i][j] for j in subset] for i in subset], [xty[i] for i in subset])
            if d is None or any(v < 0 for v in d):
                continue
            sse = yty - 2 * sum(v * xty[i] for v, i in zip(d, subset)) + sum(
                d[a] * d[b] * gram[i][j] for a, i in enumerate(subset) for b, j in enumerate(subset))
            if sse < best_sse - 1e-12:
                best, best_sse = [0.0] * n, sse
                for i, v in zip(subset, d):
                    best[i] = v
    out = dict(floors)
    for j, k in enumerate(cols):
        out[k] = floors[k] + best[j] / scale[j]
    return {k: out[k] for k in features}


def predict(work: Work, coefficients: Mapping[str, float]) -> float:
    return work.output_tokens / work.time(coefficients)


def log_residuals(cases: Iterable[Measured], coefficients: Mapping[str, float]) -> list[float]:
    """ln(observed / predicted) per case."""
    return [math.log(c.tokens_per_s / predict(c.work, coefficients)) for c in cases]


def quantile(values: Sequence[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return 0.0
    pos = q * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summary(residuals: Sequence[float]) -> dict:
    """Residual statistics kept with a coefficient set: its interval is the 5th-95th percentile."""
    errs = [abs(math.exp(r) - 1) for r in residuals]
    return {"rows": len(residuals),
            "median_abs_error": round(statistics.median(errs), 4) if errs else None,
            "within_25pct": round(sum(e <= 0.25 for e in errs) / len(errs), 4) if errs else None,
            "log_p05": round(quantile(residuals, 0.05), 4), "log_p95": round(quantile(residuals, 0.95), 4)}


def ranges(cases: Sequence[Measured]) -> dict:
    """What a coefficient set was fitted on: the span of each fact an estimate is compared with."""
    def span(key):
        vals = [c.facts[key] for c in cases]
        return [min(vals), max(vals)]
    return {"isl": span("isl"), "osl": span("osl"), "tp": span("tp"), "batch": span("batch"),
            "active_params": span("active_params"), "models": sorted({str(c.facts["model"]) for c in cases}),
            "families": sorted({str(c.facts["family"]) for c in cases}),
            "modes": sorted({str(c.facts["mode"]) for c in cases}),
            "parallelisms": sorted({str(c.facts["parallelism"]) for c in cases}),
            "gpus": sorted({str(c.facts["gpu"]) for c in cases})}


def fit_groups(cases: Sequence[Measured]) -> dict[str, dict]:
    """A coefficient set per GPU generation x precision x release, and a pooled one per precision
    ("<generation>/<precision>/*") and overall ("*"), each with its residuals and ranges.

    The per-step overhead is fitted overall first and is the floor of every other set's: the
    published runs are all at maximum load, where a group's own rows barely see the overhead, and a
    group fitted alone could put it at 0 (a tiny model at a small batch then came out near its
    ceiling while its sibling on the pooled set did not). (The per-request overhead floored the
    same way was tried: the leave-one-family-out folds got worse, 78% -> 73% within 25%.)"""
    groups: dict[str, list[Measured]] = {}
    for c in cases:
        gen, prec, _ = c.group.split("/")
        for key in (c.group, f"{gen}/{prec}/*", "*"):
            groups.setdefault(key, []).append(c)
    out = {}
    pooled_steps = fit(groups["*"])["steps"] if "*" in groups else FLOORS["steps"]
    floors = {**FLOORS, "steps": pooled_steps}
    for key in sorted(groups):
        members = groups[key]
        coef = fit(members) if key == "*" else fit(members, floors=floors)
        out[key] = {"coefficients": {k: float(f"{v:.6g}") for k, v in coef.items()},
                    "residuals": summary(log_residuals(members, coef)), "range": ranges(members)}
    return out
