"""The deploy targets a spec's hosts are deployed by (the protocol: compiler/deploy/base.py), each
asked through its object: `of(host)` is the target of a spec host (its `deploy`), `DEPLOYS` the
values the spec accepts, `DISRUPTION_ORDER` the one order of every target's kinds of disruption.

Why a package apart from compiler/targets/: the spec, the analysis (the IR's passes) and the checks
ask a target what it deploys and where, and must not reach what a target builds. This package
imports nothing of the compiler (annotations only), so asking it pulls in no build; what a target
builds (its action kinds, emitters, the kind registry) is compiler/targets/, which checking never
reaches (tests/test_architecture.py walks the imports).

A new target is a package compiler/targets/<name>/ (its action kinds, `kinds.py`), one module here
(its object, `TARGET`, added to `TARGETS`) and its lines in compiler/targets/registry.py.
"""

from __future__ import annotations

from .base import DeployTarget, HostSpec
from .hosts import TARGET as HOSTS
from .kubernetes import TARGET as KUBERNETES

TARGETS: tuple[DeployTarget, ...] = (HOSTS, KUBERNETES)
BY_DEPLOY: dict[str, DeployTarget] = {t.deploy: t for t in TARGETS}
DEPLOYS = tuple(BY_DEPLOY)  # the spec's `deploy` values, the first the default
# every target's disruption kinds and their order (one table: a kind means one thing wherever it is reported)
DISRUPTION_ORDER: dict[str, int] = {kind: rank for t in TARGETS for kind, rank in t.disruptions.items()}
UNDISRUPTIVE: frozenset[str] = frozenset(kind for t in TARGETS for kind in t.undisruptive)


def of(host: HostSpec) -> DeployTarget:
    """The target that deploys a spec host."""
    return BY_DEPLOY[host.deploy]


__all__ = ["BY_DEPLOY", "DEPLOYS", "DISRUPTION_ORDER", "TARGETS", "UNDISRUPTIVE", "of"]
