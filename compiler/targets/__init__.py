"""The deploy targets (compiler/targets/base.py) a spec's hosts are deployed by, each asked through
its object: `of(host)` is the target of a spec host (its `deploy`), `DEPLOYS` the values the spec
accepts. This module and each target's `target.py` import nothing else of the compiler, so the IR
and the checks ask them; the action kinds each target lowers to are the build's
(compiler/targets/registry.py: REGISTRY).

A new target is a package here with a `target.py` (its `TARGET`, added to `TARGETS`) and a
`kinds.py` (its action kinds, added to registry.py).
"""

from __future__ import annotations

from .base import DeployTarget, HostSpec
from .hosts.target import TARGET as HOSTS
from .kubernetes.target import TARGET as KUBERNETES

TARGETS: tuple[DeployTarget, ...] = (HOSTS, KUBERNETES)
BY_DEPLOY: dict[str, DeployTarget] = {t.deploy: t for t in TARGETS}
DEPLOYS = tuple(BY_DEPLOY)  # the spec's `deploy` values, the first the default
# every target's disruption kinds and their order (one table: a kind means one thing wherever it is reported)
DISRUPTION_ORDER: dict[str, int] = {kind: rank for t in TARGETS for kind, rank in t.disruptions.items()}


def of(host: HostSpec) -> DeployTarget:
    """The target that deploys a spec host."""
    return BY_DEPLOY[host.deploy]


__all__ = ["BY_DEPLOY", "DEPLOYS", "DISRUPTION_ORDER", "TARGETS", "of"]
