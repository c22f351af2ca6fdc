"""Parse a loaded document into a typed Spec; every validation error becomes a positioned diagnostic."""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from pydantic import BaseModel, ValidationError

from compiler.diagnostics import Diagnostic, Span

from . import rules as R
from .loader import Document
from .models import MigInstance, Spec
from .types import FORMAT_ERROR, VALUE_ERROR

_TYPE_NAMES = {
    "int_type": "an integer", "int_parsing": "an integer", "float_type": "a number", "float_parsing": "a number",
    "string_type": "a string", "bool_type": "true or false", "bool_parsing": "true or false",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
    "list_type": "a list", "tuple_type": "a list", "none_required": "null",
}
_RANGE_TYPES = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long",
                "multiple_of", "finite_number"}
# Keys that exist on hosts and GPUs but make no sense on a MIG instance: say why instead of "unknown key".
_GPU_ONLY_KEYS = {"clocks", "application_clocks", "power_limit_w"}


@dataclass
class ParseResult:
    spec: Spec | None
    diagnostics: list[Diagnostic]
    # When the spec has errors only inside some `models` or `hosts` entries: the spec without those
    # entries, so the semantic checks can still look at everything else in the same run. Nothing is
    # ever built from it.
    partial: Spec | None = None
    set_aside: dict[str, frozenset[str]] = field(default_factory=dict)  # "models"/"hosts" -> names left out


def parse_document(doc: Document) -> ParseResult:
    data = doc.data
    version_diag = _check_version(doc)
    if version_diag is not None:
        return ParseResult(None, [version_diag])
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        partial, set_aside = _without_broken_entries(data, errors)
        return ParseResult(None, [_to_diagnostic(doc, err) for err in errors], partial, set_aside)
    except (RecursionError, OverflowError, MemoryError) as exc:  # defensive: bounded by the loader already
        return ParseResult(None, [Diagnostic(R.InvalidValue.code, R.InvalidValue.severity,
                                             f"spec cannot be read: {type(exc).__name__}", doc.file, Span.unknown())])
    return ParseResult(spec, [])


def _without_broken_entries(data: Any, errors: list[dict]) -> tuple[Spec | None, dict[str, frozenset[str]]]:
    """The spec with every `models`/`hosts` entry that has an error left out, if the rest is valid.

    An error anywhere else (the toolchain, the name, the target...) concerns every entry, so no
    partial spec is made then."""
    if not isinstance(data, dict):
        return None, {}
    broken: dict[str, set[str]] = {"models": set(), "hosts": set()}
    for err in errors:
        path, _ = _data_path(data, tuple(err["loc"]))
        if len(path) < 2 or path[0] not in broken or not isinstance(data.get(path[0]), dict) \
                or path[1] not in data[path[0]]:
            return None, {}
        broken[path[0]].add(path[1])
    pruned = {k: v for k, v in data.items()}
    for section, names in broken.items():
        if names:
            pruned[section] = {k: v for k, v in data[section].items() if k not in names}
    try:
        return Spec.model_validate(pruned), {k: frozenset(v) for k, v in broken.items()}
    except (ValidationError, RecursionError, OverflowError, MemoryError):
        return None, {}


def _check_version(doc: Document) -> Diagnostic | None:
    data = doc.data
    if "kiln" not in data:
        return Diagnostic(R.UnsupportedVersion.code, R.UnsupportedVersion.severity,
                          "the spec does not say its version", doc.file, _start(doc.span_of(())),
                          help="add `kiln: v1` as the first line")
    if data["kiln"] != "v1":
        return Diagnostic(R.UnsupportedVersion.code, R.UnsupportedVersion.severity,
                          f"unsupported spec version {data['kiln']!r}", doc.file, doc.span_of(("kiln",)),
                          help="this compiler reads `kiln: v1`")
    return None


def _data_path(data: Any, loc: tuple) -> tuple[tuple, bool]:
    """Strip pydantic's union tags from `loc`, keeping only steps that exist in the data.

    Returns the data path and whether the error is about a mapping key (`[key]`)."""
    path: list[Any] = []
    cur = data
    is_key = False
    for step in loc:
        if step == "[key]":
            is_key = True
            break
        if isinstance(cur, dict) and isinstance(step, str) and step in cur:
            path.append(step)
            cur = cur[step]
        elif isinstance(cur, list) and isinstance(step, int) and 0 <= step < len(cur):
            path.append(step)
            cur = cur[step]
        elif isinstance(step, str) and step.startswith("<"):
            continue  # a union tag
        else:
            path.append(step)  # a missing key: keep it so the message can name it
            cur = None
    return tuple(path), is_key


def _to_diagnostic(doc: Document, err: dict) -> Diagnostic:
    etype: str = err["type"]
    path, is_key = _data_path(doc.data, tuple(err["loc"]))
    where = _dotted(path)
    value = err.get("input")
    ctx = err.get("ctx") or {}

    def make(rule: type[R.Rule], message: str, span: Span, help: str | None = None) -> Diagnostic:
        return Diagnostic(rule.code, rule.severity, message, doc.file, span, help or None)

    if etype == "extra_forbidden":
        key = path[-1]
        owner = _model_at(path[:-1])
        if owner is MigInstance and key in _GPU_ONLY_KEYS:
            return make(R.NotAllowedHere, f"`{key}` cannot be set on a MIG instance", doc.span_of(path, key=True),
                        "clocks and power limits belong to the physical GPU and are shared by all its MIG "
                        "instances; set them on the host or on the `gpus` entry")
        choices = sorted(owner.model_fields) if owner else []
        return make(R.UnknownKey, f"unknown key {key!r} in {_dotted(path[:-1]) or 'the spec'}",
                    doc.span_of(path, key=True), _did_you_mean(str(key), choices, "valid keys"))
    if etype == "missing":
        parent = path[:-1]
        span = doc.span_of(parent, key=True) if parent else _start(doc.span_of(()))
        field = _model_at(parent).model_fields.get(str(path[-1])) if _model_at(parent) else None
        desc = f": {_first_sentence(field.description)}" if field is not None and field.description else ""
        return make(R.MissingKey, f"missing required key {path[-1]!r} in {_dotted(parent) or 'the spec'}", span,
                    f"add `{path[-1]}` ({desc[2:]})" if desc else f"add `{path[-1]}`")
    span = doc.span_of(path, key=is_key)
    if etype == FORMAT_ERROR:
        what = "name" if is_key else where
        return make(R.InvalidFormat, f"{what}: '{ctx.get('value')}' is not {ctx.get('what')}", span, ctx.get("help"))
    if etype == VALUE_ERROR:
        key = ctx.get("key")
        if key:
            span = doc.span_of(path + (key,), key=True)
        return make(R.InvalidValue, f"{where or 'spec'}: {err['msg']}", span, ctx.get("help"))
    if etype in ("literal_error", "enum"):
        choices = _literal_choices(path)
        shown = _show(value)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        help = f"choices: {', '.join(choices)}" if numeric else _did_you_mean(str(value), choices, "choices")
        return make(R.InvalidChoice, f"{where}: {shown} is not a valid choice", span, help)
    if etype == "too_short" and ctx.get("min_length") == 1:
        return make(R.InvalidValue, f"{where}: must not be empty", span)
    if etype in _RANGE_TYPES:
        return make(R.OutOfRange, f"{where}: {_show(value)} is out of range: {_range_text(etype, ctx)}", span)
    if etype in _TYPE_NAMES or etype.endswith("_type") or etype == "union_tag_invalid":
        expected = _TYPE_NAMES.get(etype, "a different type")
        if etype == "union_tag_invalid":
            expected = "a value of another kind"
        hint = None
        if etype == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
            hint = f'quote it: "{_source_text(doc, span) or _show(value)}"'
        if etype in ("int_type", "float_type") and isinstance(value, str):
            # a quoted number is fixed by unquoting it; any other text is not a number at all
            number = "an integer" if etype == "int_type" else "a number"
            hint = ("write the number without quotes" if _is_number(value.strip()) else
                    f"{_show(value)} is not a number: write {number}, without quotes")
        got = "null" if value is None else f"{_type_of(value)} {_show(value)}"
        if isinstance(value, (dict, list)):
            got = _show(value)
        return make(R.WrongType, f"{where or 'spec'}: expected {expected}, got {got}", span, hint)
    return make(R.InvalidValue, f"{where or 'spec'}: {err['msg']}", span)


# --- helpers ----------------------------------------------------------------------------------

def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.lower() not in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity")


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _show(value: Any) -> str:
    """A value as YAML would spell it, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of {len(str(value)) if value.bit_length() < 10000 else 'thousands of'} digits"
    text = repr(value) if isinstance(value, str) else str(value) if isinstance(value, (int, float)) else \
        {dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)
    return text if len(text) <= 60 else text[:57] + "..."


def _start(span: Span) -> Span:
    return Span(span.line, span.column)


def _source_text(doc: Document, span: Span) -> str | None:
    """The value exactly as written, when it sits on one line."""
    if span.end_line != span.line or not span.end_column:
        return None
    text = doc.line_text(span.line)[span.column - 1: span.end_column - 1].strip()
    return text or None


def _type_of(value: Any) -> str:
    if value is None:
        return "a null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


def _first_sentence(text: str) -> str:
    """The description's first sentence, abbreviations such as "e.g." kept whole."""
    flat = " ".join(text.split())
    m = re.match(r"(.+?(?<!e\.g)(?<!i\.e)\.)(\s|$)", flat)
    return (m.group(1) if m else flat).rstrip(".")


def _range_text(etype: str, ctx: dict) -> str:
    return {
        "greater_than": f"must be greater than {ctx.get('gt')}",
        "greater_than_equal": f"must be at least {ctx.get('ge')}",
        "less_than": f"must be less than {ctx.get('lt')}",
        "less_than_equal": f"must be at most {ctx.get('le')}",
        "too_short": f"needs at least {ctx.get('min_length')} item(s)",
        "too_long": f"allows at most {ctx.get('max_length')} item(s)",
        "multiple_of": f"must be a multiple of {ctx.get('multiple_of')}",
        "finite_number": "must be a finite number",
    }.get(etype, "out of range")


def _did_you_mean(value: str, choices: list[str], label: str) -> str | None:
    if not choices:
        return None
    close = difflib.get_close_matches(value.lower(), [c.lower() for c in choices], n=1, cutoff=0.6)
    listed = ", ".join(choices)
    if close:
        match = next(c for c in choices if c.lower() == close[0])
        return f"did you mean {match!r}? {label}: {listed}"
    return f"{label}: {listed}"


def _unwrap(tp: Any) -> list[Any]:
    """The concrete types an annotation may hold (Annotated, Optional and unions flattened)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(tp):
            out.extend(_unwrap(arg))
        return out
    return [tp]


def _annotation_at(path: tuple) -> list[Any]:
    current: list[Any] = [Spec]
    for step in path:
        nxt: list[Any] = []
        for tp in current:
            origin = typing.get_origin(tp)
            if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(step, str):
                f = tp.model_fields.get(step)
                if f is not None:
                    nxt.extend(_unwrap(f.annotation))
            elif origin is dict and isinstance(step, str):
                nxt.extend(_unwrap(typing.get_args(tp)[1]))
            elif origin is list and isinstance(step, int):
                nxt.extend(_unwrap(typing.get_args(tp)[0]))
        current = nxt
    return current


def _model_at(path: tuple) -> type[BaseModel] | None:
    for tp in _annotation_at(path):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
    return None


def _literal_choices(path: tuple) -> list[str]:
    out: list[str] = []
    for tp in _annotation_at(path):
        if typing.get_origin(tp) is typing.Literal:
            out.extend(str(a) for a in typing.get_args(tp))
    return out
