"""The plan a new team reads first (issue 36): two models, one MIG host and one node pool
(tests/data/newcomer), `kiln plan` against an empty store. Its sections from the disruptions to
the capacity tables are compared line by line with tests/golden/plan/newcomer/plan.txt (the actions
list depends on the builder, the capacity and estimate tables have their own tests). Rewrite with `pytest tests/test_newcomer_plan.py --update-expectations`, then
read the diff."""

from __future__ import annotations

import shutil
from pathlib import Path

from compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "plan" / "newcomer" / "plan.txt"


def test_the_newcomers_plan_reads_as_the_golden_file(tmp_path: Path, capsys, monkeypatch, update_expectations) -> None:
    shutil.copytree(ROOT / "tests" / "data" / "newcomer", tmp_path / "spec")
    monkeypatch.setenv("KILN_BUILDER_HAS", "torch,docker")  # a CPU runner: the same deferrals everywhere
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "spec" / "kiln.yaml"), "--store", str(tmp_path / "store")]) == 0
    text = capsys.readouterr().out.replace(str(tmp_path), "TMP")
    head = "Disruption:" + text.split("\nDisruption:", 1)[1]
    head = head.split("\nCapacity (per GPU of each serving unit)\n", 1)[0].rstrip("\n") + "\n"
    if update_expectations:
        GOLDEN.write_text(head, encoding="utf-8")
    assert head == GOLDEN.read_text(encoding="utf-8")
    # what a newcomer asked of it: the idle GPUs and the Kubernetes release the tree assumes are said
    assert "Idle: each node of node pool h200-pool serves on 4 of its 8 GPUs; GPUs 4, 5, 6, 7 serve nothing" in head
    assert "kubernetes.version is not set, so the tree is written for Kubernetes 1.35" in head
    # a pool without MIG: nodes already at all-disabled (the GPU Operator's default) are not drained
    assert "layout all-disabled: a node already at it (MIG off, the GPU Operator's default) is left alone" in head
    assert ("Calibration: big's data/calib.jsonl holds 2 samples, fewer than the 512 asked for: "
            "calibration-set/big will hold 2") in head  # `samples: 512` with a 2-line file was silent


def test_one_clock_given_for_a_pool_prints_as_one(tmp_path: Path, capsys) -> None:
    """Issue 36: `clocks: {graphics_mhz: 1980}` on a node pool printed as nvidia-smi's "1980,1980"."""
    shutil.copytree(ROOT / "tests" / "data" / "newcomer", tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    pool = '    gpu: H200-SXM-141GB\n    count: 8\n    driver: ">=580.82.07"\n'
    assert pool in text
    spec.write_text(text.replace(pool, pool + "    clocks: {graphics_mhz: 1980}\n"), encoding="utf-8")
    capsys.readouterr()
    assert main(["plan", str(spec), "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "h200-pool (node pool): clocks: not set -> locked graphics 1980 MHz:" in out, out
    assert "1980,1980" not in out
