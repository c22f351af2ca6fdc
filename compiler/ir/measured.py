"""Measured limits: the record `kiln tune` writes beside a spec, and how a limit is read from it.

`kiln tune` drives AIPerf's SLA search against a serving unit and writes what it found to
tune/<unit>.json: the largest concurrency that met the model's `sla`, the search and its probes,
and what was measured (the artifact keys of the model, the image, the GPU slice, the tool). A
spec refers to it (`limits.max_batch_size: {measured: tune/<unit>.json}`); resolution reads it,
and the limits pass turns the measured concurrency into the batch limit everything else reads.

The record is an input like calibration data: committed with the spec, its digest enters the
keys of the artifacts that read the limit, and `git revert` of both gives the earlier build back.
Its artifact keys say what was measured, so a spec that now builds something else is reported
(K914) instead of silently carrying a number measured on other artifacts.

Format (JSON, canonical, `"kind": "kiln.tune/v2"`): see `TuneRecord`. v2 adds `inputs`, what each
measured artifact was built from as IR fields (compiler/ir/tune_inputs.py), so `kiln validate` judges
a record without lowering; a v1 record is still read, its artifacts compared where the spec is lowered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from compiler.boundedjson import BoundedJSONError, loads_bounded
from compiler.catalog.cudagraphs import load_cuda_graph_defaults
from compiler.store.canonical import pretty_json

KIND = "kiln.tune/v2"  # what `kiln tune` writes
KINDS = ("kiln.tune/v1", KIND)  # what is read


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Bounds of a record's numbers: estimates divide by latencies and take logs of their ratios, so a
# zero, negative or astronomically large latency is refused where the record is read (K913), not
# met as a division by zero later. An hour per token or first token is far past any SLA.
MAX_LATENCY_MS = 3_600_000.0
MAX_CONCURRENCY = 1 << 24
Latency = Annotated[float, Field(gt=0, le=MAX_LATENCY_MS, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-1e12, le=1e12)]


class Probe(_Strict):
    """One benchmark run of the search: a concurrency and what the SLA statistics were there."""

    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    feasible: bool
    ttft_ms: Latency | None = None  # time to first token at the SLA's percentile
    tpot_ms: Latency | None = None  # inter-token latency at the SLA's percentile
    error_rate_pct: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    requests: int | None = Field(default=None, ge=0, le=1 << 40)


class Breach(_Strict):
    """The SLA filter that failed first at the lowest failing concurrency (AIPerf's first_breach)."""

    metric: str
    stat: str
    op: str
    threshold: Finite
    observed: Finite | None = None


class Result(_Strict):
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)  # the largest concurrency that met the SLA
    first_failing: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)  # None: nothing in range failed
    limited_by: Literal["sla", "search-bound"]  # search-bound: the top of the range still passed
    binding_constraint: str | None = None  # the AIPerf metric that set the boundary
    first_breach: Breach | None = None
    boundary_type: Literal["smooth", "cliff"] | None = None  # None: the search style does not assess it
    monotonic: bool  # AIPerf found no feasible verdict above an infeasible one
    accepted: list[str] = []  # irregularities the operator accepted (`--allow-...`): "non-monotonic", "cliff"
    convergence: str | None = None
    probes: list[Probe]


class Search(_Strict):
    tool: str  # "aiperf"
    version: str
    recipe: str
    style: str
    concurrency_min: int
    concurrency_max: int
    capacity_bound: int  # the unit's modelled concurrency (memory) that bounded the search
    requests_per_probe: int | None = None  # None: AIPerf's default for the style
    seed: int
    command: list[str]
    result_file: str  # the AIPerf file the result was read from, relative to the outputs
    result_sha256: str
    outputs: str  # where the run's AIPerf outputs were kept (relative to where kiln tune ran)


class SlaRecord(_Strict):
    ttft_ms: Latency | None
    tpot_ms: Latency | None
    percentile: str
    max_error_rate: float = Field(ge=0, le=1, allow_inf_nan=False)


class Served(_Strict):
    """What the unit served while it was measured: the batch limit then, and the record it came from."""

    max_batch_size: int
    measured_digest: str | None = None


class GpuRecord(_Strict):
    name: str
    slice: str  # MIG profile, "1 GPU" or the tensor-parallel group
    clocks: dict[str, Any] | None = None  # the spec's locked clocks for that GPU
    application_clocks: dict[str, Any] | None = None
    power_limit_w: int | None = None
    observed: dict[str, Any] | None = None  # nvidia-smi's report at measurement time, when it was reachable


class ImageRecord(_Strict):
    repository: str | None = None
    digest: str | None = None  # the serving image's digest, from the store or --image-digest


class TuneRecord(_Strict):
    """A measurement record (tune/<unit>.json)."""

    kind: Literal["kiln.tune/v1", "kiln.tune/v2"]
    spec: str
    unit: str
    model: str
    measured_at: str
    url: str
    result: Result
    search: Search
    sla: SlaRecord
    workload: dict[str, Any]
    served: Served
    artifacts: dict[str, str]  # action id -> key, as the spec built them when measured (see compiler.staleness)
    image: ImageRecord
    gpu: GpuRecord
    # v2: measured artifact id -> {IR field -> digest} of what it was built from (compiler/ir/tune_inputs.py)
    inputs: dict[str, dict[str, str]] | None = None

    @model_validator(mode="after")
    def _inputs_by_kind(self) -> TuneRecord:
        if (self.inputs is not None) != (self.kind == KIND):
            raise ValueError(f"`inputs` is {'required' if self.kind == KIND else 'not part of'} {self.kind}")
        return self


class RecordError(ValueError):
    """Not a measurement record; `line` and `column` are 1-based (1 when unknown)."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


# What the format needs, with room: a record is a few KB and nests 5 levels (gpu.observed holds
# nvidia-smi's report); its numbers are counts, milliseconds and MHz.
MAX_RECORD_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_NUMBER_CHARS = 40


def parse_record(text: str) -> TuneRecord:
    try:
        doc = loads_bounded(text, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS, max_chars=MAX_RECORD_BYTES)
    except BoundedJSONError as e:
        raise RecordError(e.message, e.line, e.column) from None
    if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
        raise RecordError(f"not a measurement record (it must be a JSON object with \"kind\": \"{KIND}\" "
                          f"or an earlier {' or '.join(KINDS[:-1])})")
    try:
        return TuneRecord.model_validate(doc)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RecordError((f"{where}: " if where else "") + first['msg'] + (f" (and {e.error_count() - 1} more)"
                                                        if e.error_count() > 1 else "")) from None


def render_record(record: TuneRecord) -> bytes:
    return pretty_json(record.model_dump(mode="json", exclude={"inputs"} if record.inputs is None else None))


def record_name(unit_id: str) -> str:
    """The file name of a unit's record: its id with '/' as '.' (unit ids are names, digits and '/')."""
    return unit_id.replace("/", ".") + ".json"


# --- the limit -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    """A model's measured `max_batch_size`: the record it refers to and, after the limits pass, the
    limit taken from it."""

    ref: str  # as the spec writes it
    path: Path
    digest: str  # "sha256:<hex>" of the record file
    record: TuneRecord
    limit: int | None = None  # limits pass
    derivation: str = ""  # limits pass: how the limit follows from the measured concurrency


@dataclass(frozen=True)
class RecordState:
    """The records pass's finding on a model's measurement record, read from the IR (tune_inputs.py):
    what the record measured that the spec no longer describes. A record whose list is empty still
    applies: the estimates pass takes its figures, and the commands that lower compare its artifact
    keys too (compiler/staleness.py)."""

    changes: tuple[str, ...]  # "<artifact> changed (<fields>)", "the sla changed", ...: K914 when any
    predates_inputs: bool = False  # a kiln.tune/v1 record: no input fingerprints to compare (K917)

    @property
    def applies(self) -> bool:
        return not self.changes


MAX_BATCH_SIZE = 65536  # the bound of limits.max_batch_size (compiler/spec/models.py)


def batch_limit(concurrency: int, *, target: str, cuda_graph_batch_sizes: list[int] | None,
                ranks: int = 1) -> tuple[int, str]:
    """The batch limit a measured unit concurrency gives, and how.

    Under attention DP each of the `ranks` schedules its own batch, so the unit's concurrency is
    split between them. On the llmapi target (TensorRT-LLM's PyTorch backend) the limit is rounded
    down to a CUDA-graph batch size: the spec's `runtime.cuda_graph_batch_sizes`, else the sizes the
    backend captures by default, so a full batch decodes on a captured graph rather than eagerly.
    The engine target has no CudaGraphConfig; its limit is the concurrency itself. Either way the
    limit is at most MAX_BATCH_SIZE, the largest `max_batch_size` a spec can state."""
    per_rank = max(1, concurrency // max(1, ranks))
    what = f"measured concurrency {concurrency}" + (f" over {ranks} attention-DP ranks" if ranks > 1 else "")
    if per_rank > MAX_BATCH_SIZE:
        per_rank, what = MAX_BATCH_SIZE, f"{what}, capped at {MAX_BATCH_SIZE} (the largest max_batch_size)"
    if target != "llmapi":
        return per_rank, f"{what}, taken as is (the engine target captures no CUDA-graph sizes)"
    if cuda_graph_batch_sizes:
        sizes, where = sorted(cuda_graph_batch_sizes), "runtime.cuda_graph_batch_sizes"
    else:
        defaults = load_cuda_graph_defaults()
        sizes, where = list(defaults.batch_sizes), "TensorRT-LLM's default CUDA-graph sizes"
    fit = [s for s in sizes if s <= per_rank]
    if not fit:
        return per_rank, f"{what}; no CUDA-graph batch size of {where} is <= {per_rank}"
    if fit[-1] == per_rank:
        return per_rank, f"{what}, a CUDA-graph batch size of {where}"
    return fit[-1], f"{what}, rounded down to {fit[-1]}, the largest CUDA-graph batch size of {where} <= {per_rank}"


def unit_facts(ir, unit_id: str) -> dict[str, str] | None:
    """The GPU and slice of a unit of the analysed IR (None when the spec has no such unit)."""
    unit = next((u for u in ir.units if u.id == unit_id), None)
    if unit is None:
        return None
    host = ir.hosts[unit.host]
    if unit.mig is not None:
        slice_ = unit.mig.instance.profile
    elif len(unit.gpu_indexes) == 1:
        slice_ = "1 GPU"
    else:
        slice_ = f"{len(unit.gpu_indexes)} GPUs"
    return {"model": unit.model, "gpu": host.gpu.name if host.gpu is not None else host.spec.gpu, "slice": slice_}


def unit_settings(ir, unit_id: str) -> dict[str, Any]:
    """The GPU settings the spec locks for a unit (its assignment's, else its host's), as a record keeps
    them (GpuRecord): clocks, application clocks, power limit. A measurement holds at these only."""
    unit = next(u for u in ir.units if u.id == unit_id)
    host = ir.hosts[unit.host].spec
    assignment = host.gpus[unit.path[3]]
    clocks = assignment.clocks or host.clocks
    return {"clocks": clocks.model_dump(mode="json") if clocks else None,
            "application_clocks": host.application_clocks.model_dump(mode="json") if host.application_clocks else None,
            "power_limit_w": assignment.power_limit_w or host.power_limit_w}


def sla_record(sla) -> SlaRecord:
    return SlaRecord(ttft_ms=sla.ttft_ms, tpot_ms=sla.tpot_ms, percentile=sla.percentile,
                     max_error_rate=sla.max_error_rate)


def spec_changes(ir, model: str, measured: Measurement) -> list[str]:
    """What differs between the spec and a model's record, other than artifacts (their inputs:
    compiler/ir/tune_inputs.py; their keys: compiler/staleness.py): the unit, its slice and the GPU
    settings it is locked at, the SLA, the workload."""
    rec = measured.record
    rm = ir.models[model]
    out = []
    facts = unit_facts(ir, rec.unit)
    if facts is None:
        out.append(f"the spec has no unit {rec.unit!r} any more")
    else:
        if facts["model"] != model:
            out.append(f"unit {rec.unit!r} now serves {facts['model']!r}")
        if (facts["gpu"], facts["slice"]) != (rec.gpu.name, rec.gpu.slice):
            out.append(f"unit {rec.unit!r} is now {facts['slice']} of {facts['gpu']} "
                       f"(measured on {rec.gpu.slice} of {rec.gpu.name})")
        now = unit_settings(ir, rec.unit)
        changed = [k for k in sorted(now) if now[k] != getattr(rec.gpu, k)]
        if changed:  # the same GPU locked elsewhere serves at another pace
            out.append(f"unit {rec.unit!r} runs at other GPU settings ("
                       + ", ".join(f"{k} {_setting(getattr(rec.gpu, k))} when measured, {_setting(now[k])} now"
                                   for k in changed) + ")")
    sla = rm.spec.sla
    if sla is None:
        out.append("the model has no `sla` any more")
    elif sla_record(sla) != rec.sla:
        out.append(f"the sla changed ({_sla_text(rec.sla)} when measured, {_sla_text(sla_record(sla))} now)")
    workload = rm.spec.workload.model_dump(mode="json") if rm.spec.workload is not None else None
    if workload != rec.workload:
        out.append("the workload changed" if workload is not None else "the model has no `workload` any more")
    return out


def _setting(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()) if v is not None) or "unset"
    return str(value)


def _sla_text(s: SlaRecord) -> str:
    parts = [f"TTFT {s.ttft_ms:g} ms" if s.ttft_ms is not None else "",
             f"TPOT {s.tpot_ms:g} ms" if s.tpot_ms is not None else ""]
    return f"{s.percentile} " + " and ".join(p for p in parts if p) + f", errors < {s.max_error_rate:.0%}"
