"""One `kiln tune` run: validate the spec, plan AIPerf's search for a unit, run it with progress,
judge its result, and write the measurement record (and the spec's reference to it).

What is measured is what the spec builds now: serve that build on the unit before tuning. The
record names it by artifact keys (compiler/staleness.py), so a later spec that builds something
else is reported stale instead of carrying a number measured on other artifacts.
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from compiler.store.digests import DigestCache
from compiler.ir.inputs import replace_file
from compiler.ir.measured import (GpuRecord, ImageRecord, Measurement, Result, Search, Served, TuneRecord,
                                  record_name, render_record, sla_record, unit_settings)
from compiler.lower import lower_ir
from compiler.pipeline import Validation, validate_path
from compiler.spec.models import MeasuredLimit as MeasuredRef
from compiler.staleness import what_was_measured
from compiler.store.local import sha256_file

from . import aiperf, gpu
from .results import Outcome, ResultError, adaptive_outcome, breaches, grid_outcome, read_probe
from .specedit import EditError, with_measured_limit

Progress = Callable[[str], None]


class TuneError(Exception):
    """The run cannot start, failed, or its result was refused; `validation` when the spec has errors."""

    def __init__(self, message: str, validation: Validation | None = None, outputs: Path | None = None) -> None:
        super().__init__(message)
        self.validation, self.outputs = validation, outputs


@dataclass
class TuneOptions:
    spec: Path
    unit: str
    url: str
    aiperf: str | None = None  # the executable; default $KILN_AIPERF or PATH
    style: str = "smooth_isotonic"
    max_concurrency: int | None = None  # caps the search below the capacity bound
    grid_points: int = 8
    requests: int | None = None  # per probe
    seed: int = 7
    served_name: str | None = None  # default: the spec's model name
    tokenizer: str | None = None  # default: the model's local source, or its Hugging Face repository
    outputs: Path | None = None  # default: .kiln/tune/<unit>-<time>
    record: Path | None = None  # default: tune/<unit>.json beside the spec
    write_spec: bool = True
    allow_non_monotonic: bool = False
    allow_cliff: bool = False
    image_digest: str | None = None
    store: Path | None = None
    gpu_query: bool = True
    timeout_s: float | None = None
    extra: tuple[str, ...] = ()
    now: Callable[[], _dt.datetime] = field(default=lambda: _dt.datetime.now(_dt.timezone.utc))


@dataclass(frozen=True)
class TuneOutcome:
    record: TuneRecord
    record_path: Path
    spec_edited: bool
    limit: int | None  # the batch limit the spec now gets from the record
    derivation: str
    outputs: Path
    wall_s: float
    validation: Validation  # the spec as validated after the record was written


@dataclass(frozen=True)
class Planned:
    validation: Validation
    unit: object
    model: str
    plan: aiperf.RunPlan
    bound: int
    record_path: Path
    ref: str


def _stamp(now: _dt.datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ")


def plan_run(opts: TuneOptions) -> Planned:
    """Everything the run needs, checked before AIPerf starts."""
    validation = validate_path(opts.spec)
    if not validation.ok or validation.resolved is None:
        raise TuneError(f"{opts.spec} has errors; fix them first", validation)
    ir = validation.resolved
    unit = next((u for u in ir.units if u.id == opts.unit), None)
    if unit is None:
        raise TuneError(f"the spec has no serving unit {opts.unit!r}; its units: "
                        + ", ".join(u.id for u in ir.units))
    rm = ir.models[unit.model]
    m = rm.spec
    if m.sla is None:
        raise TuneError(f"model {unit.model!r} has no `sla`: say what to hold the unit to, e.g. "
                        "sla: {ttft_ms: 500, tpot_ms: 30, percentile: p99}")
    if m.workload is None:
        raise TuneError(f"model {unit.model!r} has no `workload`: the search needs prompt and output lengths, "
                        "e.g. workload: {input_tokens: 512, output_tokens: 256}")
    if unit.figures is None or unit.figures.concurrency_bound < 1:
        why = unit.unsized or "its model does not fit in its memory"
        raise TuneError(f"unit {unit.id} has no capacity bound to search under: {why}")
    bound = unit.figures.concurrency_bound
    hi = min(bound, opts.max_concurrency) if opts.max_concurrency else bound
    if hi < 2:
        raise TuneError(f"the search range of unit {unit.id} is [1, {hi}] (capacity bound {bound}"
                        + (f", --max-concurrency {opts.max_concurrency}" if opts.max_concurrency else "")
                        + "): nothing to search")
    if opts.style not in aiperf.STYLES:
        raise TuneError(f"unknown search style {opts.style!r}; one of {', '.join(aiperf.STYLES)}")
    now = opts.now()
    outputs = opts.outputs or Path(".kiln") / "tune" / f"{record_name(unit.id)[:-5]}-{_stamp(now)}"
    if outputs.exists() and any(outputs.iterdir()):
        raise TuneError(f"{outputs} is not empty; give --output a new directory")
    record_path = opts.record or opts.spec.parent / "tune" / record_name(unit.id)
    ref = Path(os.path.relpath(record_path.resolve(), opts.spec.resolve().parent)).as_posix()
    src = m.source
    # a local source's path was confined to the spec's repository when the spec was validated
    tokenizer = opts.tokenizer or (str(validation.resolved.input_path(src.path)) if src.path else src.huggingface)
    revision = None if (opts.tokenizer or src.path) else src.revision

    def lengths(v):
        return aiperf.Lengths(v if isinstance(v, int) else tuple((b.tokens, b.share) for b in v))

    grid = aiperf.grid_points(1, hi, opts.grid_points) if opts.style == "grid" else ()
    plan = aiperf.RunPlan(model=opts.served_name or unit.model, url=opts.url, tokenizer=tokenizer,
                          tokenizer_revision=revision, input_tokens=lengths(m.workload.input_tokens),
                          output_tokens=lengths(m.workload.output_tokens), sla=sla_record(m.sla), style=opts.style,
                          concurrency_min=1, concurrency_max=hi, outputs=outputs, requests=opts.requests,
                          grid=grid, seed=opts.seed, extra=tuple(opts.extra))
    return Planned(validation, unit, unit.model, plan, bound, record_path, ref)


# --- running AIPerf --------------------------------------------------------------------------------
def _describe(probe, sla) -> str:
    parts = []
    if probe.ttft_ms is not None:
        parts.append(f"TTFT {sla.percentile} {probe.ttft_ms:,.1f} ms")
    if probe.tpot_ms is not None:
        parts.append(f"TPOT {sla.percentile} {probe.tpot_ms:,.1f} ms")
    if probe.error_rate_pct is not None:
        parts.append(f"errors {probe.error_rate_pct:g}%")
    missed = breaches(probe, sla)
    verdict = "meets the SLA" if not missed else "misses " + ", ".join(
        f"{b.metric} ({b.observed if b.observed is None else round(b.observed, 1)} vs {b.threshold:g})" for b in missed)
    return ", ".join(parts) + f": {verdict}"


def run_aiperf(argv: list[str], outputs: Path, sla, progress: Progress, timeout_s: float | None) -> int:
    """Run AIPerf with its output in outputs/aiperf.log, reporting each finished probe; its exit code."""
    outputs.mkdir(parents=True, exist_ok=True)
    seen: set[Path] = set()
    started = time.monotonic()
    with open(outputs / "aiperf.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            while True:
                try:
                    rc = proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    rc = None
                for path in sorted(outputs.rglob("profile_export_aiperf.json")):
                    if path in seen:
                        continue
                    try:
                        probe = read_probe(path, sla)
                    except ResultError:
                        continue  # still being written
                    seen.add(path)
                    progress(f"  probe {len(seen)}: concurrency {probe.concurrency}: {_describe(probe, sla)} "
                             f"[{time.monotonic() - started:,.0f} s]")
                if rc is not None:
                    return rc
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    _stop(proc)
                    raise TuneError(f"AIPerf ran longer than {timeout_s:g} s and was stopped; its outputs are in "
                                    f"{outputs}", outputs=outputs)
        except BaseException:
            _stop(proc)
            raise


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # AIPerf runs services in child processes: stop the group
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# --- the record ------------------------------------------------------------------------------------
def judge(outcome: Outcome, opts: TuneOptions) -> Result:
    """The search result, or TuneError when it gives no limit or is irregular and not accepted."""
    if outcome.feasible_max is None:
        first = outcome.probes[0] if outcome.probes else None
        raise TuneError("no concurrency in the search range met the SLA" +
                        (f" (at {first.concurrency}: {outcome.first_breach.metric} {outcome.first_breach.observed} "
                         f"vs {outcome.first_breach.threshold:g})" if first and outcome.first_breach else "") +
                        "; the unit cannot serve this SLA at any batch size: relax the sla or give it more hardware")
    accepted = []
    if not outcome.monotonic:
        if not opts.allow_non_monotonic:
            raise TuneError("the result is non-monotonic: a concurrency met the SLA above one that did not, so the "
                            "unit is unstable or the probes too short to tell; rerun (more --requests), or accept the "
                            "conservative boundary with --allow-non-monotonic")
        accepted.append("non-monotonic")
    if outcome.boundary_type == "cliff":
        if not opts.allow_cliff:
            raise TuneError(f"AIPerf reports a cliff: latency jumps between {outcome.feasible_max} and "
                            f"{outcome.first_failing}, so a limit near it has no margin; investigate (queueing, "
                            "KV-cache exhaustion), or accept it with --allow-cliff")
        accepted.append("cliff")
    return Result(concurrency=outcome.feasible_max, first_failing=outcome.first_failing,
                  limited_by="search-bound" if outcome.first_failing is None else "sla",
                  binding_constraint=outcome.binding_constraint, first_breach=outcome.first_breach,
                  boundary_type=outcome.boundary_type, monotonic=outcome.monotonic, accepted=accepted,
                  convergence=outcome.convergence, probes=list(outcome.probes))


def _portable(argv: list[str]) -> list[str]:
    """The command as the record shows it: `aiperf` for the executable, paths under the working
    directory relative to it (a record is committed; a machine's paths do not belong in it)."""
    cwd = Path.cwd().resolve()
    out = ["aiperf"]
    for a in argv[1:]:
        p = Path(a)
        if p.is_absolute():
            try:
                a = p.resolve().relative_to(cwd).as_posix()
            except ValueError:
                a = f"<{p.name}>"
        out.append(a)
    return out


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name


def _gpu_record(ir, unit, opts: TuneOptions, progress: Progress) -> GpuRecord:
    host = ir.hosts[unit.host]
    observed, how = (gpu.observe(unit.gpu_indexes[0]) if opts.gpu_query else (None, "not observed (--no-gpu-query)"))
    progress(f"GPU state: {how}")
    return GpuRecord(name=host.gpu.name, slice=unit.figures.slice if unit.mig is None else unit.mig.instance.profile,
                     **unit_settings(ir, unit.id), observed=observed)


def _image(ir, unit, graph, opts: TuneOptions) -> ImageRecord:
    repository = ir.spec.image.repository if ir.spec.image is not None else None
    if opts.image_digest:
        return ImageRecord(repository=repository, digest=opts.image_digest)
    # a host's serving image, or on a node pool the model's own (image_context.part)
    key = graph.keys.get(f"image/{unit.host}") or graph.keys.get(f"image/{unit.host}/{unit.model}")
    if key is None:
        return ImageRecord(repository=repository)
    import json

    from compiler.build import open_store, store_dir

    store = open_store(store_dir(opts.store, opts.spec))
    record = store.get_action(key)
    if record is None:
        return ImageRecord(repository=repository)
    entry = next((e for e in store.tree(record.tree) if e.path == "image.json"), None)
    digest = json.loads(store.read_bytes(entry.digest)).get("digest") if entry is not None else None
    return ImageRecord(repository=repository, digest=digest)


def tune(opts: TuneOptions, progress: Progress = lambda line: None) -> TuneOutcome:
    planned = plan_run(opts)
    ir, unit, plan = planned.validation.resolved, planned.unit, planned.plan
    rm = ir.models[planned.model]
    exe = aiperf.find_aiperf(opts.aiperf)
    version = aiperf.aiperf_version(exe)
    if version != aiperf.VERSION_TESTED:
        progress(f"note: AIPerf {version}; Kiln reads the output files of {aiperf.VERSION_TESTED}")
    graph = lower_ir(ir, DigestCache(None))
    what = what_was_measured(ir, unit.id)
    image = _image(ir, unit, graph, opts)
    gpu_rec = _gpu_record(ir, unit, opts, progress)
    argv = aiperf.command(exe, plan)
    span = (f"grid {', '.join(map(str, plan.grid))}" if plan.style == "grid"
            else f"{plan.style} search over [1, {plan.concurrency_max}]")
    progress(f"tuning {unit.id} ({planned.model}) at {opts.url}: {span}; capacity bound {planned.bound:,} "
             f"concurrent sequences; AIPerf {version}, outputs in {plan.outputs}")
    started = time.monotonic()
    rc = run_aiperf(argv, plan.outputs, plan.sla, progress, opts.timeout_s)
    wall = time.monotonic() - started
    if rc != 0:
        tail = (plan.outputs / "aiperf.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise TuneError(f"AIPerf exited {rc}; its outputs are in {plan.outputs}:\n  " + "\n  ".join(tail),
                        outputs=plan.outputs)
    try:
        outcome = (grid_outcome(plan.outputs, plan.sla, plan.grid) if plan.style == "grid"
                   else adaptive_outcome(plan.outputs, plan.sla))
    except ResultError as e:
        raise TuneError(str(e), outputs=plan.outputs) from None
    try:
        result = judge(outcome, opts)
    except TuneError as e:
        raise TuneError(f"{e} (AIPerf's outputs: {plan.outputs})", outputs=plan.outputs) from None
    result_file = _result_file(plan.outputs, plan.style, outcome)
    record = TuneRecord(
        **what, spec=ir.spec.name, unit=unit.id, model=planned.model,
        measured_at=opts.now().strftime("%Y-%m-%dT%H:%M:%SZ"), url=opts.url, result=result,
        search=Search(tool="aiperf", version=version, recipe=aiperf.RECIPE if plan.style != "grid" else "grid",
                      style=plan.style, concurrency_min=1, concurrency_max=plan.concurrency_max,
                      capacity_bound=planned.bound, requests_per_probe=plan.requests, seed=plan.seed,
                      command=_portable(argv), result_file=result_file.relative_to(plan.outputs).as_posix(),
                      result_sha256=sha256_file(result_file), outputs=_rel(plan.outputs)),
        sla=plan.sla, workload=rm.spec.workload.model_dump(mode="json"),
        served=Served(max_batch_size=rm.spec.limits.max_batch_size,
                      measured_digest=rm.measured.digest if rm.measured is not None else None),
        image=image, gpu=gpu_rec)
    planned.record_path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(planned.record_path, render_record(record))  # a fresh temporary file: never a planted link
    edited = False
    current = planned.validation.spec.models[planned.model].limits.max_batch_size
    if opts.write_spec and not (isinstance(current, MeasuredRef) and current.measured == planned.ref):
        try:
            text = with_measured_limit(planned.validation.document, planned.model, planned.ref)
        except EditError as e:
            progress(f"note: {e}")
        else:
            replace_file(opts.spec, text.encode("utf-8"))
            edited = True
    after = validate_path(opts.spec)
    measured: Measurement | None = None
    if after.resolved is not None and planned.model in after.resolved.models:
        measured = after.resolved.models[planned.model].measured
    return TuneOutcome(record, planned.record_path, edited, measured.limit if measured else None,
                       measured.derivation if measured else "", plan.outputs, wall, after)


def _result_file(outputs: Path, style: str, outcome: Outcome) -> Path:
    """The file the result was read from: search_history.json, or the grid's sweep aggregate."""
    if style != "grid":
        return outputs / outcome.result_file
    sweep = outputs / "sweep_aggregate" / "profile_export_aiperf_sweep.json"
    return sweep if sweep.is_file() else outputs / outcome.result_file
