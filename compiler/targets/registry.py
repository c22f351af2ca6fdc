"""The action kinds a build lowers a spec with: the common kinds (compiler/actions/: what a model
becomes, its serving image) and then each target's own (its package's kinds.py), in the order of
compiler/deploy/__init__.py's TARGETS.

`REGISTRY` is what a build gives the planner and the executor. Its order is the lowering order; the
graph orders actions by id and dependency (compiler/graph/model.py), so it does not change any output.
"""

from __future__ import annotations

from compiler.actions import COMMON, image
from compiler.deploy import TARGETS
from compiler.deploy.base import Scope
from compiler.graph.kinds import ActionKind, KindRegistry

from .disruption import POOL, Disruption, Wording, params_only
from .hosts import disaggregated as hosts_image
from .hosts.kinds import KINDS as HOSTS
from .hosts.kinds import WORDING as HOSTS_WORDING
from .kubernetes.kinds import KINDS as KUBERNETES
from .kubernetes.kinds import WORDING as KUBERNETES_WORDING
from .kubernetes.kinds import simulate_change as kubernetes_change

KINDS: dict[str, tuple[ActionKind, ...]] = {"hosts": HOSTS, "kubernetes": KUBERNETES}  # a target's, by name

# a target's simulation of a change on its live system (`kiln plan --base`), where it has one
CHANGE_SIMULATORS = {"kubernetes": kubernetes_change}

# what a target adds to its hosts' serving images (compiler/actions/base.py ImageAdditions), where it does
IMAGE_ADDITIONS = {"hosts": hosts_image}

REGISTRY = KindRegistry([*COMMON, *(kind for target in TARGETS for kind in KINDS[target.name])])

# How a change of each kind that reaches what runs is worded, from what its changed fields declare
# (compiler/params.py Effect) and, for a workload, which images it runs were pushed anew: the serving
# image's container restarts (provision.sh replaces them), then each target's. A build input's kind
# (BUILD_INPUT) has none: what consumes it says.
WORDING: dict[str, Wording] = {image.KIND.kind: params_only(image.restarts), **HOSTS_WORDING, **KUBERNETES_WORDING}


def disruptions(kind: str, old, new, inputs: frozenset[str] | None = None) -> list[Disruption]:
    """What replacing an action of `kind` built with `old` parameters (None: nothing before) by one
    with `new` disrupts, `inputs` the dependencies rebuilt since (None: not known): the one entry the
    planner asks (compiler/build.py graph_disruptions)."""
    word = WORDING.get(kind)
    return word(old, new, inputs) if word is not None else []


def in_scope(scope: Scope, d: Disruption) -> bool:
    """Whether a disruption is of the kind a target with `scope` reports."""
    return (d.gpu_index == POOL) == (scope == "pool")


__all__ = ["CHANGE_SIMULATORS", "IMAGE_ADDITIONS", "KINDS", "REGISTRY", "WORDING", "disruptions", "in_scope"]
