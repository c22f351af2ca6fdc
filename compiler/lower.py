"""Lowering: an analysed spec becomes the action graph, one action per artifact. The one place that
does it: `lower` for a validated spec (the build, the plan, publish), `lower_ir` for an analysed IR
(what a measured record is compared with, compiler/staleness.py; `kiln tune`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from compiler.actions.base import InputUnreadable, LowerContext, input_spec_path
from compiler.diagnostics import Diagnostic
from compiler.store.digests import DigestCache
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.ir import Resolved
from compiler.ir.inputs import InputUnusable
from compiler.targets.registry import IMAGE_ADDITIONS, REGISTRY

if TYPE_CHECKING:  # annotations only: validation compares measured records through lower_ir
    from compiler.pipeline import Validation


class NotBuildable(Exception):
    """The spec has errors; lowering needs a spec that validated."""


def lower(result: Validation, digests: DigestCache, kinds: KindRegistry = REGISTRY) -> Graph:
    """The action graph of a spec that validated. An input that cannot be read now (it changed
    since validation) adds a K916 diagnostic to `result` and raises NotBuildable."""
    if not result.ok or result.resolved is None:
        raise NotBuildable(f"{result.file} has errors; run `kiln validate` for details")
    try:
        return lower_ir(result.resolved, digests, kinds)
    except InputUnreadable as e:
        doc = result.resolved.document
        result.diagnostics.append(Diagnostic(InputUnusable.code, InputUnusable.severity, e.message, doc.file,
                                             doc.span_of(e.where)))
        raise NotBuildable(f"{result.file}: {e.message}") from None


def lower_ir(ir: Resolved, digests: DigestCache, kinds: KindRegistry = REGISTRY) -> Graph:
    """The action graph of an analysed IR; an input unreadable now raises InputUnreadable."""
    ctx = LowerContext(ir, digests, IMAGE_ADDITIONS)
    return Graph.build([_sized(_with_input_paths(a, ctx), kind, ctx) for kind in kinds for a in kind.lower(ctx)])


def lower_or_report(result: Validation, digests: DigestCache, kinds: KindRegistry = REGISTRY) -> Graph | None:
    """`lower`, or None when the spec has errors (lowering's own are added to `result`)."""
    if not result.ok:
        return None
    try:
        return lower(result, digests, kinds)
    except NotBuildable:
        return None


def _sized(action, kind, ctx: LowerContext):
    """The action with the machine it needs (not in its key)."""
    return dataclasses.replace(action, size=kind.size(action, ctx.ir))


def _with_input_paths(action, ctx: LowerContext):
    """The action with the spec path of each input file (for the plan's reasons)."""
    paths = {role: p for role in action.inputs
             if (p := input_spec_path(action.id, role, ctx.spec.models)) is not None}
    return dataclasses.replace(action, input_paths=paths) if paths else action
