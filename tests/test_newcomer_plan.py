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
