"""`kiln plan --base` plays a Kubernetes change through the controllers (issue 32): the plan's rollout
section is the simulation's (compiler/targets/kubernetes/sim/), a change that sticks is K858 and
exits 1, and the review's edits have golden timelines (tests/golden/plan/k8s-<edit>.txt: the
rollout section of the text plan)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.cli.exitcodes import ExitCode
from compiler.gitops.semplan import change_simulations
from tests.gitrepo import GitRepo
from tests.k8s_tree import graph_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "k8s-two-pools"
GOLDEN = Path(__file__).parent / "golden" / "plan"
TP4 = (("parallelism: {tp: 8}", "parallelism: {tp: 4}"),
       ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
        "      - index: [0, 1, 2, 3]\n        serves: big\n      - index: [4, 5, 6, 7]\n        serves: big\n"))
ONEFIELD = (("          - {profile: 1g.10gb, serves: intent}", "          - {profile: 1g.20gb, serves: intent}"),)
IMAGE = (("1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0", "2" * 64),)
H100_MIG = ("          - {profile: 3g.40gb, serves: chat}\n"
            "          - {profile: 2g.20gb, serves: coder}\n"
            "          - {profile: 1g.10gb, serves: intent}\n")
SINGLE = ((H100_MIG, "".join("          - {profile: 1g.10gb, serves: intent}\n" for _ in range(7))),)
NAMESPACE = (("namespace: inference", "namespace: serving"),)
SPECNAME = (("name: fleet\n", "name: fleet2\n"),)
MAXUNAVAIL = (("node_pool: {nodes: 4,", "node_pool: {nodes: 4, max_unavailable: 2,"),)
# big at tp4 on half of each B200 node, intent on the other half's whole GPUs (review N12)
MOVEMODEL = (TP4[0], ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
                      "      - index: [0, 1, 2, 3]\n        serves: big\n"
                      + "".join(f"      - index: [{i}]\n        serves: intent\n" for i in range(4, 8))))
# the review's edits (controllers-review-2026-12-05.md) and an image bump
EDITS = {"tp": TP4, "onefield": ONEFIELD, "image": IMAGE, "single": SINGLE, "namespace": NAMESPACE,
         "specname": SPECNAME, "maxunavail": MAXUNAVAIL, "movemodel": MOVEMODEL}


def _edited(edits) -> str:
    return _edited_text((EXAMPLE / "kiln.yaml").read_text(encoding="utf-8"), edits)


def _edited_text(text: str, edits) -> str:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _rollout_section(out: str) -> str:
    start = out.index("Rollout on the cluster")
    return out[start:out.index("\nCapacity", start)] + "\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> GitRepo:
    r = GitRepo(tmp_path / "repo")
    shutil.copytree(EXAMPLE, r.root / "deploy")
    r.commit("base")
    monkeypatch.chdir(r.root)
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    return r


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_plan_renders_the_simulated_rollout(repo: GitRepo, capsys, edit: str, tmp_path: Path,
                                                update_expectations) -> None:
    # the lock written on the base revision, as a team commits it (compiler/ir/lockfile.py): its
    # "pods" let a shape change (`tp`) free a node before its new pods are due
    spec = repo.root / "deploy" / "kiln.yaml"
    assert main(["lock", "deploy/kiln.yaml"]) == ExitCode.OK
    repo.commit("lock")
    spec.write_text(_edited(EDITS[edit]), encoding="utf-8")
    code = main(["plan", "deploy/kiln.yaml", "--base", "main"])
    out = capsys.readouterr().out
    section = _rollout_section(out)
    # the plan's text is the simulation's, computed here from the two graphs
    sims = change_simulations(graph_of(spec, tmp_path / "a", _edited(())),
                              graph_of(spec, tmp_path / "b", _edited(EDITS[edit])))
    assert len(sims) == 1 and section == sims[0].text() + "\n"
    sim = sims[0]
    assert ("[K955]" in out) == (edit == "specname")  # a rename is refused whatever the rollout (review N6)
    assert ("[K956]" in out) == (edit == "namespace")  # so is a namespace move, with its outage (review N5)
    if edit == "specname":
        assert code == ExitCode.ERRORS
    elif edit == "namespace":
        assert code == ExitCode.ERRORS and sim.floor_breaches() and "[K859]" not in out
    elif sim.result.completed and not sim.floor_breaches():
        assert code == ExitCode.CHANGES and "[K858]" not in out and "[K859]" not in out
    else:
        assert code == ExitCode.ERRORS
        assert ("[K858]" in out) == (not sim.result.completed) and ("[K859]" in out) == bool(sim.floor_breaches())
    golden = GOLDEN / f"k8s-{edit}.txt"
    if update_expectations:
        golden.write_text(section, encoding="utf-8")
    assert section == golden.read_text(encoding="utf-8")


def test_halving_tp_on_a_full_pool_without_a_lock_is_refused_with_its_cause(tmp_path: Path) -> None:
    """Review N2 without kiln.lock: nothing records the old pods' shape and count, so the Deployment
    keeps a batch's pace (2 of the new pods), the rollout never completes, and the workload's own
    line says so beside the pace the controller's arithmetic gives (K858 stays for it; with the lock,
    test_halving_tp_with_a_lock_frees_a_node_first_and_completes)."""
    from compiler.gitops.semplan import host_disruptions

    base, head = (graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a"),
                  graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(TP4)))
    sim, = change_simulations(base, head)
    assert not sim.result.completed and "Insufficient nvidia.com/gpu" in sim.result.stuck
    assert sim.result.end["big"] == 2 and sim.result.desired["big"] == 4
    assert [c for c, _, _ in sim.diagnostics()] == ["K858"]
    # K858's fix is the lock, said for this cause only (the other causes' fixes: test_k858_s_fix_...)
    assert sim.result.stuck_family == "reshape"
    assert "Deployment big-b200-pool's pods change shape on node pool 'b200-pool'" in sim.diagnostics()[0][2]
    assert "Run `kiln lock` on the base revision" in sim.diagnostics()[0][2]
    lines = [d.detail for d in sim.annotate(host_disruptions(base, head)) if d.kind == "workload-roll"]
    assert len(lines) == 1 and lines[0].startswith("big-b200-pool: pods replaced 2 at a time")
    assert lines[0].endswith("; simulated: does NOT complete, the sync waits on it (K858, see the rollout)")


def _k858_help(sim) -> str:
    helps = [h for c, _, h in sim.diagnostics() if c == "K858"]
    assert len(helps) == 1, sim.diagnostics()
    return helps[0]


def test_k858_s_fix_follows_its_cause(tmp_path: Path) -> None:
    """K858's help is worded from the cause: the `kiln lock` hint only where a Deployment's pods change
    shape and its pace lets no old pod go (above); a model moved onto a full pool whose freed devices
    another model's pods take (the lock records big's pods there, so the hint would be wrong), a
    Dynamo worker's reshape and a DGD the webhook refuses each get their own fix."""
    from tests.k8s_edit_matrix import base_text
    from tests.test_k8s_change_matrix import SECOND_SHAPE

    moved, _, _ = _locked_sims(tmp_path / "moved", _edited(()), _edited(MOVEMODEL))
    assert not moved.result.completed and moved.result.stuck_family == "room"
    assert _k858_help(moved).startswith("Deployment big-b200-pool's new pods find no free device on node pool "
                                        "'b200-pool'") and "kiln lock" not in _k858_help(moved)
    text = base_text("dynamo")
    dyn, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited_text(text, TP4)))
    assert dyn.result.stuck_family == "worker-room" and "kiln lock" not in _k858_help(dyn)
    assert "operator's rolling update may not retire an old worker first" in _k858_help(dyn)
    hook, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "c", text),
                               graph_of(EXAMPLE / "kiln.yaml", tmp_path / "d", text.replace(*SECOND_SHAPE)))
    assert hook.result.stuck_family == "webhook" and "kiln lock" not in _k858_help(hook)
    assert "deleted and re-created, its model serving nothing meanwhile (K855)" in _k858_help(hook)


def test_halving_tp_with_a_lock_frees_a_node_first_and_completes(tmp_path: Path) -> None:
    """Review N2 fixed: with the lock written on the base revision, big's Deployment gets
    maxUnavailable 4 - (2 - 1) = 3 (k8s_deployment.reshape_unavailable): rolling.go removes the old
    pod of one node (the pool's max_unavailable) at once, the 2 new pods fit there, then the last
    old pod goes. It completes in two loads, big at 1 of 2 for one load, the floor an image bump
    holds; no K858. `kiln lock` after the change puts the batch pace back (2), which replaces no pod."""
    from compiler.gitops.semplan import host_disruptions
    from compiler.pipeline import validate_text

    sim, base, head = _locked_sims(tmp_path, _edited(()), _edited(TP4))
    r = sim.result
    assert r.completed and not sim.diagnostics() and r.end["big"] == 4
    assert r.low["big"] == (1, 0.0, 600.0) and r.duration_s == 1200
    assert head.actions["k8s-deployment/big-b200-pool"].params.max_unavailable == 3
    lines = [d.detail for d in sim.annotate(host_disruptions(base, head)) if d.kind == "workload-roll"]
    assert len(lines) == 1 and "maxSurge 0, maxUnavailable 3: at least 1 of 4 stay ready" in lines[0]
    assert "K858" not in lines[0]
    # relocked after the change: the lock's shape is the new one, the pace a batch's again
    relocked, _, after = _locked_sims(tmp_path / "relocked", _edited(TP4), _edited(TP4))
    assert after.actions["k8s-deployment/big-b200-pool"].params.max_unavailable == 2
    assert relocked.result.completed and not relocked.result.events
    # K957 says the pace comes from the lock while the lock's shape is the old one, and not after
    warned = [d for d in validate_text(_edited(TP4), tmp_path / "spec", "kiln.yaml").diagnostics if d.code == "K957"]
    assert len(warned) == 1 and "'big-b200-pool' as 2 pod(s) of 8gpu (1 per node)" in warned[0].message
    assert "kiln lock" in warned[0].help
    assert not [d for d in validate_text(_edited(TP4), tmp_path / "relocked" / "spec", "kiln.yaml").diagnostics
                if d.code == "K957"]
    # the image bump that follows holds the same floor: 2 of 4 pods at a time, one node
    bump, _, _ = _locked_sims(tmp_path / "bump", _edited(TP4), _edited(TP4 + IMAGE))
    assert bump.result.completed and bump.result.low["big"][0] == 2


def test_lock_check_passes_mid_change_on_the_pods_of_the_running_revision(tmp_path: Path, capsys) -> None:
    """The tp edit is merged with the base's lock (rewriting it would lose the pace): its "pods" and
    the bare name's shape describe what runs, so `kiln lock --check` (CI) passes with a line saying
    so, and K209 is silent; a stale placement in the same edit still fails the check."""
    from compiler.pipeline import validate_path

    spec = tmp_path / "spec" / "kiln.yaml"
    shutil.copytree(EXAMPLE, spec.parent)
    assert main(["lock", str(spec)]) == ExitCode.OK
    spec.write_text(_edited(TP4), encoding="utf-8")
    capsys.readouterr()
    assert main(["lock", "--check", str(spec)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "describe the running revision (big-b200-pool runs 2 pod(s) of 8gpu, 1 per node; the spec gives 4 " \
           "of 4gpu, 2 per node): after the rollout, run `kiln lock" in out
    assert not [d for d in validate_path(spec).diagnostics if d.code == "K209"]
    # a MIG placement the lock no longer records is stale whatever the pods say
    spec.write_text(_edited(TP4 + ONEFIELD), encoding="utf-8")
    assert main(["lock", "--check", str(spec)]) == ExitCode.ERRORS
    captured = capsys.readouterr()
    assert "is stale" in captured.err and "running revision" not in captured.out
    assert "kiln lock --keep-pods" in captured.err
    # `kiln lock --keep-pods` writes the new placement and keeps the running pods: the pace stays
    assert main(["lock", "--keep-pods", str(spec)]) == ExitCode.OK and "running revision" in capsys.readouterr().out
    doc = json.loads((spec.parent / "kiln.lock").read_text())
    assert doc["pods"]["b200-pool"]["big-b200-pool"] == {"per_node": 1, "replicas": 2, "shape": "8gpu"}
    assert "1g.20gb" in json.dumps(doc["placements"]) and main(["lock", "--check", str(spec)]) == ExitCode.OK
    assert "running revision" in capsys.readouterr().out
    assert graph_of(spec, tmp_path / "g", _edited(TP4 + ONEFIELD)).actions[
        "k8s-deployment/big-b200-pool"].params.max_unavailable == 3
    # so is a workload name it does not record (intent moves onto the B200 pool beside big's new shape)
    spec.write_text(_edited(MOVEMODEL), encoding="utf-8")
    assert main(["lock", "--check", str(spec)]) == ExitCode.ERRORS
    assert "is stale" in capsys.readouterr().err
    # after the rollout `kiln lock` records the new pods: up to date, no note
    spec.write_text(_edited(TP4), encoding="utf-8")
    assert main(["lock", str(spec)]) == ExitCode.OK and main(["lock", "--check", str(spec)]) == ExitCode.OK
    assert "up to date" in capsys.readouterr().out


def test_a_lock_with_malformed_pods_is_k912(tmp_path: Path) -> None:
    """The lock's "pods" are read like its surges: an entry that is not a shape and two counts is the
    lock file's fault (K912), never a traceback."""
    from compiler.pipeline import validate_path

    spec = tmp_path / "spec" / "kiln.yaml"
    shutil.copytree(EXAMPLE, spec.parent)
    (spec.parent / "kiln.lock").write_text(json.dumps({
        "kind": "kiln.lock/v1", "spec": "fleet", "placements": {},
        "pods": {"b200-pool": {"big-b200-pool": {"shape": "8gpu", "replicas": "2", "per_node": 1}}}}))
    bad, = [d for d in validate_path(spec).diagnostics if d.code == "K912"]
    assert "pods: expected" in bad.message and "kiln lock" in bad.help


def _sim(tmp_path: Path, edits):
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a"),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(edits)))
    return sim


def test_an_image_bump_rolls_a_nodes_worth_at_a_time(tmp_path: Path) -> None:
    """With maxUnavailable 1 a 32-replica workload rolled one pod per load (5h20m at the default
    load); the rollout now takes what the budget lets a re-layout batch take: 4 rounds."""
    r = _sim(tmp_path, IMAGE).result
    load = r.duration_s / 4
    assert r.completed and r.end == r.before and load == 600
    assert all(r.low[m][0] == 24 for m in ("chat", "coder", "intent")) and r.low["big"][0] == 1


def test_a_strategy_only_change_says_no_pod_is_replaced(tmp_path: Path) -> None:
    """Review N14: a wider node_pool.max_unavailable changes the Deployments' maxUnavailable (not in
    the pod template) and doubles every budget. The target said the pods roll ("rebuilt": it could
    not tell a strategy change from a pushed image) and only the simulation's note corrected the
    printed plan; now the target's own line says no pod is replaced, the simulation replaces none,
    and the budgets say what they now allow."""
    from compiler.gitops.semplan import host_disruptions

    base, head = (graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a"),
                  graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(MAXUNAVAIL)))
    sim, = change_simulations(base, head)
    assert sim.result.completed and not [e for e in sim.result.events if e[0] == "workload-roll"]
    raw = host_disruptions(base, head)
    assert not [d for d in raw if d.kind == "workload-roll"]
    said = ("rollout settings changed (maxUnavailable 8 -> 16): no pod replaced (the pod template is unchanged: the "
            "Deployment controller rolls only for a new .spec.template); its next rollout: pods replaced 16 at a "
            "time, each old pod stopped before its replacement is scheduled (maxSurge 0, maxUnavailable 16: at "
            "least 16 of 32 stay ready)")
    assert sorted(d.detail for d in raw if d.kind == "rollout-settings") == \
        [f"{m}-h100-pool: {said}" for m in ("chat", "coder", "intent")]
    lines = sorted(d.detail for d in sim.annotate(raw) if d.kind == "rollout-settings")
    assert lines == [f"{m}-h100-pool: {said}; its PodDisruptionBudget: a voluntary disruption (a drain, the "
                     "autoscaler) may now take 16 pods at once, was 8" for m in ("chat", "coder", "intent")]
    # listed for what it changes, but counted as disrupting nothing (the plan's summary and header)
    from compiler.targets.disruption import disrupted_phrase, render_disruptions

    settings = [d for d in raw if d.kind == "rollout-settings"]
    assert disrupted_phrase(settings) == "nothing disrupted"
    assert render_disruptions(settings, "text").splitlines()[0] == "Disruption: none (what is listed replaces no pod)"


def test_another_models_gpus_on_a_shared_pool_roll_no_pod_of_this_one(tmp_path: Path) -> None:
    """The deployment runtime: chat on B200 GPU 4 beside intent on 5-7, intent giving 6 and 7 back.
    chat's surge follows the pool's room (its strategy, outside the pod template): its line said
    "rolled" (serving image of b200-pool or weights rebuilt), though no image it runs changed; now it
    says its rollout settings changed and no pod is replaced, as the simulation does."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import base_text

    text = base_text("deployment")
    full = _edited_text(text, _b200(("chat", 4), ("intent", 5), ("intent", 6), ("intent", 7)))
    two = _edited_text(text, _b200(("chat", 4), ("intent", 5)))
    base, head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", full), graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", two)
    sim, = change_simulations(base, head)
    assert sim.result.completed and sim.result.events == [("replicas", "b200-pool", "intent-b200-pool")]
    lines = sorted((d.kind, d.detail.split(" (", 1)[0]) for d in host_disruptions(base, head))
    assert lines == [("replicas", "intent-b200-pool: 6 -> 2 replicas"),
                     ("rollout-settings", "chat-b200-pool: rollout settings changed"),
                     ("rollout-settings", "intent-b200-pool: rollout settings changed")]


def test_the_timeline_is_a_section_per_pool(tmp_path: Path) -> None:
    """Issue 32: a section per node pool (its models, when it settles) after the cluster's own steps;
    every step in one section, a node's steps in its pool's, a pool the change leaves alone says so."""
    sim = _sim(tmp_path, ONEFIELD)
    sections = dict(sim.sections())
    assert sorted(sections) == ["Cluster (Argo CD's sync waves, the re-layout Job)",
                                "Node pool b200-pool (big): nothing happens",
                                "Node pool h100-pool (chat, coder, intent): settled at +49m00s"]
    assert sum(len(v) for v in sections.values()) == len(sim.result.steps)
    h100 = sections["Node pool h100-pool (chat, coder, intent): settled at +49m00s"]
    assert all(s.pool == "h100-pool" for s in h100)
    assert [s.text for s in sim.result.steps if "node h100-pool-" in s.text] == [
        s.text for s in h100 if "node h100-pool-" in s.text]
    assert sim.result.duration_s == 49 * 60  # the pool settles when its last pods are Ready, not at its last step
    text = sim.text()
    assert text.index("  Cluster (") < text.index("  Node pool b200-pool") < text.index("  Node pool h100-pool")


def test_each_pool_says_its_models_fewest_pods_and_where_the_change_sticks(tmp_path: Path) -> None:
    """Issue 32: a pool's section gives its own models' ready pods (before, after, fewest and for how
    long), not the model's across pools, and whether the object the change sticks on (K858) is in it."""
    moved = _sim(tmp_path / "m", MOVEMODEL)
    r = moved.result
    assert not r.completed and r.stuck_pool == "b200-pool"
    assert r.pool_before["h100-pool"]["intent"] == 32 and r.pool_before.get("b200-pool", {}).get("intent", 0) == 0
    assert moved.pool_lines("b200-pool")[-1] == "the change sticks on Deployment big-b200-pool (K858), in this pool"
    assert moved.pool_lines("h100-pool")[-1].endswith("(K858), in node pool b200-pool")
    one = _sim(tmp_path / "o", ONEFIELD)
    assert one.pool_lines("b200-pool") == ["big on this pool: 2 -> 2 ready"]  # the model's lowest is the pool's
    assert "chat on this pool: 32 -> 32 ready; lowest 24 (75%) from +0s for 49m00s" in one.pool_lines("h100-pool")
    assert not any("K858" in x for x in one.pool_lines("h100-pool"))


def test_a_relayout_waits_for_the_pods_the_last_node_lost(tmp_path: Path) -> None:
    """Review N13: the next node's evictions wait for the previous node's pods to load (the budgets
    refuse them until then); with a 600 s bound the Job failed and left a node cordoned. Review N1:
    the changed profile's model went to zero (the Job evicted every old pod, which could never come
    back, before the new Deployment synced at wave 0); the Deployments now sync with the Job (wave
    -1) and roll onto each node's new slices as the Job frees them."""
    sim = _sim(tmp_path, ONEFIELD)
    r = sim.result
    assert r.completed and "re-layout Job completed" in [s.text for s in r.steps]
    assert r.low["chat"][0] == 24 and 0 < r.low["intent"][0] < 32
    # it completes with a ready pod throughout (no K858, no K859); intent below its floor is K450
    assert [c for c, _, _ in sim.diagnostics()] == ["K450"]
    waves = [s.text for s in r.steps if s.text.startswith("Argo CD sync wave")]
    assert waves[-1] == "Argo CD sync wave -1"  # the Deployment and the Job in one wave


def test_the_relayout_role_lets_kubectl_scale_a_retired_deployment(tmp_path: Path) -> None:
    """Review N7: kubectl scale GETs the Deployment before it patches the scale subresource."""
    from compiler.targets.kubernetes.sim import rbac, tree
    from tests.k8s_tree import render

    rev = tree.read_tree(render(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a"), tmp_path / "a"))
    assert rev.relayout is not None and rev.relayout.rules
    assert rbac.denied(rev.relayout.rules, "scale deployment", "chat-h100-pool") == []


def test_a_spec_rename_rolls_without_emptying_the_services(tmp_path: Path) -> None:
    """Review N6: the Service selected `app.kubernetes.io/part-of: <spec>`, so after a rename it
    selected none of the old pods and every model dropped to zero; it selects the model now, and
    the pods (whose labels carry the spec name) roll a node's worth at a time."""
    sim = _sim(tmp_path, (("name: fleet\n", "name: fleet2\n"),))
    r = sim.result
    assert r.completed and not sim.diagnostics()
    assert r.low["chat"][0] == 24 and r.low["big"][0] == 1


def test_a_namespace_rename_is_refused_with_when_and_how_long(tmp_path: Path) -> None:
    """Review N5: every object is created in the new namespace and the old ones pruned: each model
    has no ready pod until its new pods load; the plan says so (K859), per model."""
    sim = _sim(tmp_path, (("namespace: inference", "namespace: serving"),))
    assert sim.result.completed
    assert sorted(m.split("'")[1] for c, m, _ in sim.diagnostics() if c == "K859") == ["big", "chat", "coder", "intent"]


def test_a_rerun_relabels_a_node_that_failed_before(tmp_path: Path) -> None:
    """Review N8: a node left `failed` by an earlier re-layout carries the target label already, and
    mig-manager acts only on a change of the value; relabelling it with the same value waited out
    KILN_MIG_S and failed the Job again; and taken in name order, the other nodes' evictions waited on
    budgets the failed node's missing pods already spend. The script now takes such a node first,
    through all-disabled."""
    from compiler.targets.kubernetes.kinds import KINDS
    from compiler.targets.kubernetes.sim import simulate
    from compiler.targets.kubernetes.sim.fromgraph import pool_nodes, render_revision

    base_g = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a")
    head_g = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(ONEFIELD))
    base, new = render_revision(base_g, KINDS), render_revision(head_g, KINDS)
    nodes = pool_nodes(base_g, head_g)
    h100 = next(p for p in nodes if p.name == "h100-pool")
    h100.preset = {"h100-pool-1": (new.pools["h100-pool"].layout, "failed", base.pools["h100-pool"].layout)}
    r = simulate(base, new, nodes)
    assert r.completed, r.stuck
    assert any("h100-pool-1 labelled nvidia.com/mig.config=all-disabled first" in s.text for s in r.steps)
    new.relayout.bounce = None  # the script before: nodes in name order, the same value again
    r = simulate(base, new, nodes)
    assert not r.completed  # h100-pool-0's evictions wait on the budgets the failed node already spends


def test_a_removed_pool_keeps_its_tuning_and_the_plan_says_so(tmp_path: Path) -> None:
    """Review N15: pruning a pool's tuning DaemonSet restores nothing on its nodes."""
    sim = _sim(tmp_path, (("    power_limit_w: 1000\n", ""), ("    clocks: {graphics_mhz: 1755}\n", "")))
    assert not any("keep the clocks" in s.text for s in sim.result.steps)  # the DaemonSets stay: they reset
    from tests.test_k8s_change_matrix import NEW_POOL

    base_g = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "c", _edited((NEW_POOL,)))
    sim, = change_simulations(base_g, graph_of(EXAMPLE / "kiln.yaml", tmp_path / "d"))
    assert sim.result.completed and not sim.diagnostics()
    assert any(s.text.startswith("the nodes of h100b-pool keep the clocks and power limit") for s in sim.result.steps)


def test_a_single_strategy_flip_on_a_live_pool_is_refused(tmp_path: Path) -> None:
    """Review N4: `single` is cluster-wide: while nodes are re-laid out one by one, a node still in the
    three-profile layout is MIG-INVALID under it and advertises nothing; no node-by-node order keeps
    the models serving, and the plan refuses the change (K859) with the strategy step in its timeline."""
    from tests.test_k8s_change_matrix import H100_MIG, SEVEN

    sim = _sim(tmp_path, ((H100_MIG, SEVEN),))
    assert sim.result.steps[0].text.startswith("the GPU Operator's MIG strategy is single from now on")
    assert "K859" in [c for c, _, _ in sim.diagnostics()] and sim.result.low["intent"][0] == 0


def test_a_dgd_update_the_webhook_refuses_is_refused_by_the_plan(tmp_path: Path) -> None:
    """Review NA3 (partly fixed before): a model gaining a shape adds a DGD component, which Dynamo's
    webhook refuses; the plan said K855 (a warning) and the tree let Argo CD fail on every retry."""
    from tests.k8s_edit_matrix import base_text
    from tests.test_k8s_change_matrix import SECOND_SHAPE

    text = base_text("dynamo")
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", text.replace(*SECOND_SHAPE)))
    assert not sim.result.completed and "Dynamo's webhook refuses the update" in sim.result.stuck
    assert [c for c, _, _ in sim.diagnostics()] == ["K858"]


def test_a_changed_profile_on_dynamo_keeps_the_model_serving(tmp_path: Path) -> None:
    """Review N1 on the Dynamo runtime (`dyn_onefield`): the DGD syncs in the Job's wave, its options
    ConfigMap before it; its workers roll onto the new slices as the Job frees them."""
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", text.replace(*ONEFIELD[0])))
    # it completes and keeps a ready pod: neither K858 nor K859 (below its floor: K450, the next test)
    assert sim.result.completed and [c for c, _, _ in sim.diagnostics() if c != "K450"] == []
    assert sim.result.low["intent"][0] > 0


def test_moving_a_model_onto_a_mixed_whole_gpu_pool_is_refused(tmp_path: Path) -> None:
    """Review N12: once an old big pod goes, intent's new 1-GPU pods (scheduled first) take every GPU
    it freed; big's new 4-GPU pod stays Pending and its rollout stops at one replica."""
    sim = _sim(tmp_path, MOVEMODEL)
    r = sim.result
    assert not r.completed and r.end["big"] == 1 and "big-b200-pool never completes" in r.stuck
    assert "Insufficient nvidia.com/gpu" in r.stuck and [c for c, _, _ in sim.diagnostics()] == ["K858"]


def test_a_two_worker_dynamo_roll_names_the_routing_gap(tmp_path: Path) -> None:
    """Review N10: with max-unavailable 1 and two workers, Dynamo's own guide warns of a moment with
    no routable worker (readiness advances the rollout before the frontend registers the new one);
    the plan says so for big (2 workers) when its options roll it."""
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b",
                                       text.replace("limits: {max_batch_size: 64,", "limits: {max_batch_size: 32,")))
    gap = [s.text.split(":", 1)[0] for s in sim.result.steps if "no routable" in s.text or "none to route" in s.text]
    assert gap == ["big-worker-b200-pool"]


def test_a_pool_with_room_rolls_without_taking_a_pod_out(tmp_path: Path) -> None:
    """Surge where a pool has room: big at tp4 on GPUs 0-3 of each B200 node leaves 4 GPUs idle per
    node, so its rollout adds the new pod first (maxSurge 1, maxUnavailable 0: with 1 beside it
    rolling.go takes an old pod out at once too) and big keeps both replicas serving."""
    from compiler.targets.kubernetes.sim import tree
    from tests.k8s_tree import render

    idle = (TP4[0], ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
                     "      - index: [0, 1, 2, 3]\n        serves: big\n"))
    base = _edited(idle)
    rev = tree.read_tree(render(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "r", base), tmp_path / "r"))
    big = rev.workloads["inference/big-b200-pool"]
    assert (big.max_surge, big.max_unavailable) == (1, 0)
    assert rev.workloads["inference/chat-h100-pool"].max_surge == 0  # every slice is assigned
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", base),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(idle + IMAGE)))
    assert sim.result.completed and sim.result.low["big"][0] == 2 and sim.result.low["chat"][0] == 24


def test_a_dynamo_pool_with_room_surges_and_a_full_one_states_the_floor(tmp_path: Path) -> None:
    """Review N10: Dynamo's 0/1 leaves a moment with no routable worker. Where the pool has room (big
    at tp4 on GPUs 0-3 of each B200 node) the workers surge (1/0) and big keeps both replicas; on the
    example's full pool the gap stays named, with the floor the simulation found."""
    from compiler.targets.kubernetes.sim import tree
    from tests.k8s_edit_matrix import base_text
    from tests.k8s_tree import render

    text = base_text("dynamo")
    idle = (TP4[0], ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
                     "      - index: [0, 1, 2, 3]\n        serves: big\n"))
    roomy = _edited_text(text, idle)
    rev = tree.read_tree(render(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "r", roomy), tmp_path / "r"))
    big = [w for k, w in rev.workloads.items() if w.model == "big"]
    assert [(w.max_surge, w.max_unavailable) for w in big] == [(1, 0)]
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", roomy),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited_text(roomy, IMAGE)))
    assert sim.result.completed and sim.result.low["big"][0] == 2
    assert not [s for s in sim.result.steps if "none to route" in s.text]

    full, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "c", text),
                               graph_of(EXAMPLE / "kiln.yaml", tmp_path / "d",
                                        text.replace("limits: {max_batch_size: 64,", "limits: {max_batch_size: 32,")))
    gap, = [s.text for s in full.result.steps if "none to route" in s.text]
    lowest = full.result.low["big"][0]
    assert lowest < 2 and f"big's fewest ready pods during the change: {lowest} of 2" in gap
    assert "no free device for a surge worker" in gap


def test_a_spec_rename_on_a_running_tree_is_refused(repo: GitRepo, capsys) -> None:
    """Review N6: the spec's name is the Argo CD Application's and the live MIG layouts ConfigMap's
    (`<name>-mig-layouts`, which the GPU Operator's helm values name): a rename made a second
    Application over the same objects and a ConfigMap mig-manager does not read, and the plan said
    only that the pods roll. It is refused at the spec's `name:`, with what to do."""
    (repo.root / "deploy" / "kiln.yaml").write_text(_edited(SPECNAME), encoding="utf-8")  # it has kubernetes.argocd
    code = main(["plan", "deploy/kiln.yaml", "--base", "main"])
    out = capsys.readouterr().out
    assert code == ExitCode.ERRORS
    line = next(ln for ln in out.splitlines() if "[K955]" in ln)
    assert "kiln.yaml:" in line and "'fleet' to 'fleet2'" in line and "'fleet2-mig-layouts'" in line
    assert "second Argo CD Application 'fleet2'" in line
    assert "argocd app delete fleet --cascade=false" in out
    (repo.root / "deploy" / "kiln.yaml").write_text(_edited(()), encoding="utf-8")  # the same name: no K955
    assert "[K955]" not in (main(["plan", "deploy/kiln.yaml", "--base", "main"]), capsys.readouterr().out)[1]


def test_halving_tp_on_dynamo_sticks_in_the_operators_own_arithmetic(tmp_path: Path) -> None:
    """Review N2 on the Dynamo runtime (`dyn_tp`): the operator's managed rolling update
    (dgd_worker_rollout_reconciler.go buildRollingUpdateContext, sim/dynamo.py) gives the new worker
    generation 2 of 4 pods, which stay Pending on the full B200 nodes, and may not retire an old one;
    the plan names the Dynamo worker, not a ReplicaSet."""
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited_text(text, TP4)))
    r = sim.result
    assert not r.completed and r.end["big"] == 2
    assert r.stuck.startswith("Dynamo worker big-worker-b200-pool never completes: new generation 0/2 available")
    assert "Insufficient nvidia.com/gpu" in r.stuck and "K858" in [c for c, _, _ in sim.diagnostics()]


# --- review N9: the upgrade from a tree that managed the live layouts ConfigMap --------------------------
LIVE = ("ConfigMap", "gpu-operator", "fleet-mig-layouts")
OLD_ANNOTATE = "kubectl annotate -f - --local -o yaml argocd.argoproj.io/sync-options=Prune=false"  # f113b8c's script


def _upgrade(tmp_path: Path, edits=(), *, job: bool = True, emitters: str = "new", app: str = "new"):
    """The sync of the example's current tree (with `edits`) over a tree of Kiln 7f7403b..14199f6^,
    whose node layer was the live layouts ConfigMap alone (tests/data/k8s/kiln-7f7403b), tracked by
    the Application, its workloads as now; every node at its pool's layout. `job`: the tree has the
    re-layout Job (kubernetes.relayout_image); `emitters` "old": the tree as f113b8c wrote it (no
    live ConfigMap in it, the script annotating Prune=false); `app` "old": the Application as applied
    before (no ignoreDifferences). The Simulation, run."""
    import dataclasses

    from ruamel.yaml import YAML

    from compiler.targets.kubernetes.kinds import KINDS
    from compiler.targets.kubernetes.sim import argocd
    from compiler.targets.kubernetes.sim.engine import Simulation
    from compiler.targets.kubernetes.sim.fromgraph import pool_nodes, render_revision
    from compiler.targets.kubernetes.sim.tree import _writes

    base_g = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a")
    head_g = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(edits) if edits else None)
    cur, new = render_revision(base_g, KINDS), render_revision(head_g, KINDS)
    old_cm = next(d for d in YAML(typ="safe").load_all(ROOT / "tests" / "data" / "k8s" / "kiln-7f7403b" /
                                                       "mig-layouts-old.yaml") if d)
    objects = {k: o for k, o in cur.objects.items() if "relayout" not in k[2] and "mig-layouts" not in k[2]}
    objects[LIVE] = old_cm
    base = dataclasses.replace(cur, objects=objects, relayout=None, pools={},
                               layouts=YAML(typ="safe").load(old_cm["data"]["config.yaml"])["mig-configs"])
    if emitters == "old":
        new = dataclasses.replace(new, objects={k: o for k, o in new.objects.items() if k != LIVE})
        new.relayout.writes = _writes(OLD_ANNOTATE)
    if app == "old" or emitters == "old":
        spec = {k: v for k, v in new.app["spec"].items() if k != "ignoreDifferences"}
        spec["syncPolicy"] = {k: v for k, v in spec["syncPolicy"].items() if k != "syncOptions"}
        new = dataclasses.replace(new, app={**new.app, "spec": spec})
    if not job:
        new = dataclasses.replace(new, relayout=None, objects={
            k: o for k, o in new.objects.items() if not (k[0] == "Job" or k[2].startswith("fleet-relayout-"))})
    nodes = pool_nodes(base_g, head_g)
    for p in nodes:
        layout = cur.pools[p.name].layout
        p.preset = {f"{p.name}-{i}": (layout, "success", layout) for i in range(p.count)}
    assert argocd.has_option(new.objects.get(LIVE, {"metadata": {}}), argocd.DISABLE_PRUNE) == (emitters == "new")
    sim = Simulation(base, new, nodes)
    sim.result = sim.run()
    return sim


def _texts(sim) -> str:
    return "\n".join(s.text for s in sim.result.steps)


@pytest.mark.parametrize("job", [True, False])
def test_the_upgrade_from_a_tree_that_managed_the_live_layouts_keeps_them(tmp_path: Path, job: bool) -> None:
    """Review N9: the current tree holds `fleet-mig-layouts`, so the sync over a tree that managed it
    has no prune task for it (reconcile.go), and with the Application's ignoreDifferences /data and
    RespectIgnoreDifferences Argo CD keeps what the old tree (then the script) wrote: a layout the
    nodes still carry (here: every h100 node until the Job relabels it) stays in the live ConfigMap
    at every step, with or without the re-layout Job (without it, with no layout change: the script
    run by hand relabels the nodes after the sync)."""
    sim = _upgrade(tmp_path, ONEFIELD if job else (), job=job)
    text = _texts(sim)
    assert sim.result.completed, sim.result.stuck
    assert "prunes ConfigMap gpu-operator/fleet-mig-layouts" not in text and "is gone" not in text
    assert "in neither ConfigMap" not in text
    assert "gpu-operator/fleet-mig-layouts: its live data stays" in text
    assert LIVE in sim.live and LIVE in sim.tracked
    carried = {n.mig.label for n in sim.nodes.values()}
    assert carried <= set(sim.config), (carried, sorted(sim.config))
    # the old tree's h100 layout: found by the Job's first write (no "in neither"), dropped by its last
    # once no node carries it; without the Job the nodes keep it, and the live ConfigMap too
    assert ("kiln-0ee2259fad" in sim.config) == ("kiln-0ee2259fad" in carried) != job


def test_an_application_applied_before_still_keeps_the_live_layouts(tmp_path: Path) -> None:
    """The same upgrade before `argocd/application.yaml` is applied again (no ignoreDifferences yet):
    the ConfigMap is in the tree, so it is not pruned; Argo CD writes the tree's layouts over it at
    wave 0, after the Job (wave -1) has moved every node to them."""
    sim = _upgrade(tmp_path, ONEFIELD, app="old")
    text = _texts(sim)
    assert sim.result.completed and "prunes ConfigMap gpu-operator/fleet-mig-layouts" not in text
    assert "fleet-mig-layouts: written with the tree's layouts (over the live ones" in text
    assert text.index("re-layout Job completed") < text.index("written with the tree's layouts")
    assert {n.mig.label for n in sim.nodes.values()} <= set(sim.config)


def test_the_old_emitters_prune_the_live_layouts_without_the_job(tmp_path: Path) -> None:
    """The tree as f113b8c wrote it (the script annotates the live ConfigMap Prune=false, the tree does
    not hold it): without the Job nothing annotates it before Argo CD's wave-0 prune, so the ConfigMap
    the MIG manager reads is deleted (review N9); with the Job, its write at wave -1 puts Prune=false
    on the live object, which pruneObject reads when wave 0 runs."""
    sim = _upgrade(tmp_path, job=False, emitters="old")
    text = _texts(sim)
    assert "Argo CD prunes ConfigMap gpu-operator/fleet-mig-layouts" in text and "is gone" in text
    assert LIVE not in sim.live and sim.config == {}
    sim = _upgrade(tmp_path / "j", ONEFIELD, emitters="old")
    text = _texts(sim)
    assert "does not prune ConfigMap gpu-operator/fleet-mig-layouts: ignored (no prune)" in text
    assert text.index("live layouts ConfigMap written") < text.index("does not prune ConfigMap")


# --- a Dynamo worker's surge kept by kiln.lock ---------------------------------------------------------
# big at tp4 on GPUs 0-3 of each B200 node: the pool has room for one surge worker of its shape
ROOMY = (TP4[0], ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
                  "      - index: [0, 1, 2, 3]\n        serves: big\n"))


def _locked_sims(tmp_path: Path, locked_text: str, text: str):
    """The simulation of `locked_text` -> `text` with the lock `kiln lock` wrote for `locked_text`
    beside both (the spec and its lock committed together), and the two graphs."""
    spec = tmp_path / "spec" / "kiln.yaml"
    shutil.copytree(EXAMPLE, spec.parent)
    spec.write_text(locked_text, encoding="utf-8")
    assert main(["lock", str(spec)]) == 0
    base, head = graph_of(spec, tmp_path / "a", locked_text), graph_of(spec, tmp_path / "b", text)
    sim, = change_simulations(base, head)
    return sim, base, head


def _dgd_worker(graph, model: str) -> dict:
    return next(w for w in graph.actions[f"k8s-dgd/{model}"].params.to_json()["workers"]
                if w["pool"] == "b200-pool")


def test_a_pace_only_pool_change_rolls_no_dynamo_worker_with_a_lock(tmp_path: Path) -> None:
    """A wider node_pool.max_unavailable on the B200 pool lets big surge 2 where it surged 1. The surge is in the
    worker's pod template, which Dynamo's worker hash covers: following the room rolled every big
    worker for a pool setting (as the deployment runtime's review N14 edit, which rolls nothing). The
    lock keeps big's surge while the pool still has the room for it: nothing rolls; without a lock
    the surge still follows the room, and the plan says why big rolls."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import base_text

    roomy = _edited_text(base_text("dynamo"), ROOMY)
    wider = _edited_text(roomy, (("node_pool: {nodes: 2,", "node_pool: {nodes: 2, max_unavailable: 2,"),))
    sim, base, head = _locked_sims(tmp_path / "locked", roomy, wider)
    assert json.loads((tmp_path / "locked" / "spec" / "kiln.lock").read_text())["surges"]["b200-pool"] == \
        {"big-b200-pool": 1}
    assert _dgd_worker(base, "big")["max_surge"] == _dgd_worker(head, "big")["max_surge"] == 1
    assert sim.result.completed and not [e for e in sim.result.events if e[0] == "workload-roll"]
    assert not [d for d in host_disruptions(base, head) if d.kind == "workload-roll"]

    free, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "c", roomy),
                               graph_of(EXAMPLE / "kiln.yaml", tmp_path / "d", wider))
    assert free.result.events == [("workload-roll", "b200-pool", "big/worker-b200-pool")]
    line, = [d.detail for d in host_disruptions(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "e", roomy),
                                                graph_of(EXAMPLE / "kiln.yaml", tmp_path / "f", wider))
             if d.kind == "workload-roll"]
    assert "max_surge 1 -> 2" in line and "a pace change alone rolls every worker" in line


def _b200(*serves: tuple[str, int]) -> tuple:
    """big at tp4 on GPUs 0-3 of each B200 node, then each (model, GPU) on a whole GPU."""
    return (TP4[0], ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
                     "      - index: [0, 1, 2, 3]\n        serves: big\n"
                     + "".join(f"      - index: [{g}]\n        serves: {m}\n" for m, g in serves)))


def test_another_models_edit_on_a_shared_pool_rolls_no_worker_of_this_one(tmp_path: Path) -> None:
    """chat on one whole B200 GPU beside big (GPUs 0-3) and intent (5-7): the pool is full, chat's
    surge 0. intent giving GPUs 6 and 7 back gives the pool room for 2, and chat's surge followed it:
    every chat worker (34, on both pools: one worker hash) rolled for intent's edit. The pool's
    serving image listed its units too, so it was rebuilt and every worker on the pool rolled. With
    the lock and an image that no GPU assignment changes, only intent scales."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    two = _edited_text(text, _b200(("chat", 4), ("intent", 5)))
    full = _edited_text(text, _b200(("chat", 4), ("intent", 5), ("intent", 6), ("intent", 7)))
    sim, base, head = _locked_sims(tmp_path, full, two)
    assert "max_surge" not in _dgd_worker(base, "chat") and "max_surge" not in _dgd_worker(head, "chat")
    assert base.keys["image/b200-pool/chat"] == head.keys["image/b200-pool/chat"]
    assert sim.result.completed and not [e for e in sim.result.events if e[0] == "workload-roll"]
    assert [(d.kind, d.detail) for d in host_disruptions(base, head) if d.kind in ("workload-roll", "replicas")] == \
        [("replicas", "intent/worker-b200-pool: 6 -> 2 replicas (-4 x 1 x nvidia.com/gpu)")]


def test_a_locked_surge_the_room_no_longer_holds_flips_and_is_planned(tmp_path: Path) -> None:
    """chat and intent on one whole B200 GPU each leave 2 free: chat surges 2 and the lock keeps it.
    intent taking the two free GPUs leaves none, and a surge worker with no device stays Pending (the
    rollout would stick): chat's surge flips to 0, its line says why every chat worker rolls, and the
    rollout completes."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    two = _edited_text(text, _b200(("chat", 4), ("intent", 5)))
    full = _edited_text(text, _b200(("chat", 4), ("intent", 5), ("intent", 6), ("intent", 7)))
    sim, base, head = _locked_sims(tmp_path, two, full)
    assert _dgd_worker(base, "chat")["max_surge"] == 2 and "max_surge" not in _dgd_worker(head, "chat")
    assert sim.result.completed and sim.result.end["chat"] == 34
    # intent's own locked surge is as infeasible: its workers roll too; big's (0) stays
    assert {e[2] for e in sim.result.events if e[0] == "workload-roll"} == \
        {f"{m}/worker-{p}-pool" for m in ("chat", "intent") for p in ("b200", "h100")}
    line = next(d.detail for d in host_disruptions(base, head)
                if d.kind == "workload-roll" and d.detail.startswith("chat/worker-b200-pool:"))
    assert "max_surge 2 -> None" in line and "the room no longer holds the locked surge" in line


def test_a_lock_with_malformed_surges_is_k912(tmp_path: Path) -> None:
    """The lock's "surges" are read like its placements: a value that is not a number of pods is the
    lock file's fault (K912, with what to do), never a traceback or a surge of "2"."""
    from compiler.pipeline import validate_path

    spec = tmp_path / "spec" / "kiln.yaml"
    shutil.copytree(EXAMPLE, spec.parent)
    (spec.parent / "kiln.lock").write_text(json.dumps({"kind": "kiln.lock/v1", "spec": "fleet", "placements": {},
                                                       "surges": {"b200-pool": {"big-b200-pool": "2"}}}))
    bad, = [d for d in validate_path(spec).diagnostics if d.code == "K912"]
    assert "surges: expected" in bad.message and "kiln lock" in bad.help


# chat also on a 1g.10gb of every H100 GPU (chat-h100-pool-1g-10gb), then its 3g.40gb dropped (the
# review's `shape_then_drop_first`): without a lock the bare name moves to the 1g.10gb shape
CHAT_1G = (("          - {profile: 1g.10gb, serves: intent}\n",
            "          - {profile: 1g.10gb, serves: intent}\n          - {profile: 1g.10gb, serves: chat}\n"),)
DROP_3G = (("          - {profile: 3g.40gb, serves: chat}\n", ""),)


def test_a_shape_that_takes_the_bare_name_is_a_rename_in_the_plan(repo: GitRepo, capsys) -> None:
    """Review M7: dropping a model's largest shape on a pool without a lock file gave the next shape
    the bare name: its Deployment was pruned (32 pods at once) and the bare-named one rolled onto
    its shape, and the plan listed a removal and an unrelated roll. The plan now says it is a rename
    (K954, at the model) and how the lock avoids it; the base revision warned already (K953)."""
    spec = repo.root / "deploy" / "kiln.yaml"
    spec.write_text(_edited(CHAT_1G), encoding="utf-8")
    assert main(["validate", "deploy/kiln.yaml"]) == ExitCode.OK
    warned = capsys.readouterr().out
    assert "[K953]" in warned and "removing 3g.40gb renames 'chat-h100-pool-1g-10gb' to 'chat-h100-pool'" in warned
    repo.commit("chat on a second shape")
    spec.write_text(_edited(CHAT_1G + DROP_3G), encoding="utf-8")
    main(["plan", "deploy/kiln.yaml", "--base", "main"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "[K954]" in ln)
    assert "warning:" in line and "kiln.yaml:20:3:" in line  # models.chat
    assert ("chat-h100-pool-1g-10gb renamed to chat-h100-pool: its 32 pod(s) deleted at once (Argo CD prunes it), "
            "chat-h100-pool rolls from 3g.40gb onto 1g.10gb") in line
    assert ("chat-h100-pool-1g-10gb: renamed to chat-h100-pool: its 32 pod(s) deleted at once (Argo CD prunes it), "
            "chat-h100-pool rolls from 3g.40gb onto 1g.10gb; `kiln lock` before the change keeps the name (K954)") in out
    # with the lock written on the base revision the remaining shape keeps its name: no rename
    spec.write_text(_edited(CHAT_1G), encoding="utf-8")
    assert main(["lock", "deploy/kiln.yaml"]) == ExitCode.OK
    assert main(["validate", "deploy/kiln.yaml"]) == ExitCode.OK and "[K953]" not in capsys.readouterr().out
    repo.commit("lock")
    spec.write_text(_edited(CHAT_1G + DROP_3G), encoding="utf-8")
    main(["plan", "deploy/kiln.yaml", "--base", "main"])
    out = capsys.readouterr().out
    assert "[K954]" not in out and "renamed to" not in out and "chat-h100-pool-1g-10gb" in out


def test_a_larger_shape_leaves_a_locked_one_shape_model_its_name(tmp_path: Path) -> None:
    """A one-shape model is in the lock too: without it, chat gaining a larger shape (4g.40gb over
    its 3g.40gb) took the bare name from the 3g.40gb workload, which rolled onto the new shape while
    a new workload started the 3g.40gb pods."""
    from compiler.ir.pools import shape_moves
    from compiler.pipeline import validate_path

    spec = tmp_path / "deploy" / "kiln.yaml"
    shutil.copytree(EXAMPLE, spec.parent)
    gain = (("          - {profile: 3g.40gb, serves: chat}\n          - {profile: 2g.20gb, serves: coder}\n"
             "          - {profile: 1g.10gb, serves: intent}\n",
             "          - {profile: 4g.40gb, serves: chat}\n          - {profile: 3g.40gb, serves: chat}\n"),)
    before = validate_path(spec).resolved.pools
    spec.write_text(_edited(gain), encoding="utf-8")
    moves = shape_moves(before, validate_path(spec).resolved.pools)
    assert [(m.shape, m.before.name, m.after.name, m.old_name_on) for m in moves] == [
        ("3g.40gb", "chat-h100-pool", "chat-h100-pool-3g-40gb", "4g.40gb")]
    spec.write_text(_edited(()), encoding="utf-8")
    assert main(["lock", str(spec)]) == ExitCode.OK
    spec.write_text(_edited(gain), encoding="utf-8")
    names = {w.name: w.mig_profile for w in validate_path(spec).resolved.pools["h100-pool"].workloads
             if w.model == "chat"}
    assert names == {"chat-h100-pool": "3g.40gb", "chat-h100-pool-4g-40gb": "4g.40gb"}


def test_a_dynamo_image_bump_says_the_workers_roll_for_their_rebuilt_images(tmp_path: Path) -> None:
    """Dynamo's runtime image is the frontend's and the base of every pool's serving image. The DGD's
    parameters show the frontend's new image only: its line said "the workers keep running" while
    the rebuilt serving images rolled every worker. The target now reads which images were rebuilt
    (the dependencies' keys): each worker's line names its pool's, as the simulation rolls them."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    base = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text)
    head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited_text(text, (("1" * 64, "2" * 64),)))
    sim, = change_simulations(base, head)
    rolls = {d.detail.split(":", 1)[0]: d.detail for d in host_disruptions(base, head) if d.kind == "workload-roll"}
    workers = {n for n in rolls if "/worker-" in n}
    assert sim.result.completed and workers == {e[2] for e in sim.result.events if e[0] == "workload-roll"} == \
        {"big/worker-b200-pool", "chat/worker-h100-pool", "coder/worker-h100-pool", "intent/worker-h100-pool"}
    # each model has its own serving image on a pool (image/<pool>/<model>): the line names both
    assert all(rolls[n].endswith(f"({n.split('/', 1)[0]}'s serving image on {n.split('worker-', 1)[1]} rebuilt)")
               for n in workers)
    assert all("keep running" not in rolls[f"{m}/frontend"] for m in ("big", "chat", "coder", "intent"))


def test_a_model_joining_a_shared_pool_rolls_no_other_models_pods(tmp_path: Path) -> None:
    """intent takes B200 GPU 5 beside big (GPUs 0-3) and chat (4). The pool's serving image held
    every Triton model and options file of the pool (triton-repo/b200-pool, image/b200-pool), so
    intent joining rebuilt it and rolled big's and chat's pods, which load their own model only
    (--load-model, their own command). A pool's image is now per model (image/<pool>/<model>):
    intent's is new, big's and chat's are the same digests, and only intent's workload starts.
    (On Dynamo a model joining a pool adds a worker component, which the webhook refuses: K855.)"""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import base_text

    text = base_text("deployment")
    one, two = _edited_text(text, _b200(("chat", 4))), _edited_text(text, _b200(("chat", 4), ("intent", 5)))
    base, head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", one), graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", two)
    sim, = change_simulations(base, head)
    assert sim.result.completed and [e for e in sim.result.events if e[0] in ("workload-roll", "new")] == \
        [("new", "b200-pool", "intent-b200-pool")]
    assert all(base.keys[f"image/b200-pool/{m}"] == head.keys[f"image/b200-pool/{m}"] for m in ("big", "chat"))
    assert "image/b200-pool/intent" in head.keys and "image/b200-pool/intent" not in base.keys
    assert [d.detail.split(":", 1)[0] for d in host_disruptions(base, head) if d.kind == "workload-roll"] == \
        ["intent-b200-pool"]


def test_another_models_serving_settings_roll_no_pod_of_this_one(tmp_path: Path) -> None:
    """intent's max_batch_size on the shared H100 pool changes intent's part of the Triton repository;
    it rebuilt the pool's one image and rolled chat's and coder's 64 pods with intent's 32. Now
    intent's own image is rebuilt and intent alone rolls."""
    from compiler.gitops.semplan import host_disruptions

    base = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a")
    head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(
        (("limits: {max_batch_size: 4, max_input_len: 512", "limits: {max_batch_size: 8, max_input_len: 512"),)))
    sim, = change_simulations(base, head)
    assert sim.result.completed and sim.result.events == [("workload-roll", "h100-pool", "intent-h100-pool")]
    assert base.keys["triton-repo/h100-pool/intent"] != head.keys["triton-repo/h100-pool/intent"]
    line, = [d.detail for d in host_disruptions(base, head) if d.kind == "workload-roll"]
    assert line.startswith("intent-h100-pool: ") and line.endswith("(intent's serving image on h100-pool rebuilt)")


def test_a_roll_line_never_promises_more_than_the_simulation_keeps(tmp_path: Path) -> None:
    """Review N1/N4: the workload line's "at least 24 of 32 stay ready" came from the rollout arithmetic
    alone, while the re-layout Job evicts a node's pods beside the roll: intent falls to 16 of 32 for
    30 minutes on one changed MIG profile (its PodDisruptionBudget allows 8 at a time, the roll takes
    8 more), and to 0 of 224 on the `single` flip. The line now says the simulated figure and why."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import assert_lines_agree

    for edit, said in (("onefield", "; simulated: lowest 16 of 32 for 30m00s, while the re-layout Job evicts node "
                                    "h100-pool-1"),
                       ("single", "; simulated: lowest 0 of 224 for 10m00s, while the re-layout Job evicts node "
                                  "h100-pool-3")):
        base = graph_of(EXAMPLE / "kiln.yaml", tmp_path / edit / "a")
        head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / edit / "b", _edited(EDITS[edit]))
        sim, = change_simulations(base, head)
        lines = sim.annotate(host_disruptions(base, head))
        line, = [d.detail for d in lines if d.kind == "workload-roll"]
        assert line.startswith("intent-h100-pool: ") and line.endswith(said), (edit, line)
        assert_lines_agree(sim, lines, edit)
        # without the simulated figure the matrix's check refuses the line
        bare = [replace(d, detail=d.detail.split("; simulated:", 1)[0]) for d in lines]
        with pytest.raises(AssertionError):
            assert_lines_agree(sim, bare, edit)


def test_a_namespace_move_is_refused_at_the_field_with_what_it_does(repo: GitRepo, capsys) -> None:
    """Review N5: a namespace move planned "nothing disrupted" and "Disruption: no host or GPU changes"
    beside four K859s at 1:1 with generic help, and no word of the Services' new DNS names; and a roll
    changed with it (coder's source) said "replaced 8 at a time" while the controllers prune and
    create. Each workload's line is now the move, counted as disruption, and K956 at
    kubernetes.namespace says the outage, the new DNS names and how to move safely."""
    (repo.root / "deploy" / "kiln.yaml").write_text(_edited(NAMESPACE), encoding="utf-8")
    assert main(["plan", "deploy/kiln.yaml", "--base", "main"]) == ExitCode.ERRORS
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "[K956]" in ln)
    assert line.startswith("deploy/kiln.yaml:94:14: error: the Kubernetes namespace changes from 'inference' to "
                           "'serving'")  # kubernetes.namespace's value
    assert "no ready pod (simulated): big from +0s for 10m00s" in line
    assert "chat.inference.svc -> chat.serving.svc" in line and "[K859]" not in out
    assert "help: keep `namespace: inference`; or move in steps: serve the models from 'serving' beside" in out
    assert "nothing disrupted" not in out and "2 node pools disrupted" in out
    assert "Disruption: no host or GPU changes" not in out
    moves = [ln for ln in out.splitlines() if ": workload-move: " in ln]
    assert len(moves) == 4 and ("h100-pool (node pool): workload-move: coder-h100-pool: moves from namespace inference "
                                "to serving: deleted in inference (Argo CD prunes it, its 32 pod(s) stop at once) and "
                                "created in serving") in out


@pytest.mark.parametrize("runtime", ["deployment", "dynamo"])
def test_a_namespace_move_with_a_roll_is_planned_as_the_move(tmp_path: Path, runtime: str) -> None:
    """The edit matrix's pair `models.coder.source.huggingface + kubernetes.namespace`: the source alone
    rolls coder, but in another namespace the workload is another object, pruned and created."""
    from compiler.gitops.semplan import host_disruptions
    from tests.k8s_edit_matrix import assert_lines_agree, base_text

    text = base_text(runtime)
    moved = _edited_text(text, NAMESPACE + (("  coder:\n    source: {huggingface: Qwen/Qwen3-8B,",
                                                  "  coder:\n    source: {huggingface: Qwen/Qwen3-8Bx,"),))
    base, head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text), graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", moved)
    sim, = change_simulations(base, head)
    lines = sim.annotate(host_disruptions(base, head))
    coder = [d for d in lines if d.detail.startswith("coder")]
    assert coder and all(d.kind == "workload-move" and "moves from namespace inference to serving" in d.detail
                         for d in coder)
    assert not [d for d in lines if d.kind == "workload-roll"]
    assert_lines_agree(sim, lines, runtime)
    # the Services K956 names: Kiln's, or the frontend Service Dynamo's operator creates for each DGD
    service = "coder" if runtime == "deployment" else "coder-frontend"
    assert (service, "inference", "serving") in sim.moved_services()


def test_a_strategy_flip_says_so_in_k859_and_beside_the_relayout(tmp_path: Path) -> None:
    """Review N4: the `single` flip's K859 gave the generic help, and the node-relayout line left the
    strategy change out when the layout changed too (an `elif` after the layout's)."""
    from compiler.gitops.semplan import host_disruptions

    base = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a")
    head = graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", _edited(SINGLE))
    sim, = change_simulations(base, head)
    (code, _, help_), = [x for x in sim.diagnostics() if x[0] == "K859"]
    assert help_.startswith("the change flips the GPU Operator's MIG strategy mixed -> single")
    assert "`kubernetes.mig_strategy: mixed`" in help_
    relayout, = [d.detail for d in host_disruptions(base, head) if d.kind == "node-relayout"]
    assert relayout.startswith("layout kiln-0ee2259fad -> kiln-5f3f547bf3") and \
        "; MIG strategy mixed -> single: apply node-layer/clusterpolicy-patch.yaml" in relayout
    # the strategy kept, nothing flips: the model keeps its pods on the pool
    kept, = change_simulations(base, graph_of(EXAMPLE / "kiln.yaml", tmp_path / "c", _edited(SINGLE + (
        ("  namespace: inference\n", "  namespace: inference\n  mig_strategy: mixed\n"),))))
    assert not kept.result.strategy and "intent" not in kept.floor_breaches()


def test_a_model_below_the_floor_its_budgets_declare_is_k450_with_its_cause(tmp_path: Path) -> None:
    """Issue 32: one changed MIG profile takes intent to 16 of its 32 pods on h100-pool for 30 minutes,
    while its PodDisruptionBudgets declare a floor of 24 (32 less a node batch's 8): the plan said so
    only on the roll line. It is now K450, a warning with the numbers, the re-layout Job as the cause
    and that cause's fix; an image bump (24 of 32, at the floor) has none; where a model has no ready
    pod at all (the `single` flip) K859 says it and K450 does not repeat it."""
    from compiler.checks import get_rule
    from compiler.diagnostics import Severity

    assert get_rule("k450").severity == Severity.WARNING
    onefield = _sim(tmp_path / "onefield", ONEFIELD)
    assert onefield.result.floors["h100-pool"]["intent"] == 24
    (code, message, help_), = [d for d in onefield.diagnostics() if d[0] == "K450"]
    assert message == ("model 'intent' on node pool 'h100-pool': lowest 16 of 32 ready from +3m00s for 30m00s, "
                       "below the floor of 24 its PodDisruptionBudgets declare, while the re-layout Job evicts "
                       "node h100-pool-1")
    assert "another device shape or node pool" in help_ and "node_pool.max_unavailable" in help_
    image = _sim(tmp_path / "image", IMAGE)
    assert image.result.floors["h100-pool"] == {"chat": 24, "coder": 24, "intent": 24}
    assert [d[0] for d in image.diagnostics()] == []
    single = _sim(tmp_path / "single", SINGLE)
    assert [(d[0], d[1].split("'")[1]) for d in single.diagnostics()] == [("K859", "intent")]
    # doubling big's tp on the full B200 pool (4 x tp4 -> 2 x tp8, the lock on the base): 1 of 4 old pods
    # for a load, below the floor of a node batch (2 of 4: the revisions' floors compared in GPUs)
    tp, _, _ = _locked_sims(tmp_path / "tp", _edited(TP4), _edited(()))
    assert tp.result.completed and tp.result.floors["b200-pool"]["big"] == 2
    (code, message, help_), = tp.diagnostics()
    assert code == "K450" and message.startswith("model 'big' on node pool 'b200-pool': lowest 1 of 4 ready from "
                                                 "+0s for 20m00s, below the floor of 2 ")
    assert "rolling.go" in message and "maintenance window" in help_


def test_a_dynamo_worker_below_its_floor_is_k450(tmp_path: Path) -> None:
    """Dynamo's `onefield`: the workers' budgets (by model, pool and shape) declare the floor too."""
    from tests.k8s_edit_matrix import base_text

    text = base_text("dynamo")
    sim, = change_simulations(graph_of(EXAMPLE / "kiln.yaml", tmp_path / "a", text),
                              graph_of(EXAMPLE / "kiln.yaml", tmp_path / "b", text.replace(*ONEFIELD[0])))
    low = sim.result.pool_low["h100-pool"]["intent"][0]
    floor = sim.result.floors["h100-pool"]["intent"]
    below = [d for d in sim.diagnostics() if d[0] == "K450" and "'intent'" in d[1]]
    assert bool(below) == (0 < low < floor), (low, floor, sim.diagnostics())
    assert low < floor and below and f"lowest {low} of 32" in below[0][1] and f"floor of {floor}" in below[0][1]
