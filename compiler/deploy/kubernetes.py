"""The Kubernetes target (compiler/deploy/base.py): the spec's node pools (`deploy: kubernetes`, the
pools pass of compiler/ir/pools.py) and the workloads it replicates on them. What it builds, the node
layer, the workloads and the release's Kustomize tree, is compiler/targets/kubernetes/."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the IR asks this target
    from compiler.ir import Resolved
    from compiler.ir.pools import PoolWorkload


class Kubernetes:
    name = "kubernetes"
    deploy = "kubernetes"
    disruption_scope = "pool"
    node_pool = True
    # what a change does to a node pool, in the order a plan lists them (compiler/targets/kubernetes/:
    # k8s_nodes.py, plan.py, k8s_release.py)
    disruptions = {"node-relayout": 0, "recreate": 0, "workload-delete": 0, "workload-move": 0, "workload-roll": 1, "replicas": 2,
                   "rollout-settings": 2, "clocks": 3, "power": 4}
    # maxSurge/maxUnavailable only: the Deployment controller rolls on a pod-template change alone
    # (kubernetes pkg/controller/deployment/sync.go getNewReplicaSet; k8s_deployment.py cites it)
    undisruptive = frozenset({"rollout-settings"})
    runs_router = False  # Dynamo's frontend routes (compiler/targets/kubernetes/dynamo.py)

    def replicas(self, host) -> int:
        return host.node_pool.nodes if host.node_pool is not None else 1  # one per node of the pool

    def applies(self, ir: Resolved) -> list[str]:
        return sorted(ir.pools)

    def placement(self, ir: Resolved) -> dict[str, tuple[PoolWorkload, ...]]:
        return {name: tuple(ir.pools[name].workloads) for name in self.applies(ir)}


TARGET = Kubernetes()
