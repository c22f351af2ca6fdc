"""K914, K917: measurement records the spec has moved away from, as the records pass found them
(compiler/ir/tune_inputs.py). The keys of what a record measured are compared once the spec is
lowered (compiler/staleness.py), with the same words (`stale_diagnostic`)."""

from __future__ import annotations

from typing import Iterable

from compiler.diagnostics import Diagnostic, Severity

from .base import Check, CheckContext


def _path(model: str) -> tuple:
    return ("models", model, "limits", "max_batch_size", "measured")


class MeasuredLimitStale(Check):
    """A measured limit was taken against something other than what the spec now describes.

    `kiln tune` records what it measured: the artifact keys of the model (checkpoint, LLM-API
    options, tokenizer, ...), the unit's GPU slice and the clocks and power limit the spec locks it
    at, the SLA and the workload. When the spec now builds other artifacts for that model (a new
    quantization, a runtime option, another TensorRT-LLM), serves it on another slice or at other
    clocks or power, or asks for another SLA or workload, the number no
    longer answers the question the spec asks: serve the new build, run `kiln tune` again and
    commit the new record. The batch limit it set is still built, so this is a warning.
    """

    code = "K914"
    name = "measured-limit-stale"
    severity = Severity.WARNING
    order = 95

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for model, state in ctx.ir.records.items():
            if state.changes:
                yield stale_diagnostic(ctx.ir, model, list(state.changes))


class RecordPredatesInputs(Check):
    """A measurement record written before records kept their input fingerprints (kiln.tune/v1).

    `kiln validate` compares a record's unit, SLA and workload with the spec, and what each measured
    artifact was built from through the record's `inputs`, reading the IR only. A v1 record has no
    `inputs`: its artifact keys are compared where the spec is lowered (`kiln plan`, `kiln build`),
    and K914 is reported there. Running `kiln tune` again writes a current record.
    """

    code = "K917"
    name = "measured-record-predates-inputs"
    severity = Severity.NOTE
    order = 95

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for model, state in ctx.ir.records.items():
            if state.predates_inputs:
                yield ctx.diag(
                    self, _path(model),
                    f"model {model!r}: {ctx.ir.models[model].measured.ref} predates the records' input fingerprints; "
                    "`kiln validate` compares its unit, SLA and workload only, `kiln plan` and `kiln build` its "
                    "artifacts", help="run `kiln tune` again to write a current record")


def stale_diagnostic(ir, model: str, changes: list[str]) -> Diagnostic:
    """K914 for a model whose record measured what `changes` name (by the IR or by artifact key)."""
    rm = ir.models[model]
    record = rm.measured.record
    shown = changes[:4] + ([f"{len(changes) - 4} more"] if len(changes) > 4 else [])
    doc = ir.document
    return Diagnostic(
        MeasuredLimitStale.code, MeasuredLimitStale.severity,
        f"model {model!r}: {rm.measured.ref} was measured on other artifacts or settings than the spec now "
        f"describes: {'; '.join(shown)}",
        doc.file, doc.span_of(_path(model)),
        f"build and serve the spec, then run `kiln tune {doc.file} --unit {record.unit} --url URL` and commit "
        f"the new record (the limit {rm.measured.limit} still comes from the old one)")
