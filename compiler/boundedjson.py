"""JSON parsing bounded in size, nesting depth and number length, for files a user or a disk may
have changed (the lock file, tune records, what a tool wrote).

`json.loads` recurses once per nesting level (`[[[[...` 100,000 deep raises RecursionError, which
callers catching ValueError miss), converts a 100,000-digit integer in quadratic time (or raises a
ValueError past 4,300 digits), and accepts NaN and Infinity, which are not JSON. `loads_bounded`
refuses all of these before parsing, with the line and column where they are, by one pass over the
text's strings, brackets and numbers; the parse itself keeps the same refusals as a second guard.
Every failure is one exception, BoundedJSONError (a ValueError), with a message and a position.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["BoundedJSONError", "loads_bounded"]

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_NUMBER_CHARS = 100  # digits, sign, point and exponent of one number literal


class BoundedJSONError(ValueError):
    """Not JSON, or JSON beyond the bounds given to `loads_bounded`; `line` and `column` are 1-based."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(f"{message} (line {line}, column {column})")
        self.message, self.line, self.column = message, line, column


# What the bounds look at, outside strings: a string (skipped whole; an unterminated one runs to the
# end), a bracket, a bare word (NaN, Infinity: not JSON) or a number literal.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]|-?[A-Za-z]+|-?[0-9][0-9.eE+-]*')


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _scan(text: str, max_depth: int, max_number_chars: int) -> None:
    depth = 0
    for m in _TOKEN.finditer(text):
        c = m.group()[0]
        if c == '"':
            continue
        if c in "[{":
            depth += 1
            if depth > max_depth:
                raise BoundedJSONError(f"nested deeper than {max_depth} levels", *_position(text, m.start()))
        elif c in "]}":
            depth -= 1
        elif m.group().lstrip("-") in ("NaN", "Infinity"):
            raise BoundedJSONError(f"{m.group()} is not JSON (a number must be finite)", *_position(text, m.start()))
        elif c.isdigit() or c == "-":
            if len(m.group()) > max_number_chars:
                raise BoundedJSONError(f"a number of {len(m.group())} characters (at most {max_number_chars})",
                                       *_position(text, m.start()))
            if "e" in m.group().lower():  # 1e999 would parse as infinity
                try:
                    finite = math.isfinite(float(m.group()))
                except ValueError:
                    continue  # not a number: the parse says where
                if not finite:
                    raise BoundedJSONError(f"{m.group()} is too large for a number", *_position(text, m.start()))


def loads_bounded(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH,
                  max_number_chars: int = DEFAULT_MAX_NUMBER_CHARS, max_chars: int | None = None) -> Any:
    """`json.loads(text)`, refusing (BoundedJSONError) text longer than `max_chars`, nesting deeper
    than `max_depth`, a number literal longer than `max_number_chars` and NaN/Infinity (also as
    a number too large for a float, 1e999). Bytes must be UTF-8."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            before = bytes(text)[:e.start].decode("utf-8")
            raise BoundedJSONError(f"not UTF-8 text (byte 0x{text[e.start]:02x})", *_position(before, len(before))) \
                from None
    if max_chars is not None and len(text) > max_chars:
        raise BoundedJSONError(f"longer than {max_chars} characters")
    _scan(text, max_depth, max_number_chars)

    def number(literal: str, convert) -> Any:
        if len(literal) > max_number_chars:
            raise BoundedJSONError(f"a number of {len(literal)} characters (at most {max_number_chars})")
        value = convert(literal)
        if not math.isfinite(value):
            raise BoundedJSONError(f"{literal[:20]} is too large for a number")
        return value

    def constant(name: str) -> Any:
        raise BoundedJSONError(f"{name} is not JSON (a number must be finite)")

    try:
        return json.loads(text, parse_int=lambda s: number(s, int), parse_float=lambda s: number(s, float),
                          parse_constant=constant)
    except json.JSONDecodeError as e:
        raise BoundedJSONError(f"not JSON: {e.msg}", e.lineno, e.colno) from None
    except RecursionError:  # not reached after the scan; the parser's own guard, kept as one
        raise BoundedJSONError(f"nested deeper than {max_depth} levels") from None
