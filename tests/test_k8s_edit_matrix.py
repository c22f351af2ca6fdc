"""Issue 32's generated edit matrix, a seeded part (tests/k8s_edit_matrix.py; the whole of it:
benchmarks/bench_k8s_edit_matrix.py): spec fields of examples/k8s-two-pools that reach the
Kubernetes tree, changed one at a time and in pairs, on both runtimes; for each the simulator runs
the change and the test asserts that no update is refused by the API server, that the rollout
completes or the plan refuses it (K858), that every model keeps a ready pod or the plan says when
and for how long it has none (K859), and that the plan's text is the simulation's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.k8s_edit_matrix import RUNTIMES, check, pairs, single_edits

SEED, LEAVES, PAIRS = 32, 6, 2


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_seeded_edits_apply_or_are_refused(runtime: str, tmp_path: Path) -> None:
    singles = single_edits(runtime, tmp_path / "gen", sample=LEAVES, seed=SEED)
    assert singles, "the sample holds no field that reaches the tree"
    outcomes = {}
    for i, edit in enumerate(singles + pairs(singles, PAIRS, SEED)):
        outcomes[edit.name] = check(edit, tmp_path / f"e{i}")[0]
    assert all(o in ("completes", "invalid") or o.startswith("refused") for o in outcomes.values()), outcomes


def test_the_matrix_catches_what_the_review_found(tmp_path: Path) -> None:
    """Edits the review named are in the generated space and end as it says: a namespace rename
    takes every model to zero (N5, refused K859); a pool selector no node carries sticks (K858)."""
    from tests.k8s_edit_matrix import Edit

    ns = Edit("deployment", ((("kubernetes", "namespace"), "serving"),))
    outcome, sim = check(ns, tmp_path / "ns")
    assert outcome.startswith("refused") and "K859" in outcome and sim.result.completed
    sel = Edit("deployment", ((("hosts", "b200-pool", "node_pool", "selector", "kiln.io/pool"), "elsewhere"),))
    outcome, sim = check(sel, tmp_path / "sel")
    assert outcome == "refused K858" and "didn't match Pod's node affinity/selector" in sim.result.stuck
    # K858's fix names the selector, not a rollout's room or the lock
    (help_text,) = [h for c, _, h in sim.diagnostics() if c == "K858"]
    assert help_text.startswith("no node carries node pool 'b200-pool''s node_pool.selector") and "kiln lock" not in help_text


# review N2's `tp`: big tp 8 -> 4 on its two full B200 nodes (2 x 8 GPUs -> 4 x 4), as matrix edits
TP4 = ((("models", "big", "parallelism", "tp"), 4),
       (("hosts", "b200-pool", "gpus"), [{"index": [0, 1, 2, 3], "serves": "big"},
                                         {"index": [4, 5, 6, 7], "serves": "big"}]))


@pytest.mark.parametrize("runtime,expected", [("deployment", "completes"), ("dynamo", "refused K858"),
                                              ("grove", "completes")])
def test_halving_tp_completes_on_deployments_and_is_refused_on_dynamo(runtime: str, expected: str,
                                                                      tmp_path: Path) -> None:
    """With the base's lock the Deployment frees a node first (k8s_deployment.reshape_unavailable)
    and holds big at 1 of 2 pods, the pool's declared floor. Dynamo's managed rolling update stays
    stuck (K858): its pace is in the hashed pod template, so a reshape pace would roll every worker
    again when set back. Grove's PodClique deletes each old pod before creating its replacement
    (sim/grove.py), which frees a node by itself."""
    from tests.k8s_edit_matrix import Edit

    outcome, sim = check(Edit(runtime, TP4), tmp_path)
    assert outcome == expected, sim.result.stuck
    if runtime == "dynamo":
        assert "Insufficient nvidia.com/gpu" in sim.result.stuck
    else:
        assert sim.result.end["big"] == 4
    if runtime == "deployment":
        assert sim.result.low["big"][0] == 1


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_lowest_is_the_fewest_serving_pods_on_each_rollout_path(runtime: str, tmp_path: Path) -> None:
    """The plan's "lowest" per model is the fewest pods Ready and not being deleted at any moment of
    the simulation, sampled after every controller action (k8s_edit_matrix.serving_lows, asserted by
    check() on every matrix edit): on rolling.go's ReplicaSets, Dynamo's worker generations and
    Grove's PodClique alike. A chat-only pod template change rolls chat on each path, taking pods
    out: a Deployment 8 at a time, Dynamo and Grove one."""
    from tests.k8s_edit_matrix import Edit

    edit = Edit(runtime, ((("models", "chat", "serving", "max_queue_size"), 256),))
    outcome, sim = check(edit, tmp_path / "chat")
    assert outcome == "completes"
    assert sim.result.low["chat"][0] == {"deployment": 24}.get(runtime, 31) < sim.result.before["chat"]
