"""The lock file keeps unchanged MIG instances where they are when a layout changes, and a revert
of the spec with its lock gives the earlier placements back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compiler.build import plan_spec
from compiler.cli import main
from compiler.gitops.semplan import host_disruptions
from compiler.graph.builder import Builder
from compiler.ir.lockfile import lock_path
from compiler.store.local import LocalStore

EXAMPLE = Path(__file__).parents[1] / "examples" / "b200-mig-three-models"
BARE = Builder(fixed=frozenset())
SHRINK = ("{profile: 2g.45gb, serves: coder}", "{profile: 1g.23gb, serves: coder}")


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "spec")
    return tmp_path / "spec" / "kiln.yaml"


def edit(spec: Path, old: str, new: str) -> None:
    text = spec.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    spec.write_text(text.replace(old, new), encoding="utf-8")


def graph(spec: Path, store: Path):
    out = plan_spec(spec, LocalStore(store), builder=BARE)
    assert out.graph is not None, [d.message for d in out.validation.diagnostics if d.is_error]
    return out


def starts(outcome) -> dict[str, int]:
    return {u.id: u.mig_start for u in outcome.validation.resolved.units if u.mig is not None}


def test_without_a_lock_shrinking_coder_moves_intent(spec: Path, tmp_path: Path) -> None:
    before = starts(graph(spec, tmp_path / "s"))
    edit(spec, *SHRINK)
    after = starts(graph(spec, tmp_path / "s"))
    assert before["b200-a/gpu0/mig2"] == 6 and after["b200-a/gpu0/mig2"] == 5  # the defect the lock fixes


def test_with_a_lock_only_the_changed_instance_is_recreated(spec: Path, tmp_path: Path, capsys) -> None:
    assert main(["lock", str(spec)]) == 0
    assert lock_path(spec).is_file() and main(["lock", str(spec), "--check"]) == 0
    base = graph(spec, tmp_path / "s").graph
    edit(spec, *SHRINK)
    head = graph(spec, tmp_path / "s")
    assert starts(head)["b200-a/gpu0/mig2"] == 6  # intent stays at its locked slot
    reslices = [d for d in host_disruptions(base, head.graph) if d.kind == "mig-reslice"]
    assert {d.gpu_index for d in reslices} == {0, 1}
    assert all(d.detail == "destroys 2g.45gb@4; creates 1g.23gb@4" for d in reslices), reslices
    capsys.readouterr()
    assert main(["lock", str(spec), "--check"]) == 1  # stale: the lock still says 2g.45gb
    assert "stale" in capsys.readouterr().err
    assert main(["validate", str(spec)]) == 0 and "K209" in capsys.readouterr().out


def test_reverting_spec_and_lock_restores_the_placements_byte_for_byte(spec: Path, tmp_path: Path) -> None:
    main(["lock", str(spec)])
    a_spec, a_lock = spec.read_bytes(), lock_path(spec).read_bytes()
    first = graph(spec, tmp_path / "s").graph.keys["host-plan/b200-a"]
    edit(spec, *SHRINK)
    main(["lock", str(spec)])
    second = graph(spec, tmp_path / "s").graph.keys["host-plan/b200-a"]
    spec.write_bytes(a_spec)
    lock_path(spec).write_bytes(a_lock)  # git revert of both files
    assert graph(spec, tmp_path / "s").graph.keys["host-plan/b200-a"] == first != second


def test_lock_refuses_a_spec_with_errors(spec: Path, capsys) -> None:
    edit(spec, "{profile: 1g.23gb, serves: intent}", "{profile: 1g.99gb, serves: intent}")
    assert main(["lock", str(spec)]) == 1
    assert "K202" in capsys.readouterr().err and not lock_path(spec).exists()
