"""What a deploy target is: the seam between the resolved spec and the artifacts one kind of
infrastructure needs. Hosts (compiler/targets/hosts/) and Kubernetes (compiler/targets/kubernetes/)
implement it; compiler/targets/__init__.py registers them.

A target only reads the IR: which hosts it deploys and where their serving units sit were decided by
the analysis (compiler/ir/: the units and placement passes, and the pools pass for node pools), so a
target never recomputes a placement. Its action kinds lower the spec; their `disruptions` say what a
change does, at the target's `disruption_scope`: one GPU of a host, or a whole node pool (`gpu_index`
POOL), which is how compiler/graph/plan.py renders them.
"""

from __future__ import annotations

from typing import Literal, Mapping, Protocol, Sequence, runtime_checkable

from compiler.graph.kinds import POOL, ActionKind, Disruption
from compiler.ir import Resolved

Scope = Literal["gpu", "pool"]


class Placed(Protocol):
    """One placed serving unit, as the IR has it: a ServingUnit (compiler/ir/types.py) on a host's
    GPUs or MIG instance, or a PoolWorkload (compiler/ir/pools.py), a model's replicas on a pool."""

    model: str


@runtime_checkable
class DeployTarget(Protocol):
    name: str  # "hosts", "kubernetes"
    kinds: tuple[ActionKind, ...]  # what its hosts lower to, in lowering order
    disruption_scope: Scope  # "gpu": per GPU index of a host; "pool": a node pool as a whole

    def applies(self, ir: Resolved) -> list[str]:
        """The spec's hosts (node pools) this target deploys, sorted; [] when none."""
        ...

    def placement(self, ir: Resolved) -> Mapping[str, Sequence[Placed]]:
        """Host (node pool) -> what it serves, where the analysis placed it."""
        ...


def in_scope(scope: Scope, d: Disruption) -> bool:
    """Whether a disruption is of the kind a target with `scope` reports."""
    return (d.gpu_index == POOL) == (scope == "pool")
