"""The deploy targets (compiler/targets/base.py) a build knows, and the action kinds it lowers a spec
with: the common kinds (compiler/actions/: what a model becomes, its serving image) and then each
target's own. A new target is a package here with a `TARGET`, added to `TARGETS`.

`REGISTRY` is what a build gives the planner and the executor. Its order is the lowering order; the
graph orders actions by id and dependency (compiler/graph/model.py), so it does not change any output.
"""

from __future__ import annotations

from compiler.actions import COMMON
from compiler.graph.kinds import KindRegistry

from .base import DeployTarget
from .hosts.target import TARGET as HOSTS
from .kubernetes.target import TARGET as KUBERNETES

TARGETS: tuple[DeployTarget, ...] = (HOSTS, KUBERNETES)

REGISTRY = KindRegistry([*COMMON, *(kind for target in TARGETS for kind in target.kinds)])

__all__ = ["REGISTRY", "TARGETS"]
