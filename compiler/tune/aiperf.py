"""The AIPerf command line of a tuning run (pure), and finding the executable.

Facts (AIPerf 0.13.0, `aiperf profile --help` and its search_recipes/_max_concurrency_under_sla.py):
  - `--search-recipe max-concurrency-under-sla` runs a 1D search over the profiling phase's
    concurrency between `--concurrency-min` and `--concurrency-max`; `--search-style` picks the
    planner (smooth_isotonic by default, monotonic, bo, optuna, grid). It needs at least one of its
    own SLA flags; its TTFT/TPOT flags are fixed to p95 ("lt"), so Kiln states the spec's percentile
    with `--search-sla "metric:stat:le:threshold"` filters (which compose with the recipe's) and
    gives the recipe `--error-rate-sla` (a fraction; "lt" on the run's request_error_rate).
  - The recipe's grid style evaluates only the recipe's own flags, not `--search-sla`; Kiln's grid
    is therefore a plain concurrency sweep (`--concurrency 1,2,4,...`) whose points Kiln judges
    itself from each run's profile_export_aiperf.json (compiler/tune/results.py).
  - TPOT is AIPerf's `inter_token_latency` (per request; its statistics are over requests).
  - Synthetic prompts: `--isl`/`--isl-stddev`, `--osl`/`--osl-stddev`; a distribution of (ISL, OSL)
    pairs is `--seq-dist "ISL,OSL:percent;..."` (percentages summing to 100 within 1e-6).
  - `--extra-inputs ignore_eos:true` asks the server for exactly `--osl` tokens (vLLM, trtllm-serve).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from compiler.ir.measured import SlaRecord

RECIPE = "max-concurrency-under-sla"
ADAPTIVE_STYLES = ("smooth_isotonic", "monotonic")
STYLES = ADAPTIVE_STYLES + ("grid",)
METRICS = {"ttft_ms": "time_to_first_token", "tpot_ms": "inter_token_latency"}
ERROR_METRIC = "request_error_rate"
VERSION_TESTED = "0.13.0"


class AiperfNotFound(Exception):
    pass


@dataclass(frozen=True)
class Lengths:
    """Token lengths as the spec's workload gives them: an average, or (tokens, share) pairs."""

    value: int | tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class RunPlan:
    """Everything the AIPerf command line says."""

    model: str  # the name the endpoint serves the model as
    url: str
    tokenizer: str  # a local directory or a Hugging Face id
    tokenizer_revision: str | None
    input_tokens: Lengths
    output_tokens: Lengths
    sla: SlaRecord
    style: str
    concurrency_min: int
    concurrency_max: int
    outputs: Path
    requests: int | None = None  # per probe; None: AIPerf's default for the style
    grid: tuple[int, ...] = ()  # the grid style's concurrencies
    seed: int = 7
    extra: tuple[str, ...] = field(default_factory=tuple)  # passed through after Kiln's arguments


def grid_points(lo: int, hi: int, n: int) -> tuple[int, ...]:
    """`n` log-spaced concurrencies from `lo` to `hi`, both included, without repeats."""
    if hi <= lo or n < 2:
        return (lo,) if hi <= lo else (lo, hi)
    pts = {lo, hi}
    for i in range(1, n - 1):
        pts.add(int(round(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (n - 1)))))
    return tuple(sorted(p for p in pts if lo <= p <= hi))


def _moments(lengths: Lengths) -> tuple[float, float]:
    if isinstance(lengths.value, int):
        return float(lengths.value), 0.0
    mean = sum(t * s for t, s in lengths.value)
    var = sum(s * (t - mean) ** 2 for t, s in lengths.value)
    return mean, math.sqrt(var)


def _pairs(lengths: Lengths) -> list[tuple[int, float]]:
    return [(lengths.value, 1.0)] if isinstance(lengths.value, int) else list(lengths.value)


def workload_args(input_tokens: Lengths, output_tokens: Lengths) -> list[str]:
    """Prompt and output lengths: averages as --isl/--osl, a distribution as --seq-dist pairs (the
    spec's input and output lengths are independent, so each pair's share is the product)."""
    if isinstance(input_tokens.value, int) and isinstance(output_tokens.value, int):
        return ["--isl", str(input_tokens.value), "--isl-stddev", "0",
                "--osl", str(output_tokens.value), "--osl-stddev", "0"]
    pairs = [(i, o, si * so) for i, si in _pairs(input_tokens) for o, so in _pairs(output_tokens)]
    total = sum(p for _, _, p in pairs)
    # in millionths of a percent, the remainder on the largest pair: AIPerf wants a sum of 100 to 1e-6
    micro = [round(p / total * 100_000_000) for _, _, p in pairs]
    micro[micro.index(max(micro))] += 100_000_000 - sum(micro)
    spec = ";".join(f"{i},{o}:{m // 1_000_000}.{m % 1_000_000:06d}" for (i, o, _), m in zip(pairs, micro) if m > 0)
    return ["--seq-dist", spec]


def sla_filters(sla: SlaRecord) -> list[str]:
    """`--search-sla` filters for the spec's latency targets at its percentile."""
    out = []
    for key, metric in METRICS.items():
        target = getattr(sla, key)
        if target is not None:
            out += ["--search-sla", f"{metric}:{sla.percentile}:le:{target:g}"]
    return out


def command(executable: str, plan: RunPlan) -> list[str]:
    argv = [executable, "profile", "--model", plan.model, "--url", plan.url, "--endpoint-type", "chat",
            "--streaming", "--tokenizer", plan.tokenizer]
    if plan.tokenizer_revision:
        argv += ["--tokenizer-revision", plan.tokenizer_revision]
    argv += workload_args(plan.input_tokens, plan.output_tokens)
    argv += ["--extra-inputs", "ignore_eos:true", "--random-seed", str(plan.seed),
             "--artifact-dir", str(plan.outputs), "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    if plan.requests is not None:
        argv += ["--request-count", str(plan.requests)]
    if plan.style == "grid":
        argv += ["--concurrency", ",".join(str(c) for c in plan.grid)]
    else:
        argv += ["--search-recipe", RECIPE, "--search-style", plan.style,
                 "--concurrency-min", str(plan.concurrency_min), "--concurrency-max", str(plan.concurrency_max),
                 "--error-rate-sla", f"{plan.sla.max_error_rate:g}"] + sla_filters(plan.sla)
    return argv + list(plan.extra)


def find_aiperf(explicit: str | None) -> str:
    """The `aiperf` executable: --aiperf, else $KILN_AIPERF, else the first on PATH."""
    candidate = explicit or os.environ.get("KILN_AIPERF")
    if candidate:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise AiperfNotFound(f"{candidate} is not an executable file")
    found = shutil.which("aiperf")
    if found is None:
        raise AiperfNotFound("no `aiperf` on PATH; install it (pip install 'kiln-compiler[tune]', or into a virtual "
                             "environment of its own) and give its path with --aiperf or $KILN_AIPERF")
    return found


def aiperf_version(executable: str) -> str:
    proc = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=120)
    words = (proc.stdout or proc.stderr).split()
    if proc.returncode != 0 or not words:
        raise AiperfNotFound(f"{executable} --version failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    return words[-1]
