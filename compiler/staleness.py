"""Which measured limits were taken against something other than what the spec now builds (K914),
by artifact key.

A measurement record (compiler/ir/measured.py) lists the artifact keys of what `kiln tune`
measured. Comparing them needs the build graph, so this sits after lowering in the layering: the
commands that lower (compiler/build.prepare_spec: plan, build, publish; `kiln plan --base`) call
`keyed_diagnostics` for the records the IR's records pass found current or could not judge (a v1
record; the pass compares IR fingerprints, compiler/ir/tune_inputs.py). One subtlety: the record's own limit is
an input of the artifacts it measured the next time round (the LLM-API options carry the batch
limit, and their key the record's digest). So the keys are compared as the spec builds them
with the limit the unit served while it was measured (`record.served`): what the measurement
itself changed is not a change, everything else is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from compiler.checks.measured import stale_diagnostic
from compiler.ir import Resolved
from compiler.ir.measured import KIND, TuneRecord, spec_changes
from compiler.ir.tune_inputs import fingerprints
from compiler.lower import lower_ir
from compiler.store.canonical import canonical_json
from compiler.store.digests import DigestCache
from compiler.store.local import sha256_bytes

if TYPE_CHECKING:
    from compiler.pipeline import Validation


def measured_artifacts(ir: Resolved, unit_id: str, digests: DigestCache | None = None) -> dict[str, str]:
    """Action id -> key of what serving `unit_id` runs that is its model's own: every action of the
    model (`<kind>/<model>`: checkpoint, LLM-API options, tokenizer, ...) and the model's part of its
    host's Triton repository (`triton-repo/<host>#<model>`: a digest of those parameters). The rest of
    the host's repository and image belong to its other units too, and change with them."""
    unit = next(u for u in ir.units if u.id == unit_id)
    graph = lower_ir(ir, digests if digests is not None else DigestCache(None))
    # `<kind>/<model>` only: a node pool's `<kind>/<pool>/<model>` (image_context.part) is one pool's
    out = {aid: graph.keys[aid] for aid in graph.order if aid.count("/") == 1 and aid.endswith("/" + unit.model)}
    # the host's repository, or on a node pool the model's own (the same part of it is recorded)
    repo = graph.actions.get(f"triton-repo/{unit.host}") or graph.actions.get(f"triton-repo/{unit.host}/{unit.model}")
    if repo is not None:
        part = next((m for m in repo.params.models if m.name == unit.model), None)
        if part is not None:
            out[f"triton-repo/{unit.host}#{unit.model}"] = sha256_bytes(canonical_json(part.to_json()))
    return out


def what_was_measured(ir: Resolved, unit_id: str, digests: DigestCache | None = None) -> dict:
    """The fields of a record that say what serving `unit_id` ran, as the spec builds it now: its
    kind, the measured artifacts' keys and the IR fingerprints of what each was built from."""
    unit = next(u for u in ir.units if u.id == unit_id)
    artifacts = measured_artifacts(ir, unit_id, digests)
    return {"kind": KIND, "artifacts": artifacts, "inputs": fingerprints(ir, unit.model, artifacts, digests)}


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


def record_changes(ir: Resolved, digests: DigestCache | None = None,
                   models: list[str] | None = None) -> dict[str, list[str]]:
    """Per model with a measured limit (of `models`, when given): what its record measured that the
    spec no longer builds, by artifact key (empty: the record is current)."""
    out = {}
    for name, rm in sorted(ir.models.items()):
        if rm.measured is None or (models is not None and name not in models):
            continue
        record = rm.measured.record
        changes = spec_changes(ir, name, rm.measured)
        if any(u.id == record.unit for u in ir.units):
            changes += artifact_changes(record.artifacts,
                                        measured_artifacts(as_served(ir, name, record), record.unit, digests))
        out[name] = changes
    return out


def keyed_diagnostics(result: Validation, digests: DigestCache | None = None) -> None:
    """K914 into `result` for the records the records pass found current by the IR (or, a v1 record,
    could not judge: K917) whose artifact keys say otherwise: called once the spec is lowered, once."""
    ir = result.resolved
    if result.keys_compared or ir is None:
        return
    result.keys_compared = True
    current = [name for name, state in ir.records.items() if state.applies]
    if not current:
        return
    changed = record_changes(ir, digests, current)
    result.diagnostics.extend(stale_diagnostic(ir, name, changes) for name, changes in changed.items() if changes)
