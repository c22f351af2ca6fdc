"""Dynamo on the Grove pathway (issue 32): `kubernetes.dynamo.grove` declares it, the DGDs say it
(nvidia.com/enable-grove), the simulator rolls each worker as Grove rolls a PodClique (sim/grove.py,
ported from ai-dynamo/grove rollingupdate.go processPendingUpdates), and a change of the pathway
under running models is refused (K850: the operator fixes a DGD's workload provider when it first
admits it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler.cli import main
from compiler.cli.exitcodes import ExitCode
from compiler.gitops.semplan import change_simulations
from compiler.targets.kubernetes.sim import grove
from compiler.targets.kubernetes.sim.deployment import RS
from compiler.targets.kubernetes.sim.tree import dgd_workloads
from tests.gitrepo import GitRepo
from tests.k8s_edit_matrix import base_text
from tests.k8s_tree import graph_of, render
from tests.test_k8s_rollout_plan import EXAMPLE, GOLDEN, ONEFIELD, _edited_text, _rollout_section

COMPONENT = 'dynamo: {version: "1.6.1"}'


def _text(on_grove: bool) -> str:
    return base_text("grove" if on_grove else "dynamo")  # the edit matrix's runtimes (tests/k8s_edit_matrix.py)


# --- the ported rule (grove.py) ------------------------------------------------------------------------
def _clique(old_ready: int, old_pods: int | None = None, new_pods: int = 0, new_ready: int = 0):
    old = RS("old", old_ready if old_pods is None else old_pods, old_ready, 1)
    return old, RS("new", new_pods, new_ready, 2)


def test_grove_replaces_one_ready_pod_at_a_time_the_old_one_deleted_first() -> None:
    """processPendingUpdates: the oldest Ready old-hash pod is deleted, runSyncFlow creates its
    replacement from the new template; nothing else moves until a new-hash pod is Ready for every pod
    selected (isCurrentPodUpdateComplete). maxUnavailable 1, maxSurge 0: never more than 3 pods."""
    old, new = _clique(3)
    moved, selected = grove.rollout(3, 1, [old], new, 0)
    assert moved and selected == 1 and (old.replicas, new.replicas) == (2, 1)
    moved, selected = grove.rollout(3, 1, [old], new, selected)  # the replacement is not Ready yet
    assert not moved and selected == 1 and (old.replicas, new.replicas) == (2, 1)
    new.available = 1
    moved, selected = grove.rollout(3, 1, [old], new, selected)
    assert moved and selected == 2 and (old.replicas, new.replicas) == (1, 2)
    assert old.replicas + new.replicas == 3


def test_grove_deletes_old_pods_that_are_not_ready_at_once() -> None:
    """Upstream TestComputeUpdateWork: old-hash Pending, unhealthy and starting pods are deleted
    immediately (deleteOldNonReadyPods), outside the one-at-a-time path; then one Ready pod goes."""
    old, new = _clique(2, old_pods=4)
    moved, selected = grove.rollout(4, 1, [old], new, 0)
    assert moved and selected == 1 and (old.replicas, new.replicas) == (1, 3)


def test_grove_waits_while_ready_pods_are_below_min_available() -> None:
    """'ready replicas %d lesser than minAvailable %d, requeuing': no Ready pod is taken while the
    PodClique has fewer Ready pods than minAvailable (Dynamo defaults it to 1 on Grove)."""
    old, new = _clique(1, old_pods=1, new_pods=2)
    assert grove.rollout(3, 2, [old], new, 0) == (False, 0) and (old.replicas, new.replicas) == (1, 2)


def test_grove_takes_the_only_pod_of_a_one_pod_clique() -> None:
    """minAvailable 1 and 1 Ready pod: 1 < 1 is false, so Grove deletes it: a one-worker component
    serves nothing until its replacement is Ready (what Dynamo's surge avoided with room)."""
    old, new = _clique(1)
    moved, selected = grove.rollout(1, 1, [old], new, 0)
    assert moved and selected == 1 and (old.replicas, new.replicas) == (0, 1)


# --- the tree and what the simulator reads from it ----------------------------------------------------
@pytest.fixture(scope="module")
def dgds(tmp_path_factory) -> dict[bool, list[dict]]:
    out = {}
    for on_grove in (False, True):
        work = tmp_path_factory.mktemp(f"grove-{on_grove}")
        root = render(graph_of(EXAMPLE / "kiln.yaml", work, _text(on_grove)), work)
        out[on_grove] = [o for f in sorted((root / "workloads").glob("*.yaml"))
                         for o in YAML(typ="safe").load_all(f.read_text()) if o and o["kind"] == "DynamoGraphDeployment"]
    return out


def test_each_dgd_declares_its_pathway_and_grove_dgds_carry_no_pace(dgds) -> None:
    """nvidia.com/enable-grove is written either way, so the operator's choice on creation is the
    spec's; on Grove the surge/unavailable annotations are not read, so Kiln writes none."""
    surge = "nvidia.com/deployment-rolling-update-max-surge"
    for on_grove, objs in dgds.items():
        assert objs and {o["metadata"]["annotations"]["nvidia.com/enable-grove"] for o in objs} == \
            {"true" if on_grove else "false"}
        paced = [c for o in objs for c in o["spec"]["components"]
                 if surge in ((c.get("podTemplate") or {}).get("metadata") or {}).get("annotations", {})]
        workers = [c for o in objs for c in o["spec"]["components"] if c["type"] == "worker"]
        assert paced == ([] if on_grove else workers)


def test_the_simulator_reads_the_pathway_from_the_dgd(dgds) -> None:
    for on_grove, objs in dgds.items():
        ws = [w for o in objs for w in dgd_workloads(o)]
        assert ws and {w.grove for w in ws} == {on_grove}
        if on_grove:
            assert {(w.max_surge, w.max_unavailable) for w in ws} == {(0, 1)}
    old = {**dgds[False][0], "metadata": {**dgds[False][0]["metadata"], "annotations": {}}}
    assert not any(w.grove for w in dgd_workloads(old))  # a DGD of an earlier Kiln: the chart's default


def test_grove_specs_lock_no_surge(tmp_path: Path) -> None:
    from compiler.pipeline import validate_text
    from compiler.targets.kubernetes.k8s_dgd import lock_surges

    for on_grove in (False, True):  # what `kiln lock` writes under "surges"
        v = validate_text(_text(on_grove), EXAMPLE, "kiln.yaml")
        assert v.ok and bool(lock_surges(v.resolved)) != on_grove


# --- the plan -----------------------------------------------------------------------------------------
@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> GitRepo:
    r = GitRepo(tmp_path / "repo")
    shutil.copytree(EXAMPLE, r.root / "deploy")
    (r.root / "deploy" / "kiln.yaml").write_text(_text(True), encoding="utf-8")
    r.commit("base on Grove")
    monkeypatch.chdir(r.root)
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    return r


def test_a_plan_on_grove_rolls_podcliques(repo: GitRepo, capsys, tmp_path: Path, update_expectations) -> None:
    """The review's `onefield` edit (intent's MIG profile) on Grove: the timeline is Grove's (no surge
    worker, each old pod deleted before its replacement), not the operator's managed rolling update,
    whose plan for the same edit differs (5h23m and intent down to 2 of 32 there)."""
    (repo.root / "deploy" / "kiln.yaml").write_text(_edited_text(_text(True), ONEFIELD), encoding="utf-8")
    code = main(["plan", "deploy/kiln.yaml", "--base", "main"])
    section = _rollout_section(capsys.readouterr().out)
    assert code == ExitCode.CHANGES
    assert "Grove PodClique" in section and "worker generation" not in section
    component, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", _text(False)),
                                    graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited_text(_text(False), ONEFIELD)))
    assert component.text() + "\n" != section
    golden = GOLDEN / "k8s-dyn-grove-onefield.txt"
    if update_expectations:
        golden.write_text(section, encoding="utf-8")
    assert section == golden.read_text(encoding="utf-8")


def test_changing_the_pathway_of_running_models_is_refused(repo: GitRepo, capsys) -> None:
    """K850: the operator fixed each running DGD's workload provider when it admitted it
    (nvidia.com/workload-provider); the plan refuses, at the spec's line, and names the models."""
    (repo.root / "deploy" / "kiln.yaml").write_text(_text(False).replace(COMPONENT, 'dynamo: {version: "1.6.1", '
                                                                                      'grove: false}'), encoding="utf-8")
    code = main(["plan", "deploy/kiln.yaml", "--base", "main"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "[K850]" in ln)
    assert code == ExitCode.ERRORS and "kiln.yaml:" in line and "from true to false" in line
    assert "big, chat, coder, intent" in line and "keep `grove: true`" in out
    (repo.root / "deploy" / "kiln.yaml").write_text(_edited_text(_text(True), ONEFIELD), encoding="utf-8")
    assert "[K850]" not in (main(["plan", "deploy/kiln.yaml", "--base", "main"]), capsys.readouterr().out)[1]


def test_halving_tp_on_grove_counts_the_deleted_old_pod_out_at_once(tmp_path: Path) -> None:
    """Review N2's `tp` on Grove: processPendingUpdates deletes one of big's 2 old pods at +0s and its
    replacements are Ready at +10m. A pod being deleted is no ready endpoint of its Service
    (endpointslice/utils.go podToEndpoint: ready = serving && !terminating), so big serves 1 pod from
    +0s for one load; the plan said 2: its step was recorded between the PodClique's decision and the
    pod's deletion, and counted the deleted pod."""
    from tests.k8s_edit_matrix import Edit, check
    from tests.test_k8s_edit_matrix import TP4

    outcome, sim = check(Edit("grove", TP4), tmp_path)
    r = sim.result
    assert outcome == "completes" and r.before["big"] == 2 and r.end["big"] == 4
    assert r.low["big"] == (1, 0.0, 600.0)
    deleted = next(s for s in r.steps if "Grove PodClique, old-hash pods 2 -> 1" in s.text)
    assert deleted.t == 0.0 and deleted.ready["big"] == 1 and deleted.by_pool["b200-pool"]["big"] == 1
    assert "big: 2 -> 4 ready (wants 4); lowest 1 (50%) from +0s for 10m00s" in sim.text()
