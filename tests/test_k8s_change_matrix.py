"""The change matrix (issue 21): each Day-2 edit of the example fleet, rendered before and after,
goes through the product's controller simulator (compiler/targets/kubernetes/sim/: the Deployment
controller, the scheduler, GFD and the device plugin, the MIG manager, the re-layout Job under the
Eviction API and the PDBs, Argo CD's waves and prunes, Dynamo's webhook and worker hash; issue 32
replaced the test-side model that stood here). For every edit: no update is refused unplanned, the
rollout completes or the plan refuses it (K858), a model with no ready pod is the plan's K859, and
`kiln plan`'s disruptions are exactly what the simulated controllers did.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compiler.gitops.semplan import change_simulations, host_disruptions
from tests.k8s_tree import graph_of, render

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "k8s-two-pools" / "kiln.yaml"
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
    # the review's shape_then_drop_first (M7): without a lock the bare name moves to the 1g.10gb shape,
    # whose Deployment is pruned while chat-h100-pool rolls onto it (the plan's K954)
    "model-loses-its-largest-shape": ((SECOND_SHAPE,), (SECOND_SHAPE, ("          - {profile: 3g.40gb, serves: chat}\n", "")),
                                      False),
    "add-a-pool": ((), (NEW_POOL,), False),
    "remove-a-pool": ((NEW_POOL,), (), False),
    "add-a-pool-dynamo": ((), (NEW_POOL,), True),
    "power-limit-dynamo": ((), (("power_limit_w: 1000", "power_limit_w: 900"),), True),
    "power-limit": ((), (("power_limit_w: 1000", "power_limit_w: 900"),), False),
    "tp": ((), TP4, False),
    "tp-dynamo": ((), TP4, True),
    "replicas": ((), (("node_pool: {nodes: 4,", "node_pool: {nodes: 6,"),), False),
    "image-bump": ((), (IMAGE,), False),
    # Dynamo's runtime image is the frontend's and the pools' serving images' base: the workers roll too
    "image-bump-dynamo": ((), (("1" * 64, "2" * 64),), True),
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
        elif d.kind == "workload-roll" and not name.endswith(("/frontend", "/planner")):
            # (a DGD's frontend and planner take no GPU and are updated in place, outside the worker
            # hash: the simulator runs the workers' rollouts)
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
    sim, = change_simulations(base_g, head_g)
    r = sim.result
    codes = [c for c, _, _ in sim.diagnostics()]
    planned = _plan_events(host_disruptions(base_g, head_g))
    if "webhook refuses" in (r.stuck or ""):  # the plan deletes and re-creates the DGD (K855) and refuses (K858)
        assert "K858" in codes and any(e[0] == "recreate" for e in planned), (codes, sorted(planned))
        return
    # the product's simulator (compiler/targets/kubernetes/sim/): the rollout completes, or the plan
    # refuses the change (K858); a model with no ready pod during it is the plan's K859
    assert r.completed or "K858" in codes, r.stuck
    assert "API server refuses" not in (r.stuck or "") and "forbidden" not in (r.stuck or ""), r.stuck
    zero = [m for m in r.before if r.before[m] and r.desired.get(m) and r.low[m][0] == 0]
    assert bool(zero) == ("K859" in codes), (zero, codes)
    # `kiln plan`'s disruptions are what the controllers did (a runtime switch's recreate: every
    # workload of the pool deleted, the new runtime's created); where the change sticks, what they did before
    recreated = {e[1] for e in planned if e[0] == "recreate" and e[2] == "runtime"}
    done = {("recreate", e[1], "runtime") if e[1] in recreated and e[0] == "workload-delete" else e
            for e in r.events}
    if r.completed:
        assert planned == done, (sorted(planned - done), sorted(done - planned))
    else:
        assert done <= planned, sorted(done - planned)


def _images(root: Path) -> dict[str, set]:
    """Workload (a DGD's worker as <model>/<component>) -> what the kubelet pulls for its pods: its
    containers' images and its image volumes (volumes[].image, pulled like a container image)."""
    def pulls(spec: dict) -> set:
        return ({c["image"] for c in spec.get("initContainers", []) + spec["containers"]}
                | {v["image"]["reference"] for v in spec.get("volumes", []) if "image" in v})

    out = {}
    for path in sorted((root / "workloads").glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if d and d["kind"] == "Deployment":
                out[d["metadata"]["name"]] = pulls(d["spec"]["template"]["spec"])
            elif d and d["kind"] == "DynamoGraphDeployment":
                out |= {f"{d['metadata']['name']}/{c['name']}": pulls(c["podTemplate"]["spec"])
                        for c in d["spec"]["components"] if c["type"] in ("worker", "prefill", "decode")}
    return out


@pytest.mark.parametrize("dynamo", [False, True], ids=["deployment", "dynamo"])
def test_weight_change_rolls_and_pulls_only_that_models_weights(dynamo: bool, tmp_path: Path) -> None:
    """Issue 21 item 8: with the weights out of the pool image, new weights for chat roll chat's
    workload alone, whose new pods pull chat's weights image alone: no serving image, no other
    model's weights. With `weights: in-image` the same edit rebuilds chat's serving image on the
    pool, which chat's workload alone runs (a pool's image is per model: it rolled every workload of
    the pool when one image held every model's checkpoints)."""
    base_g = graph_of(EXAMPLE, tmp_path / "a", _text((), dynamo))
    head_g = graph_of(EXAMPLE, tmp_path / "b", _text((WEIGHTS,), dynamo))
    before, after = _images(render(base_g, tmp_path / "a")), _images(render(head_g, tmp_path / "b"))
    r = change_simulations(base_g, head_g)[0].result
    chat = [w for w in after if w.startswith("chat")]
    assert r.completed and {e[2] for e in r.events} == set(chat) and {e[0] for e in r.events} == {"workload-roll"}
    new_refs = {ref for w in chat for ref in after[w]} - {ref for w in chat for ref in before[w]}
    assert len(new_refs) == 1  # chat's weights image; its serving image is the same
    for w in set(after) - set(chat):  # no other workload's image or weights changed: nothing else pulls
        assert after[w] == before[w], w

    base_g = graph_of(EXAMPLE, tmp_path / "c", _text((IN_IMAGE,), dynamo))
    head_g = graph_of(EXAMPLE, tmp_path / "d", _text((IN_IMAGE, WEIGHTS), dynamo))
    before, after = _images(render(base_g, tmp_path / "c")), _images(render(head_g, tmp_path / "d"))
    r = change_simulations(base_g, head_g)[0].result
    rolled = {e[2] for e in r.events}
    assert r.completed and rolled == {"chat/worker-h100-pool" if dynamo else "chat-h100-pool"}
    w, = rolled
    assert len(after[w]) == 1 and after[w] != before[w]  # its serving image alone: no weights volume
    assert all(after[o] == before[o] for o in set(after) - rolled)


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
    frontend or the planner: it checks which components roll and that the rollout completes; the
    order of the roles is the plan's text (Dynamo has none)."""
    from tests.test_disaggregated_k8s import EXAMPLE as DISAGG_EXAMPLE, _spec

    old, new = DISAGG[edit]
    text = _spec()
    assert text.count(old) == 1, old
    base_g = graph_of(DISAGG_EXAMPLE, tmp_path / "a", text)
    head_g = graph_of(DISAGG_EXAMPLE, tmp_path / "b", text.replace(old, new))
    r = change_simulations(base_g, head_g)[0].result
    assert r.completed, r.stuck

    found = host_disruptions(base_g, head_g)
    planned = _plan_events(found)
    assert planned == set(r.events), (sorted(planned), sorted(r.events))
    roles = {e[2].rsplit("-", 1)[1] for e in r.events if e[0] == "workload-roll"}
    if edit == "router":
        # round robin: the frontend's arguments change, and the workers stop publishing KV-cache
        # events (their options lose the event buffer, review N2/N4), so both roles roll too
        assert roles == {"prefill", "decode"} and any(d.detail.startswith("chat/frontend:") for d in found)
    else:
        assert roles == {"prefill", "decode"}  # the worker hash rolls both roles on any worker change
        prefill = [d.detail for d in found if d.detail.startswith("chat/worker-h200-prefill:")]
        assert prefill and all("in no order" in d for d in prefill)
