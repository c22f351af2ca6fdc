"""The Kubernetes target (compiler/targets/base.py): the spec's node pools (`deploy: kubernetes`, the
pools pass of compiler/ir/pools.py) and the workloads it replicates on them."""

from __future__ import annotations

from compiler.ir import Resolved
from compiler.ir.pools import PoolWorkload

from . import k8s_deployment, k8s_dgd, k8s_nodes, k8s_release


class Kubernetes:
    name = "kubernetes"
    kinds = (k8s_nodes.KIND, k8s_deployment.KIND, k8s_dgd.KIND, k8s_release.KIND)
    disruption_scope = "pool"

    def applies(self, ir: Resolved) -> list[str]:
        return sorted(ir.pools)

    def placement(self, ir: Resolved) -> dict[str, tuple[PoolWorkload, ...]]:
        return {name: tuple(ir.pools[name].workloads) for name in self.applies(ir)}


TARGET = Kubernetes()
