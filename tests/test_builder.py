"""Actions a builder cannot run are deferred, never faked: the plan says what each waits for, the
build runs everything else and writes a manifest that lists them as pending, and a builder that
has what they need completes the same release from the same store. Also --only / --skip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compiler.build import BadSelection, build_spec, plan_spec
from compiler.cli import main
from compiler.graph.builder import Builder, Selection
from compiler.store.local import LocalStore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BARE = Builder(fixed=frozenset())


def copy_example(name: str, dest: Path, edits: dict[str, str] | None = None) -> Path:
    shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns(".kiln"))
    spec = dest / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    for old, new in (edits or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    spec.write_text(text, encoding="utf-8")
    return spec


def test_gpu_formats_wait_for_a_gpu_builder(tmp_path: Path) -> None:
    spec = copy_example("nvfp4-moe-blackwell", tmp_path / "spec")
    cpu_with_everything_else = Builder(fixed=frozenset({"torch", "network", "docker"}))
    plan = plan_spec(spec, LocalStore(tmp_path / "store"), builder=cpu_with_everything_else)
    deferred = {p.id: p.deferred for p in plan.plan if p.deferred}
    quantize = [aid for aid in deferred if aid.startswith("quantize/")]
    assert quantize, deferred
    assert all(deferred[a] == "needs a GPU builder (a CUDA device)" for a in quantize)
    gates = [aid for aid in deferred if aid.startswith("quality-gate/")]
    assert all(deferred[g] == f"waits for quantize/{g.split('/', 1)[1]}" for g in gates)
    # what does not depend on them is not deferred
    assert not any(p.deferred for p in plan.plan if p.kind in ("host-plan", "host-script", "llmapi-options"))


def test_partial_build_then_a_capable_builder_completes_it(tmp_path: Path) -> None:
    """The quickstart's model comes from a local directory; here only `quantize` needs torch. One
    model (FP8): an INT4 AWQ run would only make the test slower (tests/test_quantize.py has it)."""
    from tests.quickstart import one_batch, only_tiny

    spec = copy_example("quickstart", tmp_path / "spec")
    spec.write_text(one_batch(only_tiny(spec.read_text(encoding="utf-8"))), encoding="utf-8")
    store = LocalStore(tmp_path / "store")
    first = build_spec(spec, store, builder=BARE)
    assert not first.failed
    assert {r.id for r in first.deferred} == {"quantize/tiny", "quality-gate/tiny"}
    doc = json.loads(first.manifest)
    assert doc["complete"] is False
    assert {a["id"] for a in doc["artifacts"] if "pending" in a} == {r.id for r in first.deferred}

    # A builder with torch runs only what was deferred, reusing everything else.
    pytest.importorskip("modelopt", reason="nvidia-modelopt is not installed (scripts/install.sh --dev installs it)")
    second = build_spec(spec, store, builder=Builder(fixed=frozenset({"torch"})))
    assert not second.failed and not second.deferred
    assert {r.id for r in second.executed} == {r.id for r in first.deferred}
    assert json.loads(second.manifest)["complete"] is True
    # keys do not depend on who built what: the partial manifest's keys are the complete one's
    assert [a["key"] for a in doc["artifacts"]] == [a["key"] for a in json.loads(second.manifest)["artifacts"]]


def test_only_builds_the_selection_and_its_dependencies(tmp_path: Path) -> None:
    spec = copy_example("b200-mig-three-models", tmp_path / "spec")
    out = build_spec(spec, LocalStore(tmp_path / "store"), builder=BARE,
                     selection=Selection(only=("host-script/*",)))
    built = {r.id for r in out.executed}
    assert built == {"host-script/b200-a", "host-plan/b200-a"}  # host-script reads the host plan
    assert all(r.error in ("not selected (--only/--skip)",) or r.error.startswith(("needs", "waits"))
               for r in out.deferred)


def test_skip_defers_the_match_and_what_depends_on_it(tmp_path: Path) -> None:
    spec = copy_example("b200-mig-three-models", tmp_path / "spec")
    out = build_spec(spec, LocalStore(tmp_path / "store"), builder=BARE, selection=Selection(skip=("host-plan",)))
    results = out.results
    assert results["host-plan/b200-a"].status == "deferred"
    assert results["host-script/b200-a"].error == "waits for host-plan/b200-a"
    assert results["capacity-report/b200-a"].status == "built"


def test_a_pattern_that_matches_nothing_is_a_usage_error(tmp_path: Path, capsys) -> None:
    spec = copy_example("b200-mig-three-models", tmp_path / "spec")
    with pytest.raises(BadSelection, match="no action matches 'quantise/\\*'"):
        build_spec(spec, LocalStore(tmp_path / "store"), builder=BARE, selection=Selection(only=("quantise/*",)))
    assert main(["build", str(spec), "--store", str(tmp_path / "store"), "--only", "quantise/*"]) == 2
    assert "no action matches" in capsys.readouterr().err


def test_cli_exit_code_tells_a_partial_build(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KILN_BUILDER_HAS", "")
    spec = copy_example("b200-mig-three-models", tmp_path / "spec")
    store = str(tmp_path / "store")
    assert main(["build", str(spec), "--store", store, "-q"]) == 4
    captured = capsys.readouterr()
    assert "deferred: quantize/chat: needs" in captured.err
    assert "10 deferred (incomplete" in captured.out  # model, tokenizer, repository and image actions
    assert main(["build", str(spec), "--store", store, "-q", "--allow-partial"]) == 0


def test_a_huggingface_source_needs_the_network_unless_a_local_copy_exists(tmp_path: Path, monkeypatch) -> None:
    from compiler.actions.source import directory_digest

    spec = copy_example("b200-mig-three-models", tmp_path / "spec")
    no_network = Builder(fixed=frozenset({"torch"}))
    plan = plan_spec(spec, LocalStore(tmp_path / "store"), builder=no_network)
    coder = next(p for p in plan.plan if p.id == "quantize/coder")
    assert coder.deferred and "network" in coder.deferred

    # a local copy under $KILN_MODELS satisfies the need (it is verified against source.digest when used)
    repo = plan.graph.actions["quantize/coder"].params.source.huggingface
    mirror = tmp_path / "models"
    shutil.copytree(EXAMPLES / "quickstart" / "model", mirror / repo)
    assert directory_digest(mirror / repo).startswith("sha256:")
    monkeypatch.setenv("KILN_MODELS", str(mirror))
    plan = plan_spec(spec, LocalStore(tmp_path / "store"), builder=no_network)
    assert next(p for p in plan.plan if p.id == "quantize/coder").deferred is None


def test_model_source_copies_a_local_unquantized_model(tmp_path: Path) -> None:
    spec = copy_example("quickstart", tmp_path / "spec", {
        "      weights: fp8\n      calibration: {data: data/calib-prose.jsonl, samples: 16, max_seq_len: 128, seed: 7}\n"
        "      quality_gate: {eval: data/eval-prose.jsonl, metric: perplexity, max_regression_pct: 5.0}\n":
        "      weights: bf16\n"})
    store = LocalStore(tmp_path / "store")
    out = build_spec(spec, store, builder=BARE)
    assert out.results["model-source/tiny"].status == "built"
    files = {e.path: store.read_bytes(e.digest) for e in store.tree(out.results["model-source/tiny"].tree)}
    model = EXAMPLES / "quickstart" / "model"
    assert files == {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}


def test_the_deferral_says_why_torch_is_lacking(tmp_path: Path, capsys, monkeypatch) -> None:
    """Installed but left out by KILN_BUILDER_HAS: no advice to install it. Missing: which module."""
    import importlib.util

    from compiler.graph import builder

    spec = copy_example("quickstart", tmp_path / "spec")
    monkeypatch.setenv("KILN_BUILDER_HAS", "docker")
    assert main(["build", str(spec), "--store", str(tmp_path / "store"), "-q", "--allow-partial"]) == 0
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("deferred: quantize/tiny:")]
    if all(importlib.util.find_spec(m) for m in builder.TORCH_MODULES):  # scripts/install.sh --dev installs them
        assert "(installed, but KILN_BUILDER_HAS='docker' leaves it out)" in line and "pip install" not in line
    monkeypatch.setattr(builder, "TORCH_MODULES", ("torch", "kiln_no_such_module"))
    plan = plan_spec(spec, LocalStore(tmp_path / "store"), builder=Builder())
    deferred = {p.id: p.deferred for p in plan.plan}["quantize/tiny"]
    assert "(kiln_no_such_module not installed: bash scripts/install.sh" in deferred, deferred
