"""Lowering: an analysed spec becomes the action graph, one action per artifact."""

from __future__ import annotations

import dataclasses

from compiler.actions.base import InputUnreadable, LowerContext, input_spec_path
from compiler.diagnostics import Diagnostic
from compiler.graph.inputs import DigestCache
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.ir.inputs import InputUnusable
from compiler.pipeline import Validation
from compiler.targets import REGISTRY


class NotBuildable(Exception):
    """The spec has errors; lowering needs a spec that validated."""


def lower(result: Validation, digests: DigestCache, kinds: KindRegistry = REGISTRY) -> Graph:
    """The action graph of a spec that validated. An input that cannot be read now (it changed
    since validation) adds a K916 diagnostic to `result` and raises NotBuildable."""
    if not result.ok or result.resolved is None:
        raise NotBuildable(f"{result.file} has errors; run `kiln validate` for details")
    _refuse_unbuilt(result)
    ctx = LowerContext(result.resolved, digests)
    try:
        return Graph.build([_with_input_paths(a, ctx) for kind in kinds for a in kind.lower(ctx)])
    except InputUnreadable as e:
        doc = result.resolved.document
        result.diagnostics.append(Diagnostic(InputUnusable.code, InputUnusable.severity, e.message, doc.file,
                                             doc.span_of(e.where)))
        raise NotBuildable(f"{result.file}: {e.message}") from None


def lower_or_report(result: Validation, digests: DigestCache, kinds: KindRegistry = REGISTRY) -> Graph | None:
    """`lower`, or None when the spec has errors (lowering's own are added to `result`)."""
    if not result.ok:
        return None
    try:
        return lower(result, digests, kinds)
    except NotBuildable:
        return None


def _refuse_unbuilt(result: Validation) -> None:
    """A spec whose disaggregated serving a target cannot emit yet is refused (K164), not built
    as aggregated servers that would ignore the roles."""
    from compiler.checks.disaggregated import DisaggregatedNotBuilt, not_built

    refused = not_built(result.resolved.spec)
    if not refused:
        return
    doc = result.resolved.document
    for model, target in refused:
        result.diagnostics.append(Diagnostic(
            DisaggregatedNotBuilt.code, DisaggregatedNotBuilt.severity,
            f"model {model!r}: disaggregated serving is checked but not yet built on {target}",
            doc.file, doc.span_of(("models", model, "serving", "disaggregated"), key=True),
            "validate with `kiln validate`; build the model without `serving.disaggregated` meanwhile"))
    raise NotBuildable(f"{result.file}: disaggregated serving is not yet built")


def _with_input_paths(action, ctx: LowerContext):
    """The action with the spec path of each input file (for the plan's reasons)."""
    paths = {role: p for role in action.inputs
             if (p := input_spec_path(action.id, role, ctx.spec.models)) is not None}
    return dataclasses.replace(action, input_paths=paths) if paths else action
