"""The change simulator's ported controller rules (compiler/targets/kubernetes/sim/), each pinned on
the upstream's own test cases where they exist (cited per test), and the review's defects
(shared/reference/k8s/controllers-review-2026-12-05.md) as the rules reproduce them."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from compiler.targets.kubernetes.sim import (
    argocd,
    devices,
    disruption,
    migmanager,
    podsecurity,
    rbac,
    scheduler,
    simulate,
    tree,
)
from compiler.targets.kubernetes.sim import deployment as dc
from compiler.targets.kubernetes.sim import dynamo as dyn
from compiler.targets.kubernetes.sim.report import ChangeSimulation
from compiler.targets.kubernetes.sim.model import (
    PoolLayout,
    PoolNodes,
    Revision,
    Workload,
)


# --- kubernetes pkg/controller/deployment/rolling_test.go ----------------------------------------------
@pytest.mark.parametrize("replicas,surge,old,new,expected", [
    (10, 0, 10, 0, None),  # should not scale up
    (10, 2, 10, 0, 2),
    (10, 2, 5, 0, 7),
    (10, 2, 10, 2, None),
    (10, 2, 2, 11, 10),  # should scale down
])
def test_reconcile_new_replica_set(replicas, surge, old, new, expected) -> None:
    """TestDeploymentController_reconcileNewReplicaSet (maxUnavailable 0)."""
    n, o = dc.RS("new", new, 0, 2), dc.RS("old", old, 0, 1)
    assert dc.reconcile_new(replicas, surge, 0, [n, o], n) == expected


@pytest.mark.parametrize("replicas,unavail,old,new,ready_old,ready_new,scaled,expected_old", [
    (10, 0, 10, 0, 10, 0, True, 9),
    (10, 2, 10, 0, 10, 0, True, 8),
    (10, 2, 10, 0, 8, 0, True, 8),  # unhealthy replicas of the old RS cleaned up
    (10, 2, 10, 0, 9, 0, True, 8),  # one unhealthy cleaned up, one ready scaled down
    (10, 2, 8, 2, 8, 0, False, 8),  # the new RS's unavailable pods block a further scale-down
])
def test_reconcile_old_replica_sets(replicas, unavail, old, new, ready_old, ready_new, scaled, expected_old) -> None:
    """TestDeploymentController_reconcileOldReplicaSets (maxSurge 0)."""
    o, n = dc.RS("old", old, ready_old, 1), dc.RS("new", new, ready_new, 2)
    count = dc.reconcile_old(replicas, 0, unavail, [o, n], [o], n)
    assert (count > 0) == scaled and o.replicas == expected_old


@pytest.mark.parametrize("old,ready,max_cleanup,expected", [(10, 8, 1, 1), (10, 8, 3, 2), (10, 8, 0, 0), (10, 10, 3, 0)])
def test_cleanup_unhealthy_replicas(old, ready, max_cleanup, expected) -> None:
    """TestDeploymentController_cleanupUnhealthyReplicas."""
    assert dc.cleanup_unhealthy([dc.RS("old", old, ready)], max_cleanup) == expected


@pytest.mark.parametrize("replicas,unavail,ready,old,expected_old", [
    (10, 0, 10, 10, 9), (10, 2, 10, 10, 8), (10, 2, 8, 10, 10), (10, 2, 1, 10, 10)])
def test_scale_down_old_replica_sets_for_rolling_update(replicas, unavail, ready, old, expected_old) -> None:
    """TestDeploymentController_scaleDownOldReplicaSetsForRollingUpdate (its error case, an old RS of
    0 replicas with 10 ready pods, is a state the controller cannot reach and is left out)."""
    o = dc.RS("old", old, ready)
    dc.scale_down_old(replicas, 0, unavail, [o], [o])
    assert o.replicas == expected_old


def test_fenceposts_round_surge_up_and_unavailable_down() -> None:
    """deployment_util.go ResolveFenceposts: 25%/25% of 10 -> 3 and 2; 0/0 -> 0 and 1."""
    assert dc.resolve_fenceposts("25%", "25%", 10) == (3, 2)
    assert dc.resolve_fenceposts(0, 0, 4) == (0, 1)
    assert dc.max_unavailable(0, 0, 1) == 0 and dc.max_unavailable(2, 0, 5) == 2


def test_review_n2_a_full_pool_with_more_replicas_never_progresses() -> None:
    """N2: replicas 2 -> 4 on full nodes, maxSurge 0 / maxUnavailable 1: the new RS gets 2 pods (which
    stay Pending); the old RS may not lose one (available 2 <= minAvailable 3)."""
    old, new = dc.RS("old", 2, 2, 1), dc.RS("new", 0, 0, 2)
    assert dc.rollout_rolling(4, 0, 1, [old], new) == "up" and new.replicas == 2
    assert dc.rollout_rolling(4, 0, 1, [old], new) == "" and old.replicas == 2


# --- NVIDIA gpu-feature-discovery internal/lm/mig-strategy_test.go TestMigStrategySingleLabels ---------
@pytest.mark.parametrize("gpus,product,count", [
    ([Counter()], "MOCKMODEL", 1),  # single non-mig device
    ([Counter(), Counter()], "MOCKMODEL", 2),  # multiple non-mig devices
    ([Counter({"1g.1gb": 1})], "MOCKMODEL-MIG-1g.1gb", 1),  # single mig-enabled device
    ([Counter({"1g.1gb": 1}), Counter({"1g.1gb": 1})], "MOCKMODEL-MIG-1g.1gb", 2),
    ([None], "MOCKMODEL-MIG-INVALID", 0),  # empty mig devices
    ([Counter({"1g.1gb": 1, "3g.4gb": 1})], "MOCKMODEL-MIG-INVALID", 0),  # mixed mig config
    ([Counter({"1g.1gb": 1}), Counter()], "MOCKMODEL-MIG-INVALID", 0),  # mig enabled and disabled
    ([Counter({"1g.1gb": 1}), Counter(), None], "MOCKMODEL-MIG-INVALID", 0),
])
def test_single_strategy_labels(gpus, product, count) -> None:
    assert devices.product_label("MOCKMODEL", "single", gpus) == product
    assert devices.advertised("single", gpus)[devices.GPU] == count


def test_mixed_strategy_names_each_profile() -> None:
    gpus = devices.gpus_of([{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "1g.10gb": 4}},
                            {"devices": [1], "mig-enabled": False}], 2)
    assert devices.advertised("mixed", gpus) == Counter({"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 1,
                                                         "nvidia.com/gpu": 1})
    assert devices.product_label("P", "mixed", gpus) == "P"
    me = devices.gpus_of([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb+me": 1}}], 1)
    assert devices.advertised("mixed", me) == Counter({"nvidia.com/mig-1g.10gb.me": 1})  # found by the edit matrix


# --- kube-scheduler filters ---------------------------------------------------------------------------
def test_scheduler_filters_cordon_taints_selector_and_extended_resources() -> None:
    gpu = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    n = scheduler.NodeView("a", {"pool": "x"}, Counter({"nvidia.com/gpu": 8}), Counter({"nvidia.com/gpu": 6}),
                           taints=[scheduler.Taint("nvidia.com/gpu", "present")])
    assert scheduler.fits(n, {"pool": "x"}, gpu, {"nvidia.com/gpu": 2}) is None
    assert scheduler.fits(n, {"pool": "x"}, gpu, {"nvidia.com/gpu": 3}) == "Insufficient nvidia.com/gpu"
    assert scheduler.fits(n, {"pool": "y"}, gpu, {}) == "node(s) didn't match Pod's node affinity/selector"
    assert "untolerated taint" in scheduler.fits(n, {"pool": "x"}, [], {})
    n.unschedulable = True
    assert scheduler.fits(n, {"pool": "x"}, gpu, {}) == "node(s) were unschedulable"


# --- the Eviction API under a budget -----------------------------------------------------------------
def _pods(ready: int, pending: int = 0) -> list[disruption.PodView]:
    return ([disruption.PodView(f"r{i}", "ns", {"w": "a"}, ("a", ready + pending), "Running", True) for i in range(ready)]
            + [disruption.PodView(f"p{i}", "ns", {"w": "a"}, ("a", ready + pending), "Pending", False) for i in range(pending)])


def test_eviction_honours_disruptions_allowed_and_ignores_pending_pods() -> None:
    budget = disruption.Budget("ns/a", {"w": "a"}, 1)
    pods = _pods(3, 1)  # expected 4, desiredHealthy 3, healthy 3: none allowed
    assert disruption.status(budget, pods) == (3, 3, 0)
    assert disruption.evict(pods[0], [budget], pods, {}).startswith("429")
    assert disruption.evict(pods[3], [budget], pods, {}) is None  # Pending: canIgnorePDB
    pods = _pods(4)
    seen: dict = {}
    assert disruption.evict(pods[0], [budget], pods, seen) is None
    assert disruption.evict(pods[1], [budget], pods, seen).startswith("429")  # decremented in the round
    two = [budget, disruption.Budget("ns/b", {"w": "a"}, 1)]
    assert disruption.evict(pods[0], two, pods, {}).startswith("500")


# --- mig-manager --------------------------------------------------------------------------------------
def test_mig_manager_acts_only_on_a_changed_label_value() -> None:
    """Review N8 (main.go 572-577): relabelling a `failed` node with the same value starts nothing."""
    node = migmanager.MigNode("n", "old", "old")
    assert migmanager.on_label(node, "new", 0, 120) and node.state == "pending"
    assert migmanager.finish(node, {"new": []}, changed_gpus_held=True) == "failed"
    assert not migmanager.on_label(node, "new", 200, 120) and node.busy_until is None
    node2 = migmanager.MigNode("m", "old", "old")
    migmanager.on_label(node2, "gone", 0, 120)
    assert migmanager.finish(node2, {"old": []}, False) == "failed"  # not in the mounted config


# --- Argo CD's order ----------------------------------------------------------------------------------
def _obj(kind: str, name: str, wave: int | None = None, options: str | None = None) -> dict:
    ann = {}
    if wave is not None:
        ann[argocd.WAVE] = str(wave)
    if options:
        ann[argocd.OPTIONS] = options
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "annotations": ann}}


def test_prune_waves_are_reversed_and_prune_last_goes_last() -> None:
    """Review N17 (sync_context.go 911-938): a removed Deployment (wave 0) and its budget (wave -2) are
    pruned at -2 and 0; a PruneLast object after every wave."""
    live = {argocd.key_of(o): o for o in (_obj("Deployment", "d"), _obj("PodDisruptionBudget", "d", -2),
                                           _obj("ConfigMap", "keep", 0, "PruneLast=true"))}
    desired = {argocd.key_of(o): o for o in (_obj("Job", "j", -1), _obj("Deployment", "e"))}
    waves = argocd.plan(live, desired)
    where = {(t.key[0], t.prune): w for w, ts in waves for t in ts}
    assert where[("Deployment", True)] == -2 and where[("PodDisruptionBudget", True)] == 0
    assert where[("Job", False)] == -1 and where[("Deployment", False)] == 0
    assert waves[-1][1][0].key[2] == "keep" and waves[-1][1][0].prune


def test_sync_options_are_read_as_argo_cd_reads_them() -> None:
    """resource/annotations.go HasAnnotationOption: comma-separated, trimmed, whole values."""
    assert argocd.has_option(_obj("ConfigMap", "a", options="PruneLast=true, Prune=false"), argocd.DISABLE_PRUNE)
    assert argocd.has_option(_obj("ConfigMap", "a", options="Prune=false,PruneLast=true"), argocd.PRUNE_LAST)
    assert not argocd.has_option(_obj("ConfigMap", "a", options="Prune=falsey"), argocd.DISABLE_PRUNE)
    assert not argocd.has_option(_obj("ConfigMap", "a"), argocd.DISABLE_PRUNE)


def test_prune_candidates_and_prune_false_on_the_live_object() -> None:
    """Review N9 (reconcile.go Reconcile, sync_context.go pruneObject): a tracked live object the tree
    no longer holds is a prune task, an untracked one (written by another client) is not, and a desired
    object never is; pruneObject reads Prune=false on the LIVE object, as the wave finds it."""
    live = {argocd.key_of(o): o for o in (_obj("ConfigMap", "tracked"), _obj("ConfigMap", "untracked"),
                                           _obj("ConfigMap", "kept"))}
    desired = {argocd.key_of(o): o for o in (_obj("ConfigMap", "kept", options="Prune=false"),)}
    waves = argocd.plan(live, desired, tracked={("ConfigMap", "ns", "tracked"), ("ConfigMap", "ns", "kept")})
    tasks = {(t.key[2], t.prune) for _, ts in waves for t in ts}
    assert tasks == {("tracked", True), ("kept", False)}
    assert argocd.prune_result(_obj("ConfigMap", "x", options="Prune=false")) == ("PruneSkipped", "ignored (no prune)")
    assert argocd.prune_result(_obj("ConfigMap", "x")) == ("Pruned", "pruned")
    assert argocd.prune_result(_obj("ConfigMap", "x"), prune=False)[0] == "PruneSkipped"


def test_a_waves_prunes_run_before_its_applies_and_prune_last_after_the_last_wave() -> None:
    """sync_context.go runTasks ("prune first"); getSyncTasks: PruneLast goes to the last Sync-phase
    wave + 1, over every desired object's wave."""
    live = {argocd.key_of(o): o for o in (_obj("Service", "old", -1), _obj("ConfigMap", "opts", -1, "PruneLast=true"))}
    desired = {argocd.key_of(o): o for o in (_obj("Job", "j", -1), _obj("Deployment", "d", 2))}
    waves = argocd.plan(live, desired)
    first = dict(waves)[-1]
    assert [(t.key[2], t.prune) for t in first] == [("old", True), ("j", False)]
    assert waves[-1][0] == 3 and waves[-1][1][0].key[2] == "opts"


def test_respect_ignore_differences_keeps_the_live_data() -> None:
    """argo-cd controller/sync.go normalizeTargetResources: with RespectIgnoreDifferences the ignored
    fields keep their live values in what the sync applies; a missing live object gets the tree's; a
    difference only there is no apply task (the diff ignores it)."""
    app = {"spec": {"ignoreDifferences": [{"kind": "ConfigMap", "name": "live", "namespace": "ns",
                                           "jsonPointers": ["/data"]}],
                    "syncPolicy": {"syncOptions": [argocd.RESPECT_IGNORE]}}}
    tree = {**_obj("ConfigMap", "live"), "apiVersion": "v1", "data": {"a": "tree"}}
    live = {**_obj("ConfigMap", "live"), "apiVersion": "v1", "data": {"a": "job"}}
    assert argocd.applied(app, tree, live)["data"] == {"a": "job"}
    assert argocd.applied(app, tree, None)["data"] == {"a": "tree"}
    plain = {"spec": {"syncPolicy": {}}}
    assert argocd.applied(plain, tree, live)["data"] == {"a": "tree"}
    assert argocd.plan({argocd.key_of(live): live}, {argocd.key_of(tree): tree}, app=app) == []
    assert argocd.plan({argocd.key_of(live): live}, {argocd.key_of(tree): tree}, app=plain) != []


# --- kubectl's calls against the re-layout Job's Role --------------------------------------------------
def test_kubectl_scale_needs_get_on_the_deployment() -> None:
    """Review N7: the Role of Kiln 7349681 grants deployments list and deployments/scale get, patch."""
    rules = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]},
             {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "patch"]}]
    assert rbac.denied(rules, "scale deployment", "w") == ["get apps/deployments"]
    rules[0]["verbs"].append("get")
    assert rbac.denied(rules, "scale deployment", "w") == []


# --- the engine on small revisions ---------------------------------------------------------------------
def _workload(name: str, replicas: int, gpus: int, template: str, surge=0, unavail=1) -> Workload:
    return Workload(name, "ns", "m", "p", replicas, template, {"w": name, "model": "m"}, {"pool": "p"}, [],
                    {"nvidia.com/gpu": gpus}, surge, unavail, 2700)


def _revision(*workloads: Workload) -> Revision:
    objects = {("Deployment", "ns", w.name): {"kind": "Deployment", "metadata": {"name": w.name}, "t": w.template,
                                              "r": w.replicas} for w in workloads}
    return Revision(objects, {w.key: w for w in workloads}, [], {"ns/m": ("m", {"model": "m"})}, "mixed", {},
                    {"p": PoolLayout("p", {"pool": "p"}, "all-disabled", 2, 1)})


POOL = [PoolNodes("p", 2, 8, None, {"pool": "p"})]


def test_a_template_change_rolls_one_pod_at_a_time_and_completes() -> None:
    r = simulate(_revision(_workload("a", 2, 8, "v1")), _revision(_workload("a", 2, 8, "v2")), POOL, {"m": 300})
    assert r.completed and r.end == {"m": 2} and r.low["m"][0] == 1 and r.duration_s == 600


def test_halving_tp_on_a_full_pool_sticks_and_says_why() -> None:
    """Review N2 end to end: 2 x 8 GPUs -> 4 x 4 GPUs with maxSurge 0 never completes."""
    r = simulate(_revision(_workload("a", 2, 8, "v1")), _revision(_workload("a", 4, 4, "v2")), POOL, {"m": 300})
    assert not r.completed and r.end == {"m": 2}
    assert "Insufficient nvidia.com/gpu" in r.stuck and "ProgressDeadlineExceeded" in r.steps[-1].text
    # with maxUnavailable 2 (the whole old set may go) it completes, through zero
    r = simulate(_revision(_workload("a", 2, 8, "v1")), _revision(_workload("a", 4, 4, "v2", 0, 4)), POOL, {"m": 300})
    assert r.completed and r.end == {"m": 4} and r.low["m"][0] == 0
    # with maxUnavailable 3 (k8s_deployment.reshape_unavailable: 4 - (2 - 1)) it completes, keeping
    # the old pod outside the pool's max_unavailable node for one load
    r = simulate(_revision(_workload("a", 2, 8, "v1")), _revision(_workload("a", 4, 4, "v2", 0, 3)), POOL, {"m": 300})
    assert r.completed and r.end == {"m": 4} and r.low["m"] == (1, 0.0, 300.0) and r.duration_s == 600


@pytest.mark.parametrize("nodes,batch,old_gpus,new_gpus", [
    (2, 1, 8, 4), (2, 1, 8, 2), (2, 1, 4, 2), (4, 1, 8, 4), (4, 2, 8, 4), (4, 1, 4, 1), (3, 2, 8, 2), (2, 2, 8, 4)])
def test_the_reshape_pace_frees_the_batch_and_keeps_the_rest(nodes, batch, old_gpus, new_gpus) -> None:
    """Smaller pods on a full pool (no surge room): the maxUnavailable Kiln emits for a shape change
    (k8s_deployment.unavailable_to_free_nodes) completes through Kubernetes' own arithmetic, and the
    fewest ready pods are the old ones outside the pool's max_unavailable (`batch`) nodes: the floor
    the pool declares, never lower; with the usual pace (a batch's worth of new pods) it sticks."""
    from compiler.targets.kubernetes.k8s_deployment import unavailable_to_free_nodes

    old_per_node, new_per_node = 8 // old_gpus, 8 // new_gpus
    old, new = old_per_node * nodes, new_per_node * nodes
    pools = [PoolNodes("p", nodes, 8, None, {"pool": "p"})]

    def revisions(unavail):
        layout = PoolLayout("p", {"pool": "p"}, "all-disabled", nodes, batch)
        base, head = _revision(_workload("a", old, old_gpus, "v1")), _revision(_workload("a", new, new_gpus, "v2", 0, unavail))
        return (dataclasses.replace(base, pools={"p": layout}), dataclasses.replace(head, pools={"p": layout}))

    unavail = unavailable_to_free_nodes(new, old, old_per_node, batch)
    r = simulate(*revisions(unavail), pools, {"m": 300})
    assert r.completed and r.end == {"m": new}
    assert r.low["m"][0] == old - old_per_node * batch
    if batch < nodes:  # a batch of every node may take every pod: that pace completes, through zero
        assert not simulate(*revisions(new_per_node * batch), pools, {"m": 300}).completed


# --- Dynamo's operator: deploy/operator/internal/controller/dgd_worker_rollout_reconciler.go ------------
@pytest.mark.parametrize("surge,unavail,desired,expected", [
    ("25%", "25%", 4, (1, 1)),  # defaults - no annotations - 25%/25% of 4 = 1/1
    (2, "25%", 4, (2, 1)),  # absolute maxSurge overrides default
    ("25%", 0, 4, (1, 0)),  # absolute maxUnavailable overrides default
    ("50%", "25%", 4, (2, 1)),  # percentage maxSurge - 50% of 4 = 2
    (0, 0, 4, (1, 0)),  # both zero - force surge to 1 for progress
    (0, 1, 4, (0, 1)),  # maxSurge 0 with maxUnavailable 1 - allowed
    ("34%", "25%", 3, (2, 0)),  # percentage surge rounds up - 34% of 3 rounds up to 2
    ("25%", "34%", 3, (1, 1)),  # percentage unavailable rounds down - 34% of 3 rounds down to 1
])
def test_dynamo_resolves_surge_and_unavailable(surge, unavail, desired, expected) -> None:
    """dgd_worker_rollout_reconciler_test.go TestResolveRollingUpdateParams: 0/0 becomes surge 1,
    where the Deployment controller makes it unavailable 1 (the approximation this port replaced)."""
    assert dyn.resolve_params(surge, unavail, desired) == expected
    assert dc.resolve_fenceposts(0, 0, 4) == (0, 1)


@pytest.mark.parametrize("target,dcds,expected", [
    (15, [("a", 15, 15, 1), ("b", 10, 0, 2)], {"a": 15, "b": 0}),  # healthy original kept, unavailable dropped
    (3, [("a", 3, 3, 1), ("b", 1, 1, 2)], {"a": 2, "b": 1}),  # a surplus leaves the oldest first
    (15, [("a", 15, 12, 1), ("b", 10, 0, 2)], {"a": 12, "b": 3}),  # a shortfall is filled from the newest
])
def test_dynamo_spreads_the_old_target_over_old_generations(target, dcds, expected) -> None:
    """dgd_worker_rollout_reconciler_test.go TestAllocateOldWorkerDCDReplicas."""
    assert dyn.allocate_old([dc.RS(n, spec, avail, created) for n, spec, avail, created in dcds], target) == expected


def test_dynamo_sets_both_generations_in_one_pass() -> None:
    """buildRollingUpdateContext computes the old and the new target from one observation: 4 workers,
    1/1, the first pass starts a new worker and retires an old one together; the Deployment
    controller's pass scales the new ReplicaSet up and returns."""
    old, new = dc.RS("old", 4, 4, 1), dc.RS("new", 0, 0, 2)
    assert dyn.targets(4, 1, 1, [old], new) == (3, 1)
    assert dyn.rollout(4, 1, 1, [old], new) and (old.replicas, new.replicas) == (3, 1)
    old, new = dc.RS("old", 4, 4, 1), dc.RS("new", 0, 0, 2)
    assert dc.rollout_rolling(4, 1, 1, [old], new) == "up" and (old.replicas, new.replicas) == (4, 1)


def _worker(name: str, replicas: int, gpus: int, template: str, surge=0, unavail=1) -> Workload:
    w = _workload(name, replicas, gpus, template, surge, unavail)
    w.dynamo, w.progress_deadline_s = True, 10 ** 9  # the operator has no progress deadline
    return w


def test_dynamo_with_no_surge_and_no_unavailable_waits_for_room() -> None:
    """0/0 on a Dynamo worker is surge 1: on a full pool the new worker stays Pending and no old one is
    taken out (the Deployment arithmetic took one out and completed); with a third node it surges and
    completes without losing a worker."""
    r = simulate(_revision(_worker("a", 2, 8, "v1", 0, 0)), _revision(_worker("a", 2, 8, "v2", 0, 0)), POOL,
                 {"m": 300})
    assert not r.completed and r.end == {"m": 2} and r.low["m"][0] == 2
    assert r.stuck.startswith("Dynamo worker a never completes") and "Insufficient nvidia.com/gpu" in r.stuck
    roomy = [PoolNodes("p", 3, 8, None, {"pool": "p"})]
    r = simulate(_revision(_worker("a", 2, 8, "v1", 0, 0)), _revision(_worker("a", 2, 8, "v2", 0, 0)), roomy,
                 {"m": 300})
    assert r.completed and r.end == {"m": 2} and r.low["m"][0] == 2


def _dgd(surge: str = "0", shm: str = "8Gi") -> dict:
    def worker(name: str) -> dict:
        return {"name": name, "type": "worker", "replicas": 2, "sharedMemorySize": shm,
                "podTemplate": {"metadata": {"labels": {"kiln.io/model": "m", "kiln.io/pool": "p"},
                                             "annotations": {"nvidia.com/deployment-rolling-update-max-surge": surge}},
                                "spec": {"containers": [{"name": "main", "image": "i"}]}}}
    return {"metadata": {"name": "m", "namespace": "ns"},
            "spec": {"backendFramework": "trtllm", "components": [
                {"name": "frontend", "type": "frontend", "replicas": 1, "podTemplate": {}},
                worker("worker-a"), {**worker("worker-b"), "replicas": 3}]}}


def test_dynamo_worker_hash_covers_the_pod_template_whole_and_the_shm() -> None:
    """worker_hash.go ComputeDGDWorkersSpecHash: one hash over every worker's podTemplate (its
    annotations too: worker_hash_test.go TestComputeDGDWorkersSpecHashTracksDGDSpecMetadata) and its
    sharedMemorySize; replicas and the frontend are not in it."""
    from compiler.targets.kubernetes.sim import tree

    def templates(o):
        return {w.name: w.template for w in tree.dgd_workloads(o)}
    base = templates(_dgd())
    assert len(set(base.values())) == 1 and set(base) == {"m-worker-a", "m-worker-b"}
    for changed in (_dgd(surge="1"), _dgd(shm="16Gi")):  # one worker's pace, or the shm, rolls both
        assert set(templates(changed).values()).isdisjoint(base.values())
    same = _dgd()
    same["spec"]["components"][1]["replicas"] = 5
    same["spec"]["components"][0]["podTemplate"] = {"spec": {"containers": [{"name": "main", "image": "j"}]}}
    assert templates(same) == base


def test_a_dynamo_pace_change_alone_rolls_every_worker() -> None:
    """The surge/unavailable annotations are in the pod template the worker hash covers: a pool that
    gains room (surge 0 -> 1) rolls every worker of the model; the plan said nothing was disrupted."""
    from compiler.targets.kubernetes.k8s_dgd import DgdParams, Worker, disruptions

    def params(surge: int) -> DgdParams:
        workers = [Worker(component=f"worker-{p}", pool=p, replicas=2, image_action=f"image/{p}",
                          resource="nvidia.com/gpu", count=8, selector={}, gpu_product=None, power_limit_w=None,
                          pod_resources={}, max_surge=surge if p == "b" else 0,
                          max_unavailable=0 if surge and p == "b" else 1) for p in ("a", "b")]
        return DgdParams(model="m", spec_name="s", namespace="ns", version="1.6.1", frontend_image="x",
                         options_action="llmapi-options/m", options_digest="sha256:0", workers=workers)

    items = disruptions(params(0), params(1))
    assert sorted((d.host, d.kind) for d in items) == [("a", "workload-roll"), ("b", "workload-roll")]
    assert "max_surge" in next(d.detail for d in items if d.host == "b")


def test_dynamo_webhook_rules_are_confirmed_for_the_pinned_release() -> None:
    """Review S8: the power rules were marked unconfirmed in 1.6.1; the release's own planner states
    them of its webhook, and main's validateDynamoGraphDeploymentSharedSpecUpdate has them."""
    from compiler.catalog import k8s_controllers

    rules = k8s_controllers.forbidden_updates("1.6.1")
    assert set(rules) == {"component-set", "power-annotation", "power-gpu-count"}
    assert {r.status for r in rules.values()} == {"verified"}


# --- DaemonSet pod security (review 2026-12-05 M10/N3): the golden tree's node-tuning DaemonSets ----------
GOLDEN_TREE = Path(__file__).parent / "golden" / "k8s" / "k8s-two-pools"


def _tuning_change(mutate=None, extra: tuple = ()):
    """The golden tree's node-tuning DaemonSets created on a running fleet (the base: the same tree
    without them), each DaemonSet changed by `mutate` first; `extra` objects join the new tree."""
    objects, values, app = tree.read_dir(GOLDEN_TREE)
    base = tree.revision([o for o in objects if o["kind"] != "DaemonSet"], values, app)
    new_objects = copy.deepcopy(objects) + list(extra)
    for o in new_objects:
        if o["kind"] == "DaemonSet" and mutate is not None:
            mutate(o)
    product = {"h100-pool": "NVIDIA-H100-80GB-HBM3"}  # examples/k8s-two-pools: node_pool.gpu_product, count 8
    pools = [PoolNodes(p.name, p.nodes, 8, product.get(p.name), dict(p.selector),
                       [scheduler.Taint("nvidia.com/gpu", "present")]) for p in base.pools.values()]
    return simulate(base, tree.revision(new_objects, values, app), pools)


def _tuning(o: dict) -> dict:
    return o["spec"]["template"]["spec"]["containers"][0]["securityContext"]


def test_todays_tuning_daemonset_is_admitted_and_its_commands_run() -> None:
    r = _tuning_change()
    assert r.completed, r.stuck
    assert r.tuning_failed == {} and ChangeSimulation(r).diagnostics() == []
    assert not [s for s in r.steps if "gpu-tuning=failed" in s.text]


def test_a_tuning_daemonset_without_privileged_fails_on_every_node() -> None:
    r = _tuning_change(lambda o: _tuning(o).pop("privileged"))
    assert r.completed  # the pods run: the sync does not wait, the nodes say it
    assert set(r.tuning_failed) == {"b200-pool", "h100-pool"}
    assert all("/dev/nvidia*" in why and "requests no GPU" in why for why in r.tuning_failed.values())
    failed = [s for s in r.steps if "kiln.io/gpu-tuning=failed" in s.text]
    objects, values, app = tree.read_dir(GOLDEN_TREE)
    assert {s.pool for s in failed} == {"b200-pool", "h100-pool"}
    assert len(failed) == sum(p.nodes for p in tree.revision(objects, values, app).pools.values())  # one a node
    sim = ChangeSimulation(r)
    assert any(line.startswith("clocks and power NOT applied") for line in sim.pool_lines("b200-pool"))
    assert [(c, m.split(":")[0]) for c, m, _ in sim.diagnostics()] == [  # the plan refuses the change
        ("K858", "node pool 'b200-pool'"), ("K858", "node pool 'h100-pool'")]


@pytest.mark.parametrize("mutate, cause", [
    (lambda o: _tuning(o).update(runAsUser=1000), "runs as uid 1000"),
    # no runAsUser: the image's USER (bitnami/kubectl: 1001), the review's N3
    (lambda o: [_tuning(o).pop("runAsUser"), _tuning(o).pop("runAsNonRoot")], "its image's user (1001)"),
])
def test_a_tuning_daemonset_that_is_not_root_fails_with_its_cause(mutate, cause) -> None:
    r = _tuning_change(mutate)
    assert r.completed and set(r.tuning_failed) == {"b200-pool", "h100-pool"}
    assert all("need root" in why and cause in why for why in r.tuning_failed.values()), r.tuning_failed


def test_a_tuning_daemonset_that_drops_sys_chroot_fails() -> None:
    r = _tuning_change(lambda o: _tuning(o).update(privileged=False, capabilities={"drop": ["ALL"]}))
    assert set(r.tuning_failed) == {"b200-pool", "h100-pool"}
    assert all("needs CAP_SYS_CHROOT" in why for why in r.tuning_failed.values()), r.tuning_failed


@pytest.mark.parametrize("level, forbids", [
    ("baseline", ["privileged", "hostPath volumes (run-nvidia, host-root)"]),
    ("restricted", ["privileged", "hostPath volumes", "runAsNonRoot != true", "seccompProfile"]),
])
def test_a_tuning_daemonset_in_an_enforcing_namespace_is_refused_and_sticks(level, forbids) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "gpu-operator", "labels": {"pod-security.kubernetes.io/enforce": level}}}
    r = _tuning_change(extra=(ns,))
    assert not r.completed and r.stuck_on[0] == "DaemonSet"
    assert f'enforces Pod Security "{level}:v1.34"' in r.stuck and "FailedCreate" in r.stuck
    assert all(f in r.stuck for f in forbids), r.stuck
    assert r.stuck_pool in ("b200-pool", "h100-pool")
    assert [c for c, _, _ in ChangeSimulation(r).diagnostics()] == ["K858"]  # the plan refuses the change
    # its fix is the namespace's Pod Security level, not a rollout's room or the lock
    assert r.stuck_family == "pod-security"
    fix = ChangeSimulation(r).diagnostics()[0][2]
    assert "Pod Security level" in fix and "enforces `privileged`" in fix and "kiln lock" not in fix


def test_pod_security_levels_on_kilns_other_pods() -> None:
    """The re-layout Job runs kubectl only (RBAC, checked above): its pod is restricted-clean; the
    tuning pod is admitted only where the namespace enforces privileged (the GPU Operator's own)."""
    objects, _, _ = tree.read_dir(GOLDEN_TREE)
    job = next(o for o in objects if o["kind"] == "Job")["spec"]["template"]["spec"]
    ds = next(o for o in objects if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert podsecurity.violations(job, "restricted") == []
    assert podsecurity.violations(ds, "privileged") == [] and podsecurity.violations(ds, "baseline")
    script = next(o for o in objects if o["kind"] == "ConfigMap" and "label-nodes.sh" in (o.get("data") or {}))
    assert podsecurity.needs(script["data"]["label-nodes.sh"]) == []  # no nvidia-smi setting, no chroot
    assert podsecurity.level_of("gpu-operator", {}) == "privileged"  # no label: the admission's default
