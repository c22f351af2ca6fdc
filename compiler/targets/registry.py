"""The action kinds a build lowers a spec with: the common kinds (compiler/actions/: what a model
becomes, its serving image) and then each target's own (its package's kinds.py), in the order of
compiler/targets/__init__.py's TARGETS.

`REGISTRY` is what a build gives the planner and the executor. Its order is the lowering order; the
graph orders actions by id and dependency (compiler/graph/model.py), so it does not change any output.
"""

from __future__ import annotations

from compiler.actions import COMMON
from compiler.graph.kinds import POOL, ActionKind, Disruption, KindRegistry

from . import TARGETS
from .base import Scope
from .hosts import disaggregated as hosts_image
from .hosts.kinds import KINDS as HOSTS
from .kubernetes.kinds import KINDS as KUBERNETES
from .kubernetes.kinds import simulate_change as kubernetes_change

KINDS: dict[str, tuple[ActionKind, ...]] = {"hosts": HOSTS, "kubernetes": KUBERNETES}  # a target's, by name

# a target's simulation of a change on its live system (`kiln plan --base`), where it has one
CHANGE_SIMULATORS = {"kubernetes": kubernetes_change}

# what a target adds to its hosts' serving images (compiler/actions/base.py ImageAdditions), where it does
IMAGE_ADDITIONS = {"hosts": hosts_image}

REGISTRY = KindRegistry([*COMMON, *(kind for target in TARGETS for kind in KINDS[target.name])])


def in_scope(scope: Scope, d: Disruption) -> bool:
    """Whether a disruption is of the kind a target with `scope` reports."""
    return (d.gpu_index == POOL) == (scope == "pool")


__all__ = ["CHANGE_SIMULATORS", "IMAGE_ADDITIONS", "KINDS", "REGISTRY", "in_scope"]
