"""The change matrix (issue 21): each Day-2 edit of the example fleet, rendered before and after,
goes through small models of the controllers written from their sources (tests/k8s_sim.py: GFD and
the device plugin, the MIG manager's label/state machine, Dynamo's update webhook, Argo CD's prune
and sync waves, the scheduler, the Eviction API under PDBs). For every edit: no update is refused
unplanned, no node is left `failed`, no PDB blocks the re-layout for ever, every pod is scheduled at
the end, the serving floor holds (a model never drops below what max_unavailable nodes take), and
`kiln plan`'s disruptions are exactly the simulated ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.gitops.semplan import host_disruptions
from tests.k8s_sim import Cluster, read_tree
from tests.k8s_tree import graph_of, render

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "k8s-two-pools" / "kiln.yaml"
PRODUCTS = {"h100-pool": "NVIDIA-H100-80GB-HBM3", "h100b-pool": "NVIDIA-H100-80GB-HBM3"}
GPUS = {"h100-pool": 8, "h100b-pool": 8, "b200-pool": 8}
H100_MIG = ("          - {profile: 3g.40gb, serves: chat}\n"
            "          - {profile: 2g.20gb, serves: coder}\n"
            "          - {profile: 1g.10gb, serves: intent}\n")
SEVEN = "".join("          - {profile: 1g.10gb, serves: intent}\n" for _ in range(7))
DYNAMO = (('tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.3.0rc29"'),
          ("  runtime: deployment\n", '  runtime: dynamo\n  dynamo: {version: "1.6.1"}\n'),
          ("image: {repository: registry.example.com/inference/fleet}",
           "image:\n  repository: registry.example.com/inference/fleet\n"
           "  base: nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1@sha256:" + "1" * 64))
NEW_POOL = ("  b200-pool:\n", """  h100b-pool:
    deploy: kubernetes
    node_pool: {nodes: 2, selector: {kiln.io/pool: h100b-pool}, gpu_product: NVIDIA-H100-80GB-HBM3}
    gpu: H100-SXM5-80GB
    count: 8
    driver: ">=580.82.07"
    price_per_gpu_hour: 3.0
    gpus:
      - index: [0, 1, 2, 3, 4, 5, 6, 7]
        mig:
          - {profile: 3g.40gb, serves: chat}
          - {profile: 3g.40gb, serves: chat}

  b200-pool:
""")
ONE_PROFILE = ("          - {profile: 1g.10gb, serves: intent}", "          - {profile: 1g.20gb, serves: intent}")
SECOND_SHAPE = ("          - {profile: 1g.10gb, serves: intent}\n",
                "          - {profile: 1g.10gb, serves: intent}\n          - {profile: 1g.10gb, serves: chat}\n")
TP4 = (("parallelism: {tp: 8}", "parallelism: {tp: 4}"),
       ("      - index: [0, 1, 2, 3, 4, 5, 6, 7]\n        serves: big\n",
        "      - index: [0, 1, 2, 3]\n        serves: big\n      - index: [4, 5, 6, 7]\n        serves: big\n"))
IMAGE = ("1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0", "2" * 64)
# chat re-quantized on half the calibration samples: new weights, the same runtime, tokenizer and options
WEIGHTS = ("      calibration: {data: data/calib-chat.jsonl, samples: 512, max_seq_len: 1024}\n    limits: {max_batch_size: 32",
           "      calibration: {data: data/calib-chat.jsonl, samples: 256, max_seq_len: 1024}\n    limits: {max_batch_size: 32")
IN_IMAGE = ("gpu_product: NVIDIA-H100-80GB-HBM3}", "gpu_product: NVIDIA-H100-80GB-HBM3, weights: in-image}")


def _text(edits, dynamo: bool = False) -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    for old, new in (DYNAMO if dynamo else ()) + tuple(edits):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _rev(pairs):
    return tuple((b, a) for a, b in reversed(pairs))


# name -> (edits before, edits after, runtime dynamo)
MATRIX = {
    "one-mig-profile": ((), (ONE_PROFILE,), False),
    "model-gains-a-shape": ((), (SECOND_SHAPE,), False),
    "model-loses-a-shape": ((SECOND_SHAPE,), (), False),
    "add-a-pool": ((), (NEW_POOL,), False),
    "remove-a-pool": ((NEW_POOL,), (), False),
    "add-a-pool-dynamo": ((), (NEW_POOL,), True),
    "power-limit-dynamo": ((), (("power_limit_w: 1000", "power_limit_w: 900"),), True),
    "power-limit": ((), (("power_limit_w: 1000", "power_limit_w: 900"),), False),
    "tp": ((), TP4, False),
    "tp-dynamo": ((), TP4, True),
    "replicas": ((), (("node_pool: {nodes: 4,", "node_pool: {nodes: 6,"),), False),
    "image-bump": ((), (IMAGE,), False),
    "weights-only": ((), (WEIGHTS,), False),
    "weights-only-dynamo": ((), (WEIGHTS,), True),
    "weights-in-image": ((IN_IMAGE,), (IN_IMAGE, WEIGHTS), False),
    "weights-out-of-the-image": ((IN_IMAGE,), (), False),
    "model-gains-a-shape-dynamo": ((), (SECOND_SHAPE,), True),
    "remove-a-pool-dynamo": ((NEW_POOL,), (), True),
    "replicas-dynamo": ((), (("node_pool: {nodes: 4,", "node_pool: {nodes: 6,"),), True),
    "runtime-switch": ((), DYNAMO, False),
    "strategy-switch": (((H100_MIG, SEVEN),), ((H100_MIG, SEVEN), ("  runtime: deployment\n",
                                                                    "  runtime: deployment\n  mig_strategy: mixed\n")), False),
}


def _plan_events(items) -> set:
    out = set()
    for d in items:
        if not d.pool:
            continue
        name = d.detail.split(":", 1)[0]
        if d.kind == "node-relayout":
            out.add(("node-relayout", d.host))
        elif d.kind == "workload-roll":
            out.add(("new" if d.detail.split(": ", 1)[1].startswith("new,") else "workload-roll", d.host, name))
        elif d.kind in ("replicas", "workload-delete"):
            out.add((d.kind, d.host, name))
        elif d.kind == "recreate":
            out.add(("recreate", d.host, d.detail.split()[1]))
    return out


@pytest.mark.parametrize("edit", sorted(MATRIX))
def test_change_applies_through_the_controllers(edit: str, tmp_path: Path) -> None:
    before_edits, after_edits, dynamo = MATRIX[edit]
    base_g = graph_of(EXAMPLE, tmp_path / "a", _text(before_edits, dynamo))
    head_g = graph_of(EXAMPLE, tmp_path / "b", _text(after_edits, dynamo))
    before, after = read_tree(render(base_g, tmp_path / "a")), read_tree(render(head_g, tmp_path / "b"))

    cluster = Cluster(before, PRODUCTS, GPUS)
    assert not cluster.pending(), "the earlier revision itself does not schedule"  # GFD-true selectors
    full = {m: sum(1 for p in cluster.pods if p.model == m) for m in {p.model for p in cluster.pods}}
    # what one re-layout batch may take from a model: its pods on the fullest node times the batch
    per_node = {m: max(sum(1 for p in cluster.pods if p.model == m and p.node == n) for n in cluster.nodes)
                for m in full}
    batch = max(b for _, _, _, b in after.pools.values())
    cluster.floor = {}
    for pool, (_, _, count, _) in after.pools.items():  # nodes the edit adds join the cluster
        have = [n for n in cluster.nodes.values() if n.pool == pool]
        for i in range(len(have), count):
            from tests.k8s_sim import Node
            n = Node(f"{pool}-{i}", pool, dict(after.pools[pool][0]), "all-disabled")
            cluster.nodes[n.name] = n
    cluster.refresh_labels()
    cluster.sync(after)  # asserts inside: no eviction refused for ever, no node left failed

    assert all(n.state == "success" and not n.cordoned for n in cluster.nodes.values())
    assert not cluster.pending(), [(p.workload, p.limits, p.selector) for p in cluster.pending()][:3]
    # the floor: a re-layout batch takes at most max_unavailable nodes' pods of a model it keeps
    recreated = {e[2] for e in cluster.events if e[0] == "recreate"}
    for model, n in full.items():
        if model in recreated or any(e[0] in ("workload-delete", "workload-roll") and e[2].startswith(model)
                                     for e in cluster.events):
            continue  # planned: a recreate, a pruned or a rolled workload (its shape changed)
        assert cluster.floor.get(model, n) >= n - per_node[model] * batch, (model, cluster.floor.get(model), n)

    planned = _plan_events(host_disruptions(base_g, head_g))
    simulated = set()
    runtime_recreate = {e[1] for e in planned if e[0] == "recreate" and e[2] == "runtime"}
    for e in cluster.events:
        if e[0] == "node-relayout":
            simulated.add(("node-relayout", e[1]))
        elif e[0] == "workload-delete" and e[1] in runtime_recreate:
            simulated.add(("recreate", e[1], "runtime"))  # every workload of the pool goes, once
        else:
            simulated.add(e)
    assert planned == simulated, (sorted(planned - simulated), sorted(simulated - planned))


@pytest.mark.parametrize("dynamo", [False, True], ids=["deployment", "dynamo"])
def test_weight_change_rolls_and_pulls_only_that_models_weights(dynamo: bool, tmp_path: Path) -> None:
    """Issue 21 item 8: with the weights out of the pool image, new weights for chat roll chat's
    workload alone, and its nodes pull chat's weights image alone: no serving image, no other
    model's weights. With `weights: in-image` the same edit rebuilds the pool's image, which every
    workload of the pool pulls and rolls on."""
    base_g = graph_of(EXAMPLE, tmp_path / "a", _text((), dynamo))
    head_g = graph_of(EXAMPLE, tmp_path / "b", _text((WEIGHTS,), dynamo))
    before, after = read_tree(render(base_g, tmp_path / "a")), read_tree(render(head_g, tmp_path / "b"))
    cluster = Cluster(before, PRODUCTS, GPUS)
    cluster.pulls = []
    cluster.sync(after)
    chat = [w for w in after.workloads if w.startswith("chat")]
    assert {e[2] for e in cluster.events} == set(chat) and {e[0] for e in cluster.events} == {"workload-roll"}
    new_refs = {r for w in chat for r in after.images[w]} - {r for w in chat for r in before.images[w]}
    assert len(new_refs) == 1  # chat's weights image; its serving image is the same
    assert {ref for _, ref in cluster.pulls} == new_refs
    assert {n for n, _ in cluster.pulls} == {p.node for p in cluster.pods if p.model == "chat"}
    for w in set(after.workloads) - set(chat):  # no other workload's image or weights changed
        assert after.images[w] == before.images[w], w

    base_g = graph_of(EXAMPLE, tmp_path / "c", _text((IN_IMAGE,), dynamo))
    head_g = graph_of(EXAMPLE, tmp_path / "d", _text((IN_IMAGE, WEIGHTS), dynamo))
    before, after = read_tree(render(base_g, tmp_path / "c")), read_tree(render(head_g, tmp_path / "d"))
    cluster = Cluster(before, PRODUCTS, GPUS)
    cluster.pulls = []
    cluster.sync(after)
    h100 = {w for w, v in after.workloads.items() if v[1] == "h100-pool"}
    assert {e[2] for e in cluster.events} == h100 and len(h100) == 3
    assert all(len(after.images[w]) == 1 for w in h100)  # the serving image alone: no weights volume
    assert len({ref for _, ref in cluster.pulls}) == 1  # the rebuilt h100-pool image, with every checkpoint


# --- disaggregated serving on a DGD: the roles' components through Dynamo's worker hash ------------
# name -> (old, new) in tests/test_disaggregated_k8s.py's spec (the disaggregated example on a 2-node pool)
DISAGG = {
    "prefill-only": ("limits: {max_batch_size: 4}", "limits: {max_batch_size: 8}"),
    "decode-only": ("runtime: {kv_cache_memory_fraction: 0.9}", "runtime: {kv_cache_memory_fraction: 0.85}"),
    "both-roles": ("net_devices: [mlx5_0:1]", "net_devices: [mlx5_1:1]"),
    "router": ("router: {kv_aware: true}", "router: {kv_aware: false}"),
}


@pytest.mark.parametrize("edit", sorted(DISAGG))
def test_a_disaggregated_change_applies_through_the_controllers(edit: str, tmp_path: Path) -> None:
    """The simulator models the worker components (Dynamo's worker hash, the scheduler), not the
    frontend or the planner, and has no time axis inside one rollout: it checks which components
    roll and that every pod is placed; the order of the roles is the plan's text (Dynamo has none)."""
    from tests.test_disaggregated_k8s import EXAMPLE as DISAGG_EXAMPLE, _spec

    old, new = DISAGG[edit]
    text = _spec()
    assert text.count(old) == 1, old
    base_g = graph_of(DISAGG_EXAMPLE, tmp_path / "a", text)
    head_g = graph_of(DISAGG_EXAMPLE, tmp_path / "b", text.replace(old, new))
    before, after = read_tree(render(base_g, tmp_path / "a")), read_tree(render(head_g, tmp_path / "b"))
    cluster = Cluster(before, {}, {"h200": 8})
    assert not cluster.pending()
    cluster.sync(after)
    assert not cluster.pending(), [(p.workload, p.limits) for p in cluster.pending()]

    found = host_disruptions(base_g, head_g)
    planned = _plan_events(found)
    workers = {e for e in planned if not e[2].endswith(("/frontend", "/planner"))}
    assert workers == set(cluster.events), (sorted(workers), sorted(cluster.events))
    roles = {e[2].rsplit("-", 1)[1] for e in cluster.events if e[0] == "workload-roll"}
    if edit == "router":
        # round robin: the frontend's arguments change, and the workers stop publishing KV-cache
        # events (their options lose the event buffer, review N2/N4), so both roles roll too
        assert roles == {"prefill", "decode"} and "chat/frontend" in {e[2] for e in planned}
    else:
        assert roles == {"prefill", "decode"}  # the worker hash rolls both roles on any worker change
        prefill = [d.detail for d in found if d.detail.startswith("chat/worker-h200-prefill:")]
        assert prefill and all("in no order" in d for d in prefill)
