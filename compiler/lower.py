"""Lowering: an analysed spec becomes the action graph, one action per artifact."""

from __future__ import annotations

from compiler.actions import REGISTRY
from compiler.actions.base import LowerContext
from compiler.graph.inputs import DigestCache
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.pipeline import Validation


class NotBuildable(Exception):
    """The spec has errors; lowering needs a spec that validated."""


def lower(result: Validation, digests: DigestCache, kinds: KindRegistry = REGISTRY) -> Graph:
    if not result.ok or result.resolved is None:
        raise NotBuildable(f"{result.file} has errors; run `kiln validate` for details")
    ctx = LowerContext(result.resolved, digests)
    return Graph.build([a for kind in kinds for a in kind.lower(ctx)])
