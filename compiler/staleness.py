"""Which measured limits were taken against something other than what the spec now builds (K914).

A measurement record (compiler/ir/measured.py) lists the artifact keys of what `kiln tune`
measured. Comparing them needs the build graph, so this sits after lowering in the layering, and
the pipeline calls it for specs that refer to records. One subtlety: the record's own limit is
an input of the artifacts it measured the next time round (the LLM-API options carry the batch
limit, and their key the record's digest). So the keys are compared as the spec builds them
with the limit the unit served while it was measured (`record.served`): what the measurement
itself changed is not a change, everything else is.
"""

from __future__ import annotations

import dataclasses

from compiler.diagnostics import Diagnostic
from compiler.graph.inputs import DigestCache
from compiler.ir import Resolved
from compiler.ir.measured import MeasuredLimitStale, TuneRecord, spec_changes
from compiler.lower import lower_ir
from compiler.store.canonical import canonical_json
from compiler.store.local import sha256_bytes


def measured_artifacts(ir: Resolved, unit_id: str, digests: DigestCache | None = None) -> dict[str, str]:
    """Action id -> key of what serving `unit_id` runs that is its model's own: every action of the
    model (`<kind>/<model>`: checkpoint, LLM-API options, tokenizer, ...) and the model's part of its
    host's Triton repository (`triton-repo/<host>#<model>`: a digest of those parameters). The rest of
    the host's repository and image belong to its other units too, and change with them."""
    unit = next(u for u in ir.units if u.id == unit_id)
    graph = lower_ir(ir, digests if digests is not None else DigestCache(None))
    out = {aid: graph.keys[aid] for aid in graph.order if aid.endswith("/" + unit.model)}
    repo = graph.actions.get(f"triton-repo/{unit.host}")
    if repo is not None:
        part = next((m for m in repo.params.models if m.name == unit.model), None)
        if part is not None:
            out[f"triton-repo/{unit.host}#{unit.model}"] = sha256_bytes(canonical_json(part.to_json()))
    return out


def as_served(ir: Resolved, model: str, record: TuneRecord) -> Resolved:
    """The IR with `model`'s limit as the unit served it while it was measured (the record's
    `served`): its number, and the record it came from (None: it was a number in the spec)."""
    rm = ir.models[model]
    served = record.served
    spec = rm.spec.model_copy(update={"limits": rm.spec.limits.model_copy(
        update={"max_batch_size": served.max_batch_size})})
    measured = None
    if served.measured_digest is not None and rm.measured is not None:
        measured = dataclasses.replace(rm.measured, digest=served.measured_digest, limit=served.max_batch_size)
    models = {**ir.models, model: dataclasses.replace(rm, spec=spec, measured=measured)}
    full = ir.spec.model_copy(update={"models": {**ir.spec.models, model: spec}})
    return dataclasses.replace(ir, spec=full, models=models)


def artifact_changes(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    out = []
    for aid in sorted(set(recorded) | set(now)):
        if aid not in now:
            out.append(f"{aid} is no longer built")
        elif aid not in recorded:
            out.append(f"{aid} is new")
        elif recorded[aid] != now[aid]:
            out.append(f"{aid} changed")
    return out


def record_changes(ir: Resolved, digests: DigestCache | None = None) -> dict[str, list[str]]:
    """Per model with a measured limit: what its record measured that the spec no longer describes
    (empty: the record is current)."""
    out = {}
    for name, rm in sorted(ir.models.items()):
        if rm.measured is None:
            continue
        record = rm.measured.record
        changes = spec_changes(ir, name, rm.measured)
        if any(u.id == record.unit for u in ir.units):
            changes += artifact_changes(record.artifacts,
                                        measured_artifacts(as_served(ir, name, record), record.unit, digests))
        out[name] = changes
    return out


def stale_diagnostics(ir: Resolved, digests: DigestCache | None = None,
                      changed: dict[str, list[str]] | None = None) -> list[Diagnostic]:
    """K914 for every model whose measured limit no longer describes the spec (`changed`: from
    record_changes, when the caller has it)."""
    out = []
    for name, changes in (changed if changed is not None else record_changes(ir, digests)).items():
        rm = ir.models[name]
        record = rm.measured.record
        if not changes:
            continue
        shown = changes[:4] + ([f"{len(changes) - 4} more"] if len(changes) > 4 else [])
        doc = ir.document
        out.append(Diagnostic(
            MeasuredLimitStale.code, MeasuredLimitStale.severity,
            f"model {name!r}: {rm.measured.ref} was measured on other artifacts or settings than the spec now "
            f"describes: {'; '.join(shown)}",
            doc.file, doc.span_of(("models", name, "limits", "max_batch_size", "measured")),
            f"build and serve the spec, then run `kiln tune {doc.file} --unit {record.unit} --url URL` and commit "
            f"the new record (the limit {rm.measured.limit} still comes from the old one)"))
    return out
