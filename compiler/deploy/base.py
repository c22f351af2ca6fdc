"""What a deploy target is: the seam between the resolved spec and the artifacts one kind of
infrastructure needs. Hosts (compiler/deploy/hosts.py) and Kubernetes (compiler/deploy/kubernetes.py)
implement it; compiler/deploy/__init__.py registers them, and every module that must know how a
host is deployed asks the target registered for it (`compiler.deploy.of(host)`), never its name.

A target object answers questions only: it imports nothing of the compiler, so the analysis (the
IR's passes), the checks and the action kinds can all ask it without reaching a build. What it
builds, its action kinds, is its package under compiler/targets/ (compiler/targets/hosts/,
compiler/targets/kubernetes/), registered for the build in compiler/targets/registry.py.

A target only reads the IR: which hosts it deploys and where their serving units sit were decided by
the analysis (compiler/ir/: the units and placement passes, and the pools pass for node pools), so a
target never recomputes a placement. Its action kinds lower the spec; their `disruptions` say what a
change does, at the target's `disruption_scope`: one GPU of a host, or a whole node pool (`gpu_index`
POOL), which is how compiler/graph/plan.py renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # annotations only: the IR imports this module
    from compiler.ir import Resolved

Scope = Literal["gpu", "pool"]


class Placed(Protocol):
    """One placed serving unit, as the IR has it: a ServingUnit (compiler/ir/types.py) on a host's
    GPUs or MIG instance, or a PoolWorkload (compiler/ir/pools.py), a model's replicas on a pool."""

    model: str


class HostSpec(Protocol):
    """The part of a spec host (compiler/spec/models.py: Host) a target reads."""

    deploy: str


@runtime_checkable
class DeployTarget(Protocol):
    name: str  # "hosts", "kubernetes"
    deploy: str  # the spec's `deploy` value of the hosts it takes
    disruption_scope: Scope  # "gpu": per GPU index of a host; "pool": a node pool as a whole
    # A host stands for a pool of identical nodes an orchestrator fills: the spec's `node_pool`
    # applies, the IR's pools pass lays it out, each unit runs once per node, each in a network
    # namespace of its own (its ports collide with no other unit's).
    node_pool: bool
    # Kiln runs a disaggregated model's servers on the host network and its router as a process of
    # one of the target's hosts (`router.host`): the router takes the model's ports, the servers
    # start a port stride above, the host's image carries the router's config. Otherwise the
    # orchestrator's own frontend routes (Dynamo's, on Kubernetes).
    runs_router: bool
    # the kinds of disruption it reports (compiler.targets.disruption.Disruption.kind) -> their place in a
    # plan's list of one GPU's (one pool's) disruptions
    disruptions: Mapping[str, int]
    # the kinds among them a plan lists but that stop or replace nothing running (a Deployment's
    # strategy: outside its pod template), so a plan does not count them as disrupted
    undisruptive: frozenset[str]

    def replicas(self, host: HostSpec) -> int:
        """How many servers one serving unit of `host` stands for."""
        ...

    def applies(self, ir: Resolved) -> list[str]:
        """The spec's hosts (node pools) this target deploys, sorted; [] when none."""
        ...

    def placement(self, ir: Resolved) -> Mapping[str, Sequence[Placed]]:
        """Host (node pool) -> what it serves, where the analysis placed it."""
        ...
