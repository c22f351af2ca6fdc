"""`kiln plan` opens with a one-line summary, in every format."""

from __future__ import annotations

import json
import re
from pathlib import Path

from compiler.cli import main

QUICKSTART = Path(__file__).parents[1] / "examples" / "quickstart" / "kiln.yaml"
SUMMARY = re.compile(r"^(\d+) actions? to run(?: \(\d+ deferred on this builder\))?, (\d+) cached; "
                     r"(nothing disrupted|\d+ hosts? disrupted)$")


def test_the_plan_starts_with_its_summary(tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    assert main(["plan", str(QUICKSTART), "--store", store]) == 0
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    m = SUMMARY.match(first)
    assert m, first
    # the figures are the plan's own: the "Actions:" line below counts the same
    run, cached = int(m.group(1)), int(m.group(2))
    assert f"Actions: {run} to run, {cached} cached" in text and run > 0 and cached == 0
    assert main(["plan", str(QUICKSTART), "--store", store, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"] == first
    assert doc["summary"].startswith(f"{doc['actions']['to_run']} actions to run")
    assert main(["plan", str(QUICKSTART), "--store", store, "--format", "markdown"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"**{first}**"


def test_reasons_from_a_ref_of_another_shape_do_not_crash_the_plan(tmp_path: Path, capsys) -> None:
    """A store edited by hand (or by another Kiln) may hold a snapshot ref whose record is not a
    dict, or input paths that are not strings: the plan names what it can and never crashes."""
    from compiler.store.local import LocalStore

    store = LocalStore(tmp_path / "store")
    key = "sha256:" + "0" * 64
    store.set_ref("quickstart", "spec-snapshot", key, {"params": ["not", "a", "record"]})
    store.set_ref("quickstart", "calibration-set/tiny", key,
                  {"params": {}, "inputs": {"data": key}, "input_paths": ["not", "a", "map"]})
    assert main(["plan", str(QUICKSTART), "--store", str(tmp_path / "store"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    reasons = {a["id"]: a["reasons"] for a in doc["actions"]["actions"]}
    assert "models.tiny.quantization.calibration.data: the file's content changed" in reasons["calibration-set/tiny"]


def test_the_plan_shows_the_processes_of_a_multi_rank_unit(tmp_path: Path, capsys) -> None:
    """An engine of tp * pp > 1 runs one tritonserver per rank under mpirun: the plan says how many
    processes the unit starts (text and json); the llmapi target's single process is not listed."""
    import shutil

    example = Path(__file__).resolve().parents[1] / "examples" / "h200-tp8-llama70b"
    spec = tmp_path / "spec"
    shutil.copytree(example, spec, ignore=shutil.ignore_patterns("store", ".kiln"))
    assert main(["plan", str(spec / "kiln.yaml"), "--store", str(tmp_path / "store")]) == 0
    assert "Processes per serving unit" not in capsys.readouterr().out  # llmapi: the LLM spawns its workers
    text = (spec / "kiln.yaml").read_text(encoding="utf-8")
    (spec / "kiln.yaml").write_text(text.replace("kiln: v1\n", "kiln: v1\ntarget: engine\n", 1), encoding="utf-8")
    main(["plan", str(spec / "kiln.yaml"), "--store", str(tmp_path / "store")])
    out = capsys.readouterr().out
    assert re.search(r"h200-node/gpu0\+1\+2\+3\+4\+5\+6\+7 +h200-node +llama70b +triton +8 +8 x 1", out), out
    main(["plan", str(spec / "kiln.yaml"), "--store", str(tmp_path / "store"), "--format", "json"])
    rows = json.loads(capsys.readouterr().out)["processes"]
    assert [(r["model"], r["ranks"], r["tp"], r["pp"]) for r in rows] == [("llama70b", 8, 8, 1)]


def test_a_unit_of_an_unknown_model_is_a_diagnostic_in_the_plan_not_a_crash(tmp_path: Path, capsys) -> None:
    """Found by the pools fuzzer: a host that serves a model the spec does not define reached the
    processes table, which looked the model up. The plan reports the spec's error and exits 1."""
    import shutil

    spec = tmp_path / "spec"
    shutil.copytree(QUICKSTART.parent, spec, ignore=shutil.ignore_patterns("store", ".kiln"))
    text = (spec / "kiln.yaml").read_text(encoding="utf-8")
    assert text.count("serves: tiny-awq") == 1
    (spec / "kiln.yaml").write_text(text.replace("serves: tiny-awq", "serves: gone"), encoding="utf-8")
    for fmt in ("text", "json"):
        assert main(["plan", str(spec / "kiln.yaml"), "--store", str(tmp_path / "store"), "--format", fmt]) == 1
        out = capsys.readouterr().out
        assert "gone" in out and "Traceback" not in out
