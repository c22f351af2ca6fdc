"""`READS` (compiler/ir/tune_inputs.py) against the lowering it stands in for.

The records pass judges a `kiln tune` record without lowering: a measured artifact is stale when a
field its kind reads (READS) changed. Here every fingerprinted field of a measured model (each leaf
`_fields` gives, the files it names, the spec-wide pins) of several specs is changed to other valid
values, one field at a time; base and edit are lowered and the measured artifacts' keys compared
(compiler/staleness.measured_artifacts, what `kiln plan` compares). The values are not listed by
hand: they follow each field's type in compiler/spec/models.py (every other value of a Literal, a
boolean flipped, an integer doubled or halved within its bounds, None where it may be unset), plus a
few strings a type cannot make up (a path to another copy of the files, another pinned image).

Two properties: a kind whose key moved lists a changed field in READS (else a stale measurement
would pass as current), and a field READS lists for a kind moves that kind's key on some edit, or is
one of the few kept for the reason tune_inputs.py writes beside READS (`KEPT` here). Files count by
field (`source.path:file`): one file of a directory moving a kind's key shows the kind reads them.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from compiler.ir.tune_inputs import READS, _EVERY, _fields, _under
from compiler.pipeline import validate_text
from compiler.staleness import measured_artifacts
from compiler.store.digests import DigestCache

from .field_walk import BASES, EXAMPLES, STRINGS, Base, edited, other_values
from .field_walk import value_at as _value

KEPT = {
    **{(k, "source.path"): "the files under it are read; a path moved onto the same files keeps the keys"
       for k in ("quantize", "quality-gate", "engine", "tokenizer", "model-source")},
    **{(k, "quantization.activations"): "the recipe follows it; no other format validates on these specs"
       for k in ("quantize", "quality-gate", "engine")},
    ("triton-repo", "toolchain.triton_image"): "the server the unit ran: the host's image, not the model's part",
}
# fields no edit of these specs reaches (no other value validates), and why
UNREACHED = {"serving.instances": "K607 refuses more than one wherever a runtime runs instances (K812 elsewhere)"}


# --- the walk ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Edit:
    base: str
    field: str  # what was edited (a leaf of _fields)
    value: object
    diff: frozenset[str]  # the leaves of _fields that differ from the base's (more than `field` with companions)
    measured: frozenset[str]  # the base's measured artifacts
    moved: frozenset[str]  # those whose key changed, or that are no longer built


def _kind(artifact: str) -> str:
    return artifact.split("/", 1)[0]


def reads(kind: str, field: str) -> bool:
    return any(_under(field, p) for p in READS.get(kind, _EVERY))


def _measure(text: str, where: Path, model: str):
    result = validate_text(text, where, "kiln.yaml")
    if not result.ok:
        return None
    ir = result.resolved
    unit = next((u.id for u in ir.units if u.model == model), None)
    if unit is None:
        return None
    return measured_artifacts(ir, unit, DigestCache(None)), _fields(ir, model, DigestCache(None))


def _edited(base: Base, doc0: dict, field: str, value) -> str:
    """The spec with `field` (of the base's model, or `target`, or a toolchain pin) set to `value`,
    with its companions (field_walk.edited)."""
    path = (("target",) if field == "target" else ("toolchain", field.split(".", 1)[1])
            if field.startswith("toolchain.") else ("models", base.model, *field.split(".")))
    return yaml.safe_dump(edited(copy.deepcopy(doc0), path, value), sort_keys=False)


def _walk_base(base: Base, where: Path) -> tuple[list[Edit], set[str]]:
    """The edits of one base that validate, and the fields of it no value reached."""
    measured0, fields0 = _measure(base.text, where, base.model)
    doc0 = yaml.safe_load(base.text)
    spec = yaml.safe_load(base.text)
    model0 = _model_doc(base, where)
    edits, unreached = [], set()

    def record(field, value, now):
        measured, fields = now
        diff = frozenset(k for k in set(fields0) | set(fields) if fields0.get(k) != fields.get(k))
        moved = frozenset(a for a in measured0 if measured.get(a) != measured0[a])
        edits.append(Edit(base.name, field, value, diff, frozenset(measured0), moved))

    for field in fields0:
        if ":" in field:  # a file the model names: one more line in it
            rel = field.split(":", 1)[1] if field.startswith("source.path:") else None
            path = where / (_value(model0, "source.path") + "/" + rel if rel else
                            _value(model0, field.split(":", 1)[0]))
            kept = path.read_bytes()
            path.write_bytes(kept + b"\n")
            try:
                now = _measure(base.text, where, base.model)
            finally:
                path.write_bytes(kept)
            if now is None:
                unreached.add(field)
            else:
                record(field, "+1 line", now)
            continue
        if field == "target":
            values = [t for t in ("llmapi", "engine") if t != spec.get("target", "llmapi")]
        elif field.startswith("toolchain."):
            pin = field.split(".", 1)[1]
            current = spec["toolchain"].get(pin)
            values = ([current[:-4] + "beef"] if pin == "triton_image" else
                      [v for v in [*STRINGS[pin], None] if v != current])
        else:
            values = other_values(tuple(field.split(".")), _value(model0, field))
        reached = False
        for value in values:
            now = _measure(_edited(base, doc0, field, value), where, base.model)
            if now is not None:
                record(field, value, now)
                reached = True
        if not reached:
            unreached.add(field)
    return edits, unreached


def _model_doc(base: Base, where: Path) -> dict:
    result = validate_text(base.text, where, "kiln.yaml")
    return result.resolved.models[base.model].spec.model_dump(mode="json")


@dataclasses.dataclass(frozen=True)
class Walk:
    edits: list[Edit]
    unreached: set[str]  # fields no base reached, nor any leaf below them


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Walk:
    edits, fields = [], set()
    for base in BASES:
        where = tmp_path_factory.mktemp(base.name)
        for example in base.files:
            for item in (EXAMPLES / example).iterdir():
                if item.is_dir():
                    shutil.copytree(item, where / item.name, dirs_exist_ok=True)
        if (where / "model").is_dir():
            shutil.copytree(where / "model", where / "model-copy")  # the same files under another path
        got, missed = _walk_base(base, where)
        edits += got
        fields |= missed
    reached = {e.field for e in edits}
    # a field reached on another spec, or through the leaves below it (a section unset here, set there)
    return Walk(edits, {f for f in fields if not any(_under(r, f) for r in reached)})


# --- the properties ---------------------------------------------------------------------------------
def test_every_measured_artifact_whose_key_moved_reads_a_changed_field(walk: Walk) -> None:
    """The safety direction: validation never takes a record as current when what it measured is built
    differently (compiler/staleness.py would say so only where the spec is lowered)."""
    missed = [(e.base, e.field, e.value, a, sorted(e.diff)) for e in walk.edits for a in e.moved
              if not any(reads(_kind(a), f) for f in e.diff)]
    assert missed == []
    assert sum(1 for e in walk.edits if e.moved) > 100  # the walk moves keys, of every kind READS names
    assert {_kind(a) for e in walk.edits for a in e.moved} == set(READS)


def over_reports(walk: Walk) -> set[tuple[str, str]]:
    """(kind, field) that READS lists, edited on a spec that measures the kind, and no edit of the
    field alone moved the kind's key."""
    listed, shown = set(), set()
    for e in walk.edits:
        if e.diff != {e.field}:
            continue
        for a in e.measured:
            if reads(_kind(a), e.field):
                listed.add((_kind(a), e.field.split(":", 1)[0] + (":file" if ":" in e.field else "")))
                if a in e.moved:
                    shown.add((_kind(a), e.field.split(":", 1)[0] + (":file" if ":" in e.field else "")))
    return listed - shown


def test_every_field_reads_lists_moves_a_key_or_is_kept_for_its_reason(walk: Walk) -> None:
    assert sorted(over_reports(walk) - set(KEPT)) == []


def test_the_walk_reaches_every_field_it_fingerprints(walk: Walk) -> None:
    """Every fingerprinted field of the bases was edited to a valid value somewhere, but UNREACHED's."""
    assert walk.unreached == set(UNREACHED)
    fields = {e.field.split(":", 1)[0] for e in walk.edits}
    for section in ("source", "dtype", "quantization", "parallelism", "limits", "kernels", "runtime", "serving",
                    "target", "toolchain"):
        assert any(_under(f, section) for f in fields), section

