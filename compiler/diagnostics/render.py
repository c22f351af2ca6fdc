"""Output formats for diagnostics: text (compiler style, with the source line), JSON and SARIF 2.1.0."""

from __future__ import annotations

import json
import re
from typing import Callable, Mapping

from .model import Diagnostic, Severity
from .rules import registered_rule

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def summary_line(diags: list[Diagnostic]) -> str:
    errors = sum(d.severity is Severity.ERROR for d in diags)
    warnings = sum(d.severity is Severity.WARNING for d in diags)
    if not errors and not warnings:
        return "no problems found"
    parts = []
    if errors:
        parts.append(f"{errors} error{'s' * (errors != 1)}")
    if warnings:
        parts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    return ", ".join(parts)


def shown(text: str) -> str:
    """`text` as a terminal may show it: every character that is not printable (controls, escape
    sequences, line breaks, bidirectional overrides, zero-width and other format characters, lone
    surrogates) written as its Python escape (\\x1b, \\n, \\u202e, \\udc80). A name, path or value
    from a spec reaches messages as the user wrote it; escaped here, it can neither move the cursor,
    retitle the window, forge a line of output nor reorder what the reader sees, and any text can
    be encoded on any stream. Printable text (any script) is left as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    if c in _SHORT:
        return _SHORT[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def render_text(diags: list[Diagnostic], sources: Mapping[str, str], *, color: bool = False) -> str:
    out: list[str] = []
    for d in diags:
        out.append(_text_one(d, sources.get(d.file), color))
    return "\n".join(out)


def _paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def _text_one(d: Diagnostic, source: str | None, color: bool) -> str:
    sev_color = {"error": "1;31", "warning": "1;33", "note": "1;36"}[d.severity.value]
    # Everything but the code and the numbers may hold what a user wrote: shown() escapes it.
    head = (f"{shown(d.file)}:{d.span.line}:{d.span.column}: "
            f"{_paint(d.severity.value, sev_color, color)}: {shown(d.message)} [{d.code}]")
    lines = [head]
    if source is not None:
        src_lines = source.splitlines()
        if 0 < d.span.line <= len(src_lines):
            raw = src_lines[d.span.line - 1].replace("\t", " ")
            gutter = f"{d.span.line:>5} | "
            width = 1
            if d.span.end_line == d.span.line and d.span.end_column and d.span.end_column > d.span.column:
                width = d.span.end_column - d.span.column
            width = max(1, min(width, len(raw) - d.span.column + 1 if len(raw) >= d.span.column else 1))
            # the caret under the escaped text: the escapes before and inside the span widen it
            start = len(shown(raw[:d.span.column - 1]))
            width = max(1, len(shown(raw[d.span.column - 1:d.span.column - 1 + width])))
            lines.append(gutter + shown(raw))
            lines.append(" " * (len(gutter) - 2) + "| " + " " * start + _paint("^" * width, sev_color, color))
    for note in d.notes:
        lines.append(f"  note: {shown(note)}")
    if d.help:
        lines.append(f"  help: {shown(d.help)}")
    return "\n".join(lines)


_SURROGATES = re.compile("[\ud800-\udfff]")


def unicode_text(text: str) -> str:
    """`text` with every lone surrogate (a file name's undecodable byte, a record's "\\udc80") as its
    escape: JSON may spell one, but it is no Unicode character, and strict readers (SARIF viewers
    among them) refuse the document. Everything else, control characters included, stays as it is
    (JSON escapes those)."""
    return _SURROGATES.sub(lambda m: _escape(m.group()), text)


def diagnostic_dict(d: Diagnostic) -> dict:
    return {
        "code": d.code,
        "severity": d.severity.value,
        "message": unicode_text(d.message),
        "file": unicode_text(d.file),
        "line": d.span.line,
        "column": d.span.column,
        "end_line": d.span.end_line,
        "end_column": d.span.end_column,
        "help": unicode_text(d.help) if d.help is not None else None,
        "notes": [unicode_text(n) for n in d.notes],
    }


def render_json(diags: list[Diagnostic]) -> str:
    payload = {
        "diagnostics": [diagnostic_dict(d) for d in diags],
        "errors": sum(d.is_error for d in diags),
        "warnings": sum(d.severity is Severity.WARNING for d in diags),
    }
    return json.dumps(payload, indent=2, sort_keys=True)


def render_sarif(diags: list[Diagnostic], version: str) -> str:
    codes = sorted({d.code for d in diags})
    rules = []
    for code in codes:
        rule = registered_rule(code)
        doc = rule.doc() if rule else ""
        first = doc.split("\n\n")[0].replace("\n", " ") if doc else code
        rules.append({
            "id": code,
            "name": rule.name if rule else code,
            "shortDescription": {"text": first},
            "fullDescription": {"text": doc or first},
            "help": {"text": f"{doc}\n\nRun `kiln explain {code}` for details."},
            "defaultConfiguration": {"level": _level(rule.severity) if rule else "error"},
        })
    index = {c: i for i, c in enumerate(codes)}
    results = []
    for d in diags:
        region = {"startLine": d.span.line, "startColumn": d.span.column}
        if d.span.end_line:
            region["endLine"] = d.span.end_line
        if d.span.end_column:
            region["endColumn"] = d.span.end_column
        text = unicode_text(d.message + (f"\nhelp: {d.help}" if d.help else ""))
        results.append({
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": _level(d.severity),
            "message": {"text": text},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": unicode_text(d.file).replace("\\", "/")},
                                                "region": region}}],
        })
    doc = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "kiln", "version": version, "rules": rules}},
            "results": results,
        }],
    }
    return json.dumps(doc, indent=2, sort_keys=True)


def _level(sev: Severity) -> str:
    return {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "note"}[sev]


FORMATS: dict[str, Callable[..., str]] = {"text": render_text, "json": render_json, "sarif": render_sarif}
