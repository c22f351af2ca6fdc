"""Point a model's `limits.max_batch_size` at a measurement record by editing the spec's text.

Only that value changes: the rest of the file (comments, order, flow or block style) is kept byte
for byte, which a YAML round trip would not promise. The edit uses the loader's source positions;
the result is loaded again and must hold exactly the new reference, or nothing is written.
"""

from __future__ import annotations

from compiler.spec.loader import Document, load_text


class EditError(Exception):
    pass


def _offset(text: str, line: int, column: int) -> int:
    """The offset of a 1-based line and column."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts[line - 1] + column - 1


def _indent_of(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    line = text[start:offset]
    return line[: len(line) - len(line.lstrip(" "))]


def with_measured_limit(doc: Document, model: str, ref: str) -> str:
    """The spec's text with `models.<model>.limits.max_batch_size` set to `{measured: ref}`."""
    text, value = doc.text, f"{{measured: {ref}}}"
    path = ("models", model, "limits", "max_batch_size")
    span = doc.value_spans.get(path)
    if span is not None and span.end_line is not None:
        start, end = _offset(text, span.line, span.column), _offset(text, span.end_line, span.end_column)
        while end > start and text[end - 1] in " \t\r\n":  # a block value's span runs to the next line
            end -= 1
        new = text[:start] + value + text[end:]
    elif ("models", model, "limits") in doc.value_spans:
        lim = doc.value_spans[("models", model, "limits")]
        start = _offset(text, lim.line, lim.column)
        if text[start] == "{":  # flow mapping: the new key goes first
            new = text[:start + 1] + f"max_batch_size: {value}, " + text[start + 1:]
        else:  # block mapping: a line before its first key, at the same indentation
            indent = _indent_of(text, start)
            line_start = text.rfind("\n", 0, start) + 1
            new = text[:line_start] + f"{indent}max_batch_size: {value}\n" + text[line_start:]
    else:
        key = doc.key_spans.get(("models", model))
        body = doc.value_spans.get(("models", model))
        if key is None or body is None:
            raise EditError(f"the spec has no model {model!r}")
        start = _offset(text, body.line, body.column)
        if text[start] == "{":
            new = text[:start + 1] + f"limits: {{max_batch_size: {value}}}, " + text[start + 1:]
        else:
            indent = _indent_of(text, start)
            line_start = text.rfind("\n", 0, start) + 1
            new = text[:line_start] + f"{indent}limits: {{max_batch_size: {value}}}\n" + text[line_start:]
    check = load_text(new, doc.file)
    got = None
    if check.document is not None:
        got = (((check.document.data.get("models") or {}).get(model) or {}).get("limits") or {}).get("max_batch_size")
    if got != {"measured": ref}:
        raise EditError(f"could not write the reference into {doc.file}; set "
                        f"`models.{model}.limits.max_batch_size: {value}` by hand")
    return new
