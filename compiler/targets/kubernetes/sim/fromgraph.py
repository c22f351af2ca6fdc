"""The simulation of a change between two lowered graphs, for `kiln plan --base`: each graph's
Kubernetes tree is rendered as a build would write it (the tree's kinds and the options they read
run for real, in a temporary directory), except the pushed images, whose digests are derived from
their actions' keys (a rebuilt image is a new digest, an unchanged one keeps it, as a registry
would); the nodes are the pools' (`node_pool.nodes` of either revision, GPUs per node, product)."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from pathlib import Path

from compiler.actions import COMMON
from compiler.actions.snapshot import KIND as SNAPSHOT
from compiler.graph.kinds import KindRegistry, RunContext
from compiler.graph.model import Graph

from . import tree
from .engine import Result, simulate
from .model import PoolNodes, Revision
from .scheduler import Taint

LOG = logging.getLogger("kiln.k8s-sim")
PUSHED = {"image": "image.json", "weights-image": "weights-image.json"}  # what a push records
NEEDED = ("image", "weights-image", "llmapi-options", "disagg-options")  # what the tree's kinds read


def _kinds(tree_kinds) -> KindRegistry:
    return KindRegistry([*COMMON, *tree_kinds])


def _pushed(graph: Graph, aid: str) -> dict:
    digest = "sha256:" + hashlib.sha256(graph.keys[aid].encode()).hexdigest()
    return {"reference": f"{graph.actions[aid].params.repository}@{digest}", "digest": digest}


def render_revision(graph: Graph, tree_kinds) -> Revision | None:
    """The revision a graph's Kubernetes tree holds; None when the graph has no tree."""
    if "k8s-release" not in graph.actions:
        return None
    kinds = _kinds(tree_kinds)
    with tempfile.TemporaryDirectory(prefix="kiln-sim-") as tmp:
        dirs: dict[str, Path] = {}
        for aid in graph.order:
            action = graph.actions[aid]
            if not (action.kind.startswith("k8s-") or action.kind in NEEDED):
                continue
            out = Path(tmp) / aid.replace("/", "__")
            out.mkdir(parents=True)
            if action.kind in PUSHED:
                (out / PUSHED[action.kind]).write_text(json.dumps(_pushed(graph, aid)), encoding="utf-8")
            else:
                kinds[action.kind].run(action.params, RunContext(out, {}, {d: dirs[d] for d in action.deps}, LOG))
            dirs[aid] = out
        return tree.read_tree(dirs["k8s-release"])


def _spec(graph: Graph | None) -> dict:
    snap = graph.actions.get(SNAPSHOT.kind) if graph is not None else None
    return (snap.params_json.get("spec") or {}) if snap is not None else {}


def pool_nodes(base: Graph | None, head: Graph) -> list[PoolNodes]:
    """Every pool of either revision with the larger node count (nodes an edit adds join; nodes of a
    removed pool stay in the cluster)."""
    out: dict[str, PoolNodes] = {}
    for graph in (base, head):
        for name, host in sorted((_spec(graph).get("hosts") or {}).items()):
            np = host.get("node_pool")
            if host.get("deploy") != "kubernetes" or not np:
                continue
            # the IR's default where the spec gives none (compiler/ir/pools.py): the pool's own label
            selector = dict(np.get("selector") or {"kiln.io/pool": name})
            nodes = PoolNodes(name, int(np.get("nodes", 1)), int(host.get("count", 1)), np.get("gpu_product"),
                              selector, [Taint("nvidia.com/gpu", "present")])
            prev = out.get(name)
            if prev is None or nodes.count > prev.count:
                out[name] = nodes
    return list(out.values())


def simulate_graphs(base: Graph | None, head: Graph, tree_kinds) -> Result | None:
    """None where either revision has no Kubernetes tree (a first deployment is not a change)."""
    if base is None:
        return None
    before, after = render_revision(base, tree_kinds), render_revision(head, tree_kinds)
    if before is None or after is None:
        return None
    return simulate(before, after, pool_nodes(base, head))
