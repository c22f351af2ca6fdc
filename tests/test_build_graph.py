"""Minimal rebuilds and reproducible output of `kiln build`.

The table below applies one edit to a built example and states exactly which actions must run
again. Each expectation comes from reading what the action modules put in their keys
(compiler/actions/*.py): an action reruns when a value it reads or a file it reads changes, and
for nothing else. `plan_spec` must announce that set (with a reason naming the change) and
`build_spec` must then execute exactly that set and take everything else from the store.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from compiler.build import build_spec as _build_spec
from compiler.build import plan_spec as _plan_spec
from compiler.cli import main
from compiler.graph.builder import Builder
from compiler.store.local import LocalStore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MIG = "b200-mig-three-models"  # models chat, coder, intent on host b200-a
QUICK = "quickstart"  # model tiny, read from a local directory

MIG_ACTIONS = {  # what a builder without torch, GPU or network runs
    "spec-snapshot", "host-plan/b200-a", "host-script/b200-a", "capacity-report/b200-a",
    "calibration-set/chat", "calibration-set/coder", "calibration-set/intent",
    "llmapi-options/chat", "llmapi-options/coder", "llmapi-options/intent",
}
MIG_DEFERRED = {"quantize/chat", "quality-gate/chat", "quantize/coder", "quantize/intent",  # Hugging Face weights
                "tokenizer/chat", "tokenizer/coder", "tokenizer/intent",
                "triton-repo/b200-a",  # carries the tokenizers
                "image-context/b200-a", "image/b200-a"}  # carry the checkpoints and the repository
# These tests are about the graph, keys and store, not about quantization (tests/test_quantize.py):
# they build as a builder that lacks torch, a GPU and the network, the same on every machine.
BARE = Builder(fixed=frozenset())


def build_spec(spec, store, **kw):
    return _build_spec(spec, store, builder=BARE, **kw)


def plan_spec(spec, store, **kw):
    return _plan_spec(spec, store, builder=BARE, **kw)


# --- helpers ------------------------------------------------------------------------------------
def copy_example(name: str, dest: Path) -> Path:
    """A private copy of an example."""
    shutil.copytree(EXAMPLES / name, dest)
    return dest / "kiln.yaml"


def replace_once(rel: str, old: str, new: str) -> Callable[[Path], None]:
    """An edit of one file: `old` must occur exactly once, so a stale row cannot pass as a no-op."""
    def edit(root: Path) -> None:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{rel}: expected exactly one {old!r}"
        path.write_text(text.replace(old, new), encoding="utf-8")
    return edit


def append_line(rel: str, line: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with open(root / rel, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return edit


def both(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        for e in edits:
            e(root)
    return edit


def rename_calibration(root: Path) -> None:
    (root / "data" / "calib-code.jsonl").rename(root / "data" / "code-calibration.jsonl")
    replace_once("kiln.yaml", "data/calib-code.jsonl", "data/code-calibration.jsonl")(root)


def touch_calibration(root: Path) -> None:
    path = root / "data" / "calib-code.jsonl"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def new_weights(root: Path) -> None:
    path = root / "model" / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(bytes(b ^ 0xFF for b in data))  # same size, different bytes


def to_run(outcome) -> dict[str, list[str]]:
    """What the plan runs on this builder (deferred actions are never in the store, so never cached)."""
    return {p.id: p.reasons for p in outcome.plan if not p.cached and not p.deferred}


def deferred(outcome) -> set[str]:
    return {p.id for p in outcome.plan if p.deferred}


SPEC_PATH = re.compile(r"^(models|hosts|toolchain|kubernetes|image|publish|name|target)\b[.:\[]?")


# --- the table ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    id: str
    example: str
    edit: Callable[[Path], None]
    expect: frozenset[str]  # whose key must change, from reading the action modules (deferred ones included)
    reasons: dict[str, str] = field(default_factory=dict)  # action -> text one of its reasons contains

ROWS = [
    Row("serving-queue-size", MIG,
        replace_once("kiln.yaml", "max_queue_size: 256", "max_queue_size: 300"),
        frozenset({"triton-repo/b200-a", "image-context/b200-a", "image/b200-a", "spec-snapshot"}),
        {"spec-snapshot": "models.intent.serving.max_queue_size: 256 -> 300"}),
    Row("host-clocks", MIG,
        replace_once("kiln.yaml", "graphics_mhz: 1965", "graphics_mhz: 1800"),
        frozenset({"host-plan/b200-a", "host-script/b200-a", "spec-snapshot"}),
        {"host-plan/b200-a": "hosts.b200-a.clocks.graphics_mhz: 1965 -> 1800",
         "host-script/b200-a": "hosts.b200-a.clocks.graphics_mhz: 1965 -> 1800 (via host-plan/b200-a)",
         "spec-snapshot": "hosts.b200-a.clocks.graphics_mhz"}),
    Row("calibration-samples", MIG,
        replace_once("kiln.yaml", "samples: 256", "samples: 128"),
        frozenset({"image-context/b200-a", "image/b200-a", "calibration-set/intent", "quantize/intent", "spec-snapshot"}),
        {"calibration-set/intent": "models.intent.quantization.calibration.samples: 256 -> 128",
         "spec-snapshot": "models.intent.quantization.calibration.samples"}),
    Row("calibration-max-seq-len", MIG,  # applied by the quantize step, not by calibration-set
        replace_once("kiln.yaml", "samples: 256, max_seq_len: 512", "samples: 256, max_seq_len: 1024"),
        frozenset({"image-context/b200-a", "image/b200-a", "quantize/intent", "spec-snapshot"}),
        {"spec-snapshot": "calibration.max_seq_len: 512 -> 1024"}),
    Row("calibration-data-content", MIG,  # calib-code.jsonl is read by coder only
        append_line("data/calib-code.jsonl", '{"text": "def added_sample(): return 1"}'),
        frozenset({"image-context/b200-a", "image/b200-a", "calibration-set/coder", "quantize/coder", "spec-snapshot"}),
        {"calibration-set/coder": "models.coder.quantization.calibration.data: the file's content changed",
         "spec-snapshot": "models.coder.quantization.calibration.data: the file's content changed"}),
    Row("shared-calibration-data-content", MIG,  # calib-chat.jsonl is read by chat and intent
        append_line("data/calib-chat.jsonl", '{"text": "one more calibration sample"}'),
        frozenset({"image-context/b200-a", "image/b200-a", "calibration-set/chat", "calibration-set/intent", "quantize/chat", "quality-gate/chat",
                   "quantize/intent", "spec-snapshot"}),
        {"calibration-set/chat": "models.chat.quantization.calibration.data: the file's content changed",
         "calibration-set/intent": "models.intent.quantization.calibration.data: the file's content changed",
         "spec-snapshot": "models.chat.quantization.calibration.data: the file's content changed"}),
    Row("calibration-file-renamed", MIG,  # same bytes under a new name: files are hashed, not named
        rename_calibration,
        frozenset({"spec-snapshot"}),
        {"spec-snapshot": "models.coder.quantization.calibration.data"}),
    Row("calibration-file-touched", MIG,  # new mtime, same bytes
        touch_calibration, frozenset()),
    Row("eval-data-content", MIG,  # quantize measures both figures on it; the gate compares them
        append_line("data/eval-chat.jsonl", '{"text": "another evaluation line"}'),
        frozenset({"image-context/b200-a", "image/b200-a", "quantize/chat", "quality-gate/chat", "spec-snapshot"}),
        {"spec-snapshot": "models.chat.quantization.quality_gate.eval: the file's content changed"}),
    Row("weights-file", QUICK, new_weights,
        frozenset({"quantize/tiny", "quality-gate/tiny", "quantize/tiny-awq", "quality-gate/tiny-awq",
                   "spec-snapshot"}),
        {"spec-snapshot": "models.tiny.source.path: model.safetensors changed"}),
    Row("toolchain-tensorrt-llm", MIG,  # 26.03 is the Triton release that ships TensorRT-LLM 1.2.0
        both(replace_once("kiln.yaml", 'tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.2.0"'),
             replace_once("kiln.yaml", "tritonserver:26.04-trtllm", "tritonserver:26.03-trtllm")),
        frozenset({"triton-repo/b200-a", "image-context/b200-a", "image/b200-a", "llmapi-options/chat", "llmapi-options/coder", "llmapi-options/intent", "spec-snapshot"}),
        {"llmapi-options/chat": 'tensorrt_llm: "1.2.1" -> "1.2.0"',
         "llmapi-options/intent": 'tensorrt_llm: "1.2.1" -> "1.2.0"',
         "spec-snapshot": "toolchain.triton_image"}),
    Row("toolchain-modelopt", MIG,  # a checkpoint is only reused under the ModelOpt that made it
        replace_once("kiln.yaml", 'modelopt: "0.47.0"', 'modelopt: "0.45.0"'),
        frozenset({"image-context/b200-a", "image/b200-a", "quantize/chat", "quality-gate/chat", "quantize/coder", "quantize/intent", "spec-snapshot"}),
        {"spec-snapshot": 'toolchain.modelopt: "0.47.0" -> "0.45.0"'}),
    Row("mig-profile", MIG,
        replace_once("kiln.yaml", "{profile: 1g.23gb, serves: intent}", "{profile: 1g.45gb, serves: intent}"),
        frozenset({"host-plan/b200-a", "host-script/b200-a", "capacity-report/b200-a", "spec-snapshot"}),
        {"host-plan/b200-a": 'hosts.b200-a.gpus[0].mig[2].profile: "1g.23gb" -> "1g.45gb"',
         "host-script/b200-a": 'hosts.b200-a.gpus[0].mig[2].profile: "1g.23gb" -> "1g.45gb" (via host-plan/b200-a)',
         "capacity-report/b200-a": 'hosts.b200-a.gpus[0].mig[2].profile: "1g.23gb" -> "1g.45gb"',
         "spec-snapshot": 'hosts.b200-a.gpus[0].mig[2].profile: "1g.23gb" -> "1g.45gb"'}),
    Row("max-batch-size", MIG,
        replace_once("kiln.yaml", "limits: {max_batch_size: 32", "limits: {max_batch_size: 24"),
        frozenset({"triton-repo/b200-a", "image-context/b200-a", "image/b200-a", "llmapi-options/intent", "capacity-report/b200-a", "spec-snapshot"}),
        {"llmapi-options/intent": "models.intent.limits.max_batch_size: 32 -> 24",
         "capacity-report/b200-a": "models.intent.limits.max_batch_size: 32 -> 24",
         "spec-snapshot": "models.intent.limits.max_batch_size"}),
    Row("runtime-scheduler", MIG,  # the capacity math reads only kv_cache_memory_fraction of runtime
        replace_once("kiln.yaml", "scheduler: guaranteed_no_evict", "scheduler: max_utilization"),
        frozenset({"triton-repo/b200-a", "image-context/b200-a", "image/b200-a", "llmapi-options/chat", "spec-snapshot"}),
        {"llmapi-options/chat": 'models.chat.runtime.scheduler: "guaranteed_no_evict" -> "max_utilization"',
         "spec-snapshot": "models.chat.runtime.scheduler"}),
    Row("comment-only", MIG,
        replace_once("kiln.yaml", "# One B200 host.", "# One B200 host (comment edited)."),
        frozenset()),
]


def _list_modelopt(monkeypatch, version: str, like: str) -> None:
    """The checkpoint-config table with a builder row for `version` (torch and transformers as
    `like`'s): only the keys' response to the pin is under test, not the row's facts."""
    import dataclasses

    from compiler.catalog import checkpoint_config

    table = checkpoint_config.load_checkpoint_config()
    row = dataclasses.replace(table.builders[like], modelopt=version)
    extended = dataclasses.replace(table, builders={**table.builders, version: row})
    monkeypatch.setattr(checkpoint_config, "load_checkpoint_config", lambda: extended)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_one_edit_rebuilds_exactly_what_reads_it(row: Row, tmp_path: Path, monkeypatch) -> None:
    if row.id == "toolchain-modelopt":  # K810 refuses a pin the builder table lacks: list 0.45.0 as 0.47.0 is
        _list_modelopt(monkeypatch, "0.45.0", like="0.47.0")
    spec = copy_example(row.example, tmp_path / "spec")
    store = LocalStore(tmp_path / "store")
    first = build_spec(spec, store)
    assert not first.failed and first.manifest is not None
    everything = set(first.graph.order)
    waiting = {r.id for r in first.deferred}
    if row.example == MIG:
        assert everything == MIG_ACTIONS | MIG_DEFERRED and waiting == MIG_DEFERRED

    row.edit(spec.parent)

    plan = plan_spec(spec, store)
    assert plan.validation.ok, [d.message for d in plan.validation.diagnostics if d.is_error]
    changed = {aid for aid in plan.graph.order if first.graph.keys.get(aid) != plan.graph.keys[aid]}
    assert changed == row.expect
    assert deferred(plan) == waiting
    runs = to_run(plan)
    assert set(runs) == row.expect - waiting
    for aid, text in row.reasons.items():
        assert any(text in r for r in runs[aid]), f"{aid}: no reason mentions {text!r}: {runs[aid]}"
    for aid, reasons in runs.items():
        assert reasons and not any("never built" in r for r in reasons), (aid, reasons)
        # one naming scheme: every reason is a path of the spec (what a dependency carries included)
        for r in reasons:
            assert SPEC_PATH.match(r) or r.startswith("... and "), (aid, r)

    second = build_spec(spec, store)
    assert not second.failed
    assert {r.id for r in second.executed} == set(runs)
    assert {aid for aid, r in second.results.items() if r.status == "cached"} == everything - set(runs) - waiting
    assert (second.manifest == first.manifest) == (not changed)
    # and the store now holds everything: planning again finds nothing to do
    assert to_run(plan_spec(spec, store)) == {}


# --- reproducibility ----------------------------------------------------------------------------
def artifact_files(store: LocalStore, manifest: bytes) -> dict[str, dict[str, bytes]]:
    """Action id -> {relative path: bytes} of every artifact a release names, read and verified."""
    import json

    out = {}
    for art in json.loads(manifest)["artifacts"]:
        if art["tree"] is not None:
            out[art["id"]] = {e.path: store.read_bytes(e.digest) for e in store.tree(art["tree"])}
    return out


def test_two_stores_give_identical_manifests_and_artifacts(tmp_path: Path) -> None:
    spec = copy_example(MIG, tmp_path / "spec")
    a, b = LocalStore(tmp_path / "store-a"), LocalStore(tmp_path / "store-b")
    out_a, out_b = build_spec(spec, a, jobs=1), build_spec(spec, b, jobs=4)
    assert out_a.manifest is not None and out_a.manifest == out_b.manifest
    assert out_a.manifest_digest == out_b.manifest_digest
    files_a, files_b = artifact_files(a, out_a.manifest), artifact_files(b, out_b.manifest)
    assert set(files_a) == MIG_ACTIONS
    assert files_a == files_b
    assert all(files for files in files_a.values())  # every artifact has content
    assert {aid: out_a.graph.keys[aid] for aid in MIG_ACTIONS} == {aid: out_b.graph.keys[aid] for aid in MIG_ACTIONS}


@pytest.mark.parametrize("example", [MIG, QUICK])
def test_same_manifest_from_another_directory(example: str, tmp_path: Path, monkeypatch) -> None:
    one = copy_example(example, tmp_path / "first")
    other = copy_example(example, tmp_path / "elsewhere" / "deeper" / "copy")
    m1 = build_spec(one, LocalStore(tmp_path / "s1")).manifest
    monkeypatch.chdir(other.parent)  # and a relative spec path this time
    m2 = build_spec(Path("kiln.yaml"), LocalStore(tmp_path / "s2")).manifest
    assert m1 is not None and m1 == m2
    assert str(tmp_path).encode() not in m1


def test_manifest_names_every_artifact(tmp_path: Path) -> None:
    import json

    spec = copy_example(MIG, tmp_path / "spec")
    out = build_spec(spec, LocalStore(tmp_path / "store"))
    doc = json.loads(out.manifest)
    assert [a["id"] for a in doc["artifacts"]] == sorted(MIG_ACTIONS | MIG_DEFERRED)
    assert all(a["key"] == out.graph.keys[a["id"]] for a in doc["artifacts"])
    # a partial release: what is pending says what it waits for, and nothing pretends to be built
    assert doc["complete"] is False
    pending = {a["id"]: a for a in doc["artifacts"] if "pending" in a}
    assert set(pending) == MIG_DEFERRED and all(a["tree"] is None for a in pending.values())
    assert "network" in pending["quantize/chat"]["pending"] and "torch" in pending["quantize/chat"]["needs"]
    assert pending["quality-gate/chat"]["pending"] == "waits for quantize/chat"
    assert LocalStore(tmp_path / "store").releases(doc["spec"]["name"]) == [out.manifest_digest]
    assert doc["hosts"]["b200-a"]["host_plan"] == out.results["host-plan/b200-a"].tree


def test_plan_on_an_empty_store_says_never_built(tmp_path: Path, capsys, monkeypatch) -> None:
    spec = copy_example(MIG, tmp_path / "spec")
    outcome = plan_spec(spec, LocalStore(tmp_path / "store"))
    assert {p.id for p in outcome.plan} == MIG_ACTIONS | MIG_DEFERRED
    assert all(not p.cached and p.reasons == ["never built in this store"] for p in outcome.plan)
    assert deferred(outcome) == MIG_DEFERRED

    monkeypatch.setenv("KILN_BUILDER_HAS", "torch")
    assert main(["plan", str(spec), "--store", str(tmp_path / "store"), "--format", "text"]) == 0
    text = capsys.readouterr().out
    total = len(MIG_ACTIONS | MIG_DEFERRED)
    assert f"Actions: {total} to run, 0 cached, {len(MIG_DEFERRED)} of them deferred on this builder" in text
    assert text.count("never built in this store") == total
    assert "  defer  quantize/coder" in text and "deferred here: needs network access" in text
    assert "deferred here: waits for quantize/chat" in text


def test_plan_after_a_build_says_all_cached(tmp_path: Path, capsys, monkeypatch) -> None:
    import json

    monkeypatch.setenv("KILN_BUILDER_HAS", "")
    spec = copy_example(MIG, tmp_path / "spec")
    build_spec(spec, LocalStore(tmp_path / "store"))
    assert main(["plan", str(spec), "--store", str(tmp_path / "store"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["actions"]["cached"] == len(MIG_ACTIONS)
    assert doc["actions"]["to_run"] == doc["actions"]["deferred"] == len(MIG_DEFERRED)
