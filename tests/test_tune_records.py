"""Measured limits without a server: the record format, reading AIPerf's results, the refusals, the
rounding to CUDA-graph batch sizes, the spec edit and staleness (K914). AIPerf's files are those of
real runs against the quickstart's model (tests/data/tune, with the commands that made them)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.ir.measured import (KIND, RecordError, TuneRecord, batch_limit, parse_record, record_name,
                                  render_record, sla_record)
from compiler.ir.tune_inputs import record_changes as ir_changes
from compiler.pipeline import validate_path
from compiler.spec.loader import load_text
from compiler.staleness import as_served, measured_artifacts, what_was_measured
from compiler.staleness import keyed_diagnostics
from compiler.staleness import record_changes as keyed_changes
from compiler.tune import aiperf, gpu
from compiler.tune.results import adaptive_outcome, breaches, grid_outcome
from compiler.tune.session import TuneError, TuneOptions, judge
from compiler.tune.specedit import with_measured_limit

from .quickstart import with_tuning
from .test_startup import _modules as startup_modules

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "tune"
QUICKSTART = ROOT / "examples" / "quickstart"
UNIT = "dev-h100/gpu0/mig0"


def _record(run: str) -> TuneRecord:
    return parse_record((DATA / run / "record.json").read_text(encoding="utf-8"))


# --- the record ------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", ["grid", "monotonic"])
def test_records_kiln_tune_wrote_parse_and_render_back_byte_for_byte(run: str) -> None:
    text = (DATA / run / "record.json").read_text(encoding="utf-8")
    record = parse_record(text)
    # the kept runs were written before `inputs` (kiln.tune/v1): read, and rendered back as they were
    assert record.kind == "kiln.tune/v1" != KIND and record.inputs is None
    assert record.unit == UNIT and record.model == "tiny"
    assert render_record(record) == text.encode("utf-8")
    assert record_name(record.unit) == "dev-h100.gpu0.mig0.json"


def test_a_record_that_is_not_one_is_refused_with_its_line() -> None:
    with pytest.raises(RecordError) as e:
        parse_record('{"kind": "kiln.tune/v1",\n "spec": }')
    assert e.value.line == 2 and "not JSON" in e.value.message
    with pytest.raises(RecordError, match="not a measurement record"):
        parse_record('{"kind": "kiln.lock/v1"}')
    doc = json.loads((DATA / "grid" / "record.json").read_text(encoding="utf-8"))
    del doc["result"]["concurrency"]
    with pytest.raises(RecordError, match=r"result\.concurrency"):
        parse_record(json.dumps(doc))
    doc = json.loads((DATA / "grid" / "record.json").read_text(encoding="utf-8"))
    doc["served"]["batch"] = 8  # a typo is an error, not ignored
    with pytest.raises(RecordError, match=r"served\.batch"):
        parse_record(json.dumps(doc))


# --- AIPerf's results --------------------------------------------------------------------------------
def test_the_grid_run_reads_back_as_the_record_says() -> None:
    record = _record("grid")
    outcome = grid_outcome(DATA / "grid" / "outputs", record.sla, (1, 3, 8))
    assert (outcome.feasible_max, outcome.first_failing) == (1, 3)
    assert outcome.monotonic and outcome.boundary_type is None
    assert outcome.binding_constraint == "inter_token_latency"
    assert list(outcome.probes) == record.result.probes
    assert [p.concurrency for p in outcome.probes] == [1, 3, 8]
    # each verdict is the SLA applied to AIPerf's p99 figures
    for p in outcome.probes:
        assert p.feasible == (p.ttft_ms <= 200 and p.tpot_ms <= 40 and p.error_rate_pct < 1)
    assert outcome.first_breach.observed == pytest.approx(record.result.first_breach.observed)


def test_the_monotonic_run_reads_back_as_aiperf_latched_it() -> None:
    record = _record("monotonic")
    history = json.loads((DATA / "monotonic" / "outputs" / "search_history.json").read_text(encoding="utf-8"))
    outcome = adaptive_outcome(DATA / "monotonic" / "outputs", record.sla)
    summary = history["boundary_summary"]
    assert outcome.feasible_max == summary["feasible_max"]["value"] == 2
    assert outcome.first_failing == summary["infeasible_min"]["value"] == 3
    assert outcome.binding_constraint == summary["infeasible_min"]["first_breach"]["metric_tag"]
    assert outcome.convergence == history["convergence_reason"] == "monotonic_precision_reached"
    assert [p.concurrency for p in outcome.probes] == [1, 1, 2, 2, 4, 4, 3, 3]
    assert [p.feasible for p in outcome.probes] == [it["feasible"] for it in history["iterations"]]
    assert outcome.monotonic and list(outcome.probes) == record.result.probes


def test_aiperfs_recipe_grid_ignores_search_sla_and_kilns_grid_does_not() -> None:
    """The reason Kiln judges its grid itself: on this real run AIPerf called every point feasible."""
    out = DATA / "aiperf-grid-non-monotonic" / "outputs"
    breach = json.loads((out / "sla_breach.json").read_text(encoding="utf-8"))
    assert all(p["feasible"] for p in breach["all_points"])
    assert [f["metric_tag"] for f in breach["filters"]] == ["request_error_rate"]
    sla = sla_record(type("S", (), {"ttft_ms": 150.0, "tpot_ms": 40.0, "percentile": "p99",
                                    "max_error_rate": 0.01})())
    outcome = grid_outcome(out, sla, (1, 2, 3, 4))
    assert [p.feasible for p in outcome.probes] == [True, True, False, True]
    assert not outcome.monotonic
    assert (outcome.feasible_max, outcome.first_failing) == (2, 3)  # the largest pass below the first failure


# --- refusing a result -------------------------------------------------------------------------------
def _opts(**kw) -> TuneOptions:
    return TuneOptions(spec=Path("kiln.yaml"), unit=UNIT, url="http://127.0.0.1:1", **kw)


def test_a_non_monotonic_result_is_refused_unless_accepted() -> None:
    sla = sla_record(type("S", (), {"ttft_ms": 150.0, "tpot_ms": 40.0, "percentile": "p99",
                                    "max_error_rate": 0.01})())
    outcome = grid_outcome(DATA / "aiperf-grid-non-monotonic" / "outputs", sla, (1, 2, 3, 4))
    with pytest.raises(TuneError, match="non-monotonic"):
        judge(outcome, _opts())
    result = judge(outcome, _opts(allow_non_monotonic=True))
    assert result.concurrency == 2 and result.accepted == ["non-monotonic"] and not result.monotonic


def test_a_cliff_is_refused_unless_accepted() -> None:
    record = _record("monotonic")
    outcome = dataclasses.replace(adaptive_outcome(DATA / "monotonic" / "outputs", record.sla), boundary_type="cliff")
    with pytest.raises(TuneError, match="cliff"):
        judge(outcome, _opts())
    assert judge(outcome, _opts(allow_cliff=True)).accepted == ["cliff"]


def test_an_sla_no_probe_met_gives_no_limit() -> None:
    strict = sla_record(type("S", (), {"ttft_ms": 10.0, "tpot_ms": 1.0, "percentile": "p99",
                                       "max_error_rate": 0.01})())
    outcome = grid_outcome(DATA / "grid" / "outputs", strict, (1, 3, 8))
    assert outcome.feasible_max is None and outcome.first_failing == 1
    with pytest.raises(TuneError, match="no concurrency in the search range met the SLA"):
        judge(outcome, _opts())


def test_nothing_failing_in_range_is_bounded_by_the_search() -> None:
    loose = sla_record(type("S", (), {"ttft_ms": 10_000.0, "tpot_ms": 10_000.0, "percentile": "p99",
                                      "max_error_rate": 0.5})())
    result = judge(grid_outcome(DATA / "grid" / "outputs", loose, (1, 3, 8)), _opts())
    assert (result.concurrency, result.first_failing, result.limited_by) == (8, None, "search-bound")


def test_a_missing_probe_is_an_error() -> None:
    with pytest.raises(Exception, match="concurrency 5"):
        grid_outcome(DATA / "grid" / "outputs", _record("grid").sla, (1, 3, 5, 8))


# --- rounding ------------------------------------------------------------------------------------
def test_the_measured_concurrency_is_rounded_down_to_a_cuda_graph_batch_size() -> None:
    # the kept runs measured 1 and 2: both are graph sizes TensorRT-LLM captures by default
    assert batch_limit(_record("grid").result.concurrency, target="llmapi", cuda_graph_batch_sizes=None)[0] == 1
    assert batch_limit(_record("monotonic").result.concurrency, target="llmapi", cuda_graph_batch_sizes=None)[0] == 2
    # the default sizes are 1..31, 32, 64, 128 (CudaGraphConfig._generate_cuda_graph_batch_sizes)
    for measured, limit in ((31, 31), (45, 32), (100, 64), (127, 64), (128, 128), (5000, 128)):
        got, how = batch_limit(measured, target="llmapi", cuda_graph_batch_sizes=None)
        assert got == limit, measured
        assert ("rounded down" in how) == (limit != measured)
    # the spec's own sizes win; none small enough leaves the concurrency as it is, and says so
    assert batch_limit(45, target="llmapi", cuda_graph_batch_sizes=[8, 16, 40, 64])[0] == 40
    got, how = batch_limit(5, target="llmapi", cuda_graph_batch_sizes=[8, 16])
    assert got == 5 and "no CUDA-graph batch size" in how
    # attention DP: the unit's concurrency is split over its ranks, each schedules its own batch
    assert batch_limit(100, target="llmapi", cuda_graph_batch_sizes=None, ranks=4)[0] == 25
    # the engine target has no CudaGraphConfig
    assert batch_limit(45, target="engine", cuda_graph_batch_sizes=None) == (45, pytest.approx(
        batch_limit(45, target="engine", cuda_graph_batch_sizes=None)[1]))
    assert batch_limit(45, target="engine", cuda_graph_batch_sizes=None)[0] == 45


# --- the spec --------------------------------------------------------------------------------------
def _quickstart(tmp_path: Path, run: str | None = "grid", text: str | None = None) -> Path:
    """The quickstart as the kept runs measured it, in tmp_path; with `run`, its record under tune/
    (its artifact keys as this checkout builds the spec) and the limit pointing at it."""
    for name in ("model", "data"):
        shutil.copytree(QUICKSTART / name, tmp_path / name)
    spec = tmp_path / "kiln.yaml"
    spec.write_text(text or with_tuning((QUICKSTART / "kiln.yaml").read_text(encoding="utf-8")), encoding="utf-8")
    if run is not None:
        before = validate_path(spec)
        assert before.ok, before.diagnostics
        record = _record(run).model_copy(update=what_was_measured(before.resolved, UNIT))
        (tmp_path / "tune").mkdir()
        (tmp_path / "tune" / record_name(UNIT)).write_bytes(render_record(record))
        spec.write_text(with_measured_limit(before.document, "tiny", "tune/" + record_name(UNIT)), encoding="utf-8")
    return spec


def test_the_reference_replaces_only_its_value(tmp_path: Path) -> None:
    text = with_tuning((QUICKSTART / "kiln.yaml").read_text(encoding="utf-8"))
    doc = load_text(text, "kiln.yaml").document
    new = with_measured_limit(doc, "tiny", "tune/x.json")
    old_lines, new_lines = text.splitlines(), new.splitlines()
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert len(old_lines) == len(new_lines) and len(changed) == 1
    assert changed[0][1] == ("    limits: {max_batch_size: {measured: tune/x.json}, max_input_len: 256, max_seq_len: 512, "
                             "max_num_tokens: 2048}")


@pytest.mark.parametrize("body, expect", [
    ("    limits:\n      max_seq_len: 512\n", "    limits:\n      max_batch_size: {measured: t.json}\n      max_seq_len: 512\n"),
    ("    limits: {max_seq_len: 512}\n", "    limits: {max_batch_size: {measured: t.json}, max_seq_len: 512}\n"),
    ("    dtype: bf16  # the model's\n", "    dtype: bf16  # the model's\n"),  # limits go first (see below)
    ("    limits:\n      max_batch_size:\n        measured: old.json\n",
     "    limits:\n      max_batch_size:\n        {measured: t.json}\n"),
])
def test_the_reference_goes_into_block_and_flow_limits(body: str, expect: str) -> None:
    head = "kiln: v1\nmodels:\n  m:\n    source: {path: model}\n"
    doc = load_text(head + body, "kiln.yaml").document
    got = with_measured_limit(doc, "m", "t.json")
    if "limits" not in body:  # a model without limits gets them as its first key
        head = head.replace("  m:\n", "  m:\n    limits: {max_batch_size: {measured: t.json}}\n")
    assert got == head + expect


def test_the_record_sets_the_limit_everything_reads(tmp_path: Path) -> None:
    from compiler.actions.llmapi import options
    from compiler.build import plan_spec
    from compiler.store.local import LocalStore, sha256_file

    spec = _quickstart(tmp_path, "monotonic")
    result = validate_path(spec)
    assert result.ok and not result.diagnostics, result.diagnostics  # a fresh record is not stale
    rm = result.resolved.models["tiny"]
    assert rm.spec.limits.max_batch_size == 2 == result.resolved.spec.models["tiny"].limits.max_batch_size
    assert rm.measured.ref == "tune/dev-h100.gpu0.mig0.json" and rm.measured.limit == 2
    assert options(rm)["max_batch_size"] == 2
    row = next(r for r in result.resolved.capacity_rows() if r["unit"] == UNIT)
    assert row["max_batch_size"] == 2 and row["measured"]["concurrency"] == 2
    assert row["measured"]["bound"] == row["concurrency_bound"] > 1000
    other = next(r for r in result.resolved.capacity_rows() if r["unit"] != UNIT)
    assert other["measured"] is None
    # the record's digest is an input of what reads the limit, and of nothing else
    outcome = plan_spec(spec, LocalStore(tmp_path / "store"))
    digest = sha256_file(tmp_path / "tune" / record_name(UNIT))
    reads = {aid for aid, a in outcome.graph.actions.items() if a.inputs.get("tiny:measured") == digest}
    assert reads == {"llmapi-options/tiny", "triton-repo/dev-h100", "capacity-report/dev-h100", "spec-snapshot"}


def test_a_new_measurement_rebuilds_what_reads_the_limit(tmp_path: Path) -> None:
    from compiler.build import plan_spec
    from compiler.store.local import LocalStore

    spec = _quickstart(tmp_path, "monotonic")
    first = plan_spec(spec, LocalStore(tmp_path / "store")).graph
    path = tmp_path / "tune" / record_name(UNIT)
    record = parse_record(path.read_text(encoding="utf-8"))
    path.write_bytes(render_record(record.model_copy(update={"measured_at": "2026-12-02T00:00:00Z"})))
    second = plan_spec(spec, LocalStore(tmp_path / "store")).graph
    changed = {aid for aid in first.keys if first.keys[aid] != second.keys[aid]}
    # the same limit, but another measurement: the artifacts that read it name the new record
    assert {"llmapi-options/tiny", "triton-repo/dev-h100", "capacity-report/dev-h100", "spec-snapshot"} <= changed
    assert "quantize/tiny" not in changed and "llmapi-options/tiny-awq" not in changed


# --- staleness (K914) -------------------------------------------------------------------------------
def _k914(spec: Path) -> list[str]:
    result = validate_path(spec)
    return [d.message for d in result.diagnostics if d.code == "K914"]


@pytest.mark.parametrize("edit, says", [
    (("max_num_tokens: 2048}\n    serving: {max_queue_size: 16",
      "max_num_tokens: 2048}\n    runtime: {kv_cache_memory_fraction: 0.8}\n    serving: {max_queue_size: 16"),
     "llmapi-options/tiny changed"),
    (("weights: fp8\n      calibration", "weights: int4_awq\n      calibration"), "quantize/tiny changed"),
    (("queue_timeout_ms: 1000}\n    workload", "queue_timeout_ms: 2000}\n    workload"), "triton-repo/dev-h100#tiny changed"),
    (("tpot_ms: 40,", "tpot_ms: 30,"), "the sla changed"),
    (("output_tokens: 16}", "output_tokens: 64}"), "the workload changed"),
    (("- {profile: 1g.10gb, serves: tiny}", "- {profile: 2g.20gb, serves: tiny}"), "is now 2g.20gb"),
    # the GPU locked elsewhere: no artifact changes, what was measured does
    (("graphics_mhz: 1755,", "graphics_mhz: 1410,"), "runs at other GPU settings (clocks graphics_mhz 1755, "
     "memory_mhz 2619 when measured, graphics_mhz 1410, memory_mhz 2619 now)"),
    (("count: 1\n    clocks:", "count: 1\n    power_limit_w: 350\n    clocks:"),
     "power_limit_w unset when measured, 350 now"),
])
def test_a_record_is_stale_when_the_spec_builds_or_asks_something_else(tmp_path: Path, edit, says: str) -> None:
    spec = _quickstart(tmp_path, "grid")
    assert _k914(spec) == []
    text = spec.read_text(encoding="utf-8")
    assert edit[0] in text
    spec.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    found = _k914(spec)
    assert len(found) == 1 and says in found[0], found


@pytest.mark.parametrize("edit", [
    ("weights: fp8\n      calibration", "weights: int4_awq\n      calibration"),
    ("queue_timeout_ms: 1000}\n    workload", "queue_timeout_ms: 2000}\n    workload"),
    ("max_num_tokens: 2048}\n    serving: {max_queue_size: 16",
     "max_num_tokens: 2048}\n    runtime: {kv_cache_memory_fraction: 0.8}\n    serving: {max_queue_size: 16"),
    ("max_seq_len: 512, max_num_tokens: 2048}\n    serving: {max_queue_size: 16",
     "max_seq_len: 384, max_num_tokens: 2048}\n    serving: {max_queue_size: 16"),
    ('tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.2.0"'),
])
def test_validation_flags_every_artifact_whose_key_changed(tmp_path: Path, edit) -> None:
    """The IR fingerprints validation compares are sound against the exact comparison by artifact key
    (what lowering does): every measured artifact whose key changed is named by validation too."""
    spec = _quickstart(tmp_path, "grid")
    text = spec.read_text(encoding="utf-8")
    assert edit[0] in text
    spec.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    ir = validate_path(spec).resolved
    by_key = {c.split(" ")[0] for c in keyed_changes(ir)["tiny"] if " changed" in c}
    by_ir = {c.split(" ")[0] for c in ir_changes(ir)[0]["tiny"] if " changed" in c}
    assert by_key and by_key <= by_ir, (by_key, by_ir)


@pytest.mark.parametrize("name", ["model/tokenizer_config.json", "data/calib-prose.jsonl", "data/eval-prose.jsonl"])
def test_validation_flags_a_changed_input_file_as_its_keys_do(tmp_path: Path, name: str) -> None:
    """Files the model names are fingerprinted by content: a changed one is named by validation
    wherever it changes a measured artifact's key."""
    spec = _quickstart(tmp_path, "grid")
    path = tmp_path / name
    path.write_bytes(path.read_bytes() + (b"\n" if name.endswith(".json") else path.read_bytes().splitlines(True)[0]))
    ir = validate_path(spec).resolved
    by_key = {c.split(" ")[0] for c in keyed_changes(ir)["tiny"] if " changed" in c}
    by_ir = {c.split(" ")[0] for c in ir_changes(ir)[0]["tiny"] if " changed" in c}
    assert by_key and by_key <= by_ir, (by_key, by_ir)


def test_a_file_added_to_the_model_directory_is_a_change_and_a_field_kiln_added_since_is_not(tmp_path: Path) -> None:
    spec = _quickstart(tmp_path, "grid")
    path = tmp_path / "tune" / record_name(UNIT)
    record = parse_record(path.read_text(encoding="utf-8"))
    # a record written when the table named fewer fields (or before Kiln had one): what it lacks is not a change
    fewer = {aid: {k: v for k, v in fields.items() if not k.startswith("runtime.")}
             for aid, fields in record.inputs.items()}
    path.write_bytes(render_record(record.model_copy(update={"inputs": fewer})))
    assert _k914(spec) == []
    (tmp_path / "model" / "generation_config.json").write_text("{}", encoding="utf-8")
    found = _k914(spec)
    assert len(found) == 1 and "quantize/tiny changed (source.path (a file))" in found[0], found


def test_validate_with_a_current_record_imports_no_action_kind(tmp_path: Path) -> None:
    spec = _quickstart(tmp_path, "grid")
    code, modules = startup_modules("validate", str(spec))
    assert code == 0 and "compiler.ir.tune_inputs" in modules  # the record was compared
    assert "compiler.checks.measured" in modules  # and its findings checked
    # no action kind, no lowering, and nothing of the build graph (the digest cache is the store's)
    assert sorted(m for m in modules if m.split(".")[:2] in (["compiler", "actions"], ["compiler", "graph"])) == []
    assert "compiler.lower" not in modules and "compiler.staleness" not in modules


def test_a_record_before_inputs_is_compared_where_the_spec_is_lowered(tmp_path: Path) -> None:
    """A v1 record (no `inputs`): validation says so (K917, a note) and lowering compares its keys (K914)."""
    spec = _quickstart(tmp_path, "grid")
    path = tmp_path / "tune" / record_name(UNIT)
    old = parse_record(path.read_text(encoding="utf-8")).model_copy(update={"kind": "kiln.tune/v1", "inputs": None})
    path.write_bytes(render_record(old))
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("weights: fp8\n      calibration", "weights: int4_awq\n      calibration", 1),
                    encoding="utf-8")
    result = validate_path(spec)
    assert [d.code for d in result.diagnostics] == ["K917"] and result.ok
    keyed_diagnostics(result)
    found = [d.message for d in result.diagnostics if d.code == "K914"]
    assert len(found) == 1 and "quantize/tiny changed" in found[0], result.diagnostics
    keyed_diagnostics(result)  # compared once
    assert len([d for d in result.diagnostics if d.code == "K914"]) == 1
    proc = subprocess.run([sys.executable, "-m", "compiler", "plan", str(spec), "--store", str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "[K914]" in proc.stdout and "quantize/tiny changed" in proc.stdout, proc.stdout + proc.stderr


def test_a_change_to_another_model_leaves_the_record_fresh(tmp_path: Path) -> None:
    spec = _quickstart(tmp_path, "grid")
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("max_regression_pct: 10.0}", "max_regression_pct: 12.0}"), encoding="utf-8")
    assert _k914(spec) == []


def test_the_limit_the_measurement_set_is_not_itself_a_change(tmp_path: Path) -> None:
    """The record's own limit changes the LLM-API options it measured; compared as served, it is not stale.
    A re-tune while the unit served an earlier record's limit carries that record's digest as served."""
    spec = _quickstart(tmp_path, "grid")
    ir = validate_path(spec).resolved
    record = ir.models["tiny"].measured.record
    assert record.served.max_batch_size == 8 and ir.models["tiny"].spec.limits.max_batch_size == 1
    assert measured_artifacts(as_served(ir, "tiny", record), UNIT) == record.artifacts
    assert measured_artifacts(ir, UNIT)["llmapi-options/tiny"] != record.artifacts["llmapi-options/tiny"]
    # a record measured while an earlier record set the limit
    earlier = ir.models["tiny"].measured.digest
    retuned = record.model_copy(update={
        "served": record.served.model_copy(update={"max_batch_size": 1, "measured_digest": earlier}),
        "artifacts": measured_artifacts(ir, UNIT)})
    (tmp_path / "tune" / record_name(UNIT)).write_bytes(render_record(retuned))
    assert _k914(spec) == []


# --- AIPerf's command line, nvidia-smi --------------------------------------------------------------
def test_the_command_states_the_sla_at_its_percentile() -> None:
    sla = _record("grid").sla
    plan = aiperf.RunPlan(model="tiny", url="http://u", tokenizer="model", tokenizer_revision=None,
                          input_tokens=aiperf.Lengths(32), output_tokens=aiperf.Lengths(16), sla=sla,
                          style="smooth_isotonic", concurrency_min=1, concurrency_max=500, outputs=Path("o"))
    argv = aiperf.command("aiperf", plan)
    assert argv[argv.index("--search-recipe") + 1] == "max-concurrency-under-sla"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--search-sla"] == [
        "time_to_first_token:p99:le:200", "inter_token_latency:p99:le:40"]
    assert argv[argv.index("--concurrency-max") + 1] == "500" and argv[argv.index("--error-rate-sla") + 1] == "0.01"
    grid = dataclasses.replace(plan, style="grid", grid=aiperf.grid_points(1, 500, 8))
    argv = aiperf.command("aiperf", grid)
    assert "--search-recipe" not in argv and argv[argv.index("--concurrency") + 1] == "1,2,6,14,35,85,206,500"
    # the kept grid run's command is the one this builds
    kept = _record("grid").search.command
    assert kept[kept.index("--concurrency") + 1] == ",".join(map(str, aiperf.grid_points(1, 8, 3))) == "1,3,8"


def test_a_length_distribution_becomes_pairs_summing_to_100() -> None:
    args = aiperf.workload_args(aiperf.Lengths(((128, 0.7), (2048, 0.3))), aiperf.Lengths(((64, 1 / 3), (512, 2 / 3))))
    assert args[0] == "--seq-dist"
    pairs = [p.split(":") for p in args[1].split(";")]
    assert [p[0] for p in pairs] == ["128,64", "128,512", "2048,64", "2048,512"]
    assert sum(float(p[1]) for p in pairs) == pytest.approx(100, abs=1e-9)
    assert float(pairs[1][1]) == pytest.approx(70 * 2 / 3, abs=1e-5)


def test_nvidia_smi_values_of_a_real_h200() -> None:
    header, values = (DATA / "nvidia-smi-h200-580.173.02.csv").read_text(encoding="utf-8").splitlines()
    names = [h.split(" [")[0].strip() for h in header.split(",")]
    cells = dict(zip(names, values.split(", ")))
    assert set(gpu.FIELDS) <= set(names)  # every field queried exists in that driver's list
    state = gpu.parse_query(", ".join(cells[f] for f in gpu.FIELDS))
    assert state["name"] == "NVIDIA H200" and state["pstate"] == "P0" and state["mig.mode.current"] == "Disabled"
    assert state["clocks.current.sm"] == 345 and state["clocks.max.sm"] == 1980
    assert state["power.limit"] == 700.0 and state["power.draw"] == 85.12
    assert gpu.parse_query(", ".join([cells["display_mode"]] + [cells[f] for f in gpu.FIELDS[1:]]))["index"] is None
    with pytest.raises(ValueError):
        gpu.parse_query("0, NVIDIA H200")


def test_gpu_state_is_not_observed_without_nvidia_smi(tmp_path: Path) -> None:
    state, how = gpu.observe(0, executable=str(tmp_path / "nvidia-smi"))
    assert state is None and how.startswith("not observed")


def test_breaches_name_every_missed_target() -> None:
    probe = _record("grid").result.probes[2]  # concurrency 8
    assert [b.metric for b in breaches(probe, _record("grid").sla)] == ["time_to_first_token", "inter_token_latency"]


# --- the command line, before AIPerf runs ------------------------------------------------------------
def _tune(argv: list[str], capsys) -> tuple[int, str]:
    from compiler.cli import main

    code = main(["tune", *argv])
    out = capsys.readouterr()
    return int(code), out.out + out.err


def test_tune_refuses_what_it_cannot_measure(tmp_path: Path, capsys) -> None:
    from compiler.cli.tune import STYLES
    from compiler.tune.aiperf import STYLES as LIB_STYLES

    assert STYLES == LIB_STYLES
    spec = _quickstart(tmp_path, run=None)
    code, out = _tune([str(spec), "--unit", "dev-h100/gpu9", "--url", "http://127.0.0.1:1"], capsys)
    assert code == 1 and "no serving unit 'dev-h100/gpu9'" in out and UNIT in out
    code, out = _tune([str(spec), "--unit", "dev-h100/gpu0/mig1", "--url", "http://127.0.0.1:1"], capsys)
    assert code == 1 and "model 'tiny-awq' has no `sla`" in out
    code, out = _tune([str(spec), "--unit", UNIT, "--url", "http://127.0.0.1:1", "--max-concurrency", "1"], capsys)
    assert code == 1 and "nothing to search" in out
    code, out = _tune([str(spec), "--unit", UNIT, "--url", "http://127.0.0.1:1", "--aiperf", str(tmp_path / "no")],
                      capsys)
    assert code == 2 and "is not an executable file" in out
    assert not (tmp_path / "tune").exists()  # nothing was written
    code, out = _tune([str(spec), "--unit", UNIT], capsys)
    assert code == 2


def test_the_engine_target_bakes_the_measured_limit_in(tmp_path: Path) -> None:
    from compiler.build import plan_spec
    from compiler.store.local import LocalStore

    from .quickstart import on_engine_target

    text = on_engine_target(with_tuning((QUICKSTART / "kiln.yaml").read_text(encoding="utf-8")))
    spec = _quickstart(tmp_path, "monotonic", text=text)
    result = validate_path(spec)
    assert result.ok and not [d for d in result.diagnostics if d.code == "K914"], result.diagnostics
    assert "the engine target" in result.resolved.models["tiny"].measured.derivation
    graph = plan_spec(spec, LocalStore(tmp_path / "store")).graph
    engine = graph.actions["engine/tiny"]
    assert engine.params.limits.max_batch_size == 2 and "tiny:measured" in engine.inputs
    assert "tiny:measured" not in graph.actions["engine/tiny-awq"].inputs


# --- issue 36: a record's numbers are bounded where it is read -------------------------------------
@pytest.mark.parametrize("ttft, tpot", [(0, 0), (-5.0, 3.0), (1e308, 1e308), (4e6, 2.0)],
                         ids=["zero", "negative-ttft", "huge", "past-an-hour"])
def test_a_record_with_latencies_no_run_measures_is_k913_not_a_crash(tmp_path: Path, capsys, ttft, tpot) -> None:
    """Validate and plan divided by them and took the log of a negative ratio (exit 3)."""
    from compiler.cli import main

    spec = _quickstart(tmp_path, "grid")
    path = tmp_path / "tune" / record_name(UNIT)
    doc = json.loads(path.read_text(encoding="utf-8"))
    for probe in doc["result"]["probes"]:
        probe["ttft_ms"], probe["tpot_ms"] = ttft, tpot
    path.write_text(json.dumps(doc), encoding="utf-8")
    result = validate_path(spec)
    found = [d for d in result.diagnostics if d.code == "K913"]
    assert not result.ok and found and "ttft_ms" in found[0].message, result.diagnostics
    for command in ("validate", "plan"):
        capsys.readouterr()
        assert main([command, str(spec)]) == 1
        out = capsys.readouterr()
        assert "K913" in out.out + out.err and "Traceback" not in out.err, out


def test_an_aiperf_run_with_a_zero_latency_is_a_result_error(tmp_path: Path) -> None:
    from compiler.tune.results import ResultError, read_probe

    src = next((DATA / "grid").rglob("profile_export_aiperf.json"))
    doc = json.loads(src.read_text(encoding="utf-8"))
    doc["time_to_first_token"]["p99"] = 0
    (tmp_path / src.name).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultError, match="ttft_ms"):
        read_probe(tmp_path / src.name, _record("grid").sla)


def test_a_record_whose_path_holds_a_bar_keeps_the_markdown_table_whole(tmp_path: Path, capsys) -> None:
    """Issue 36: `tune/a|b.json` split the "Measured vs modelled" row into one cell too many."""
    from compiler.cli import main

    spec = _quickstart(tmp_path, "grid")
    (tmp_path / "tune" / record_name(UNIT)).rename(tmp_path / "tune" / "a|b.json")
    spec.write_text(spec.read_text(encoding="utf-8").replace("tune/" + record_name(UNIT), "tune/a|b.json"),
                    encoding="utf-8")
    capsys.readouterr()
    assert main(["plan", str(spec), "--store", str(tmp_path / "store"), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    table = md.split("#### Measured vs modelled concurrency\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(table) == 3 and "tune/a\\|b.json" in table[2], table
    cells = [len(re.findall(r"(?<!\\)\|", line)) for line in table]
    assert cells[0] == cells[2] == 8, table
