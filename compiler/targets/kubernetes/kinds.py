"""The Kubernetes target's action kinds, in lowering order (registered in compiler/targets/registry.py)."""

from __future__ import annotations

from compiler.targets.disruption import params_only

from . import k8s_deployment, k8s_dgd, k8s_nodes, k8s_release

KINDS = (k8s_nodes.KIND, k8s_deployment.KIND, k8s_dgd.KIND, k8s_release.KIND)

# how the target words a change of each of its kinds (compiler/targets/registry.py disruptions): a
# workload's from its parameters and the images it runs that were pushed anew (its dependencies)
WORDING = {k8s_nodes.KIND.kind: params_only(k8s_nodes.disruptions), k8s_deployment.KIND.kind: k8s_deployment.disruptions,
           k8s_dgd.KIND.kind: k8s_dgd.disruptions, k8s_release.KIND.kind: params_only(k8s_release.release_disruptions)}


def simulate_change(base, head):
    """`kiln plan --base`: the change played through the controllers (sim/), or None where either
    revision has no Kubernetes tree."""
    from .sim.fromgraph import simulate_graphs
    from .sim.report import ChangeSimulation

    result = simulate_graphs(base, head, KINDS)
    return ChangeSimulation(result) if result is not None else None
