"""JSON parsing bounded in size, nesting depth and number length, for files a user or a disk may
have changed (the lock file, tune records, what a tool wrote).

`json.loads` recurses once per nesting level (`[[[[...` 100,000 deep raises RecursionError, which
callers catching ValueError miss), converts a 100,000-digit integer in quadratic time (or raises a
ValueError past 4,300 digits), and accepts NaN and Infinity, which are not JSON. `loads_bounded`
refuses all of these before parsing, with the line and column where they are, by a pass over the
text's strings and brackets (and its numbers, when a search in C finds one that may be too long).
Every failure is one exception, BoundedJSONError (a ValueError), with a message and a position.
"""

from __future__ import annotations

import functools
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


# Outside strings, what nests (brackets) and what is not JSON (NaN, Infinity); a string is skipped
# whole (an unterminated one runs to the end; possessive, so nothing backtracks).
_STRING = r'"(?:[^"\\]++|\\.)*+"?'
_NESTING = re.compile(_STRING + r'|[\[{]|[\]}]|-?(?:NaN|Infinity)', re.S)
_NUMBER = re.compile(_STRING + r'|-?[0-9][0-9.eE+-]*', re.S)


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _scan_nesting(text: str, max_depth: int) -> None:
    depth = 0
    for m in _NESTING.finditer(text):
        c = m.group()[0]
        if c == '"':
            continue
        if c in "[{":
            depth += 1
            if depth > max_depth:
                raise BoundedJSONError(f"nested deeper than {max_depth} levels", *_position(text, m.start()))
        elif c in "]}":
            depth -= 1
        else:
            raise BoundedJSONError(f"{m.group()} is not JSON (a number must be finite)", *_position(text, m.start()))


@functools.lru_cache(maxsize=8)
def _suspect(max_number_chars: int) -> re.Pattern:
    """Anywhere in the text (strings too): a run that could be a number past the limit, or an
    exponent that could overflow a float. Searched in C; only a hit costs the token scan."""
    return re.compile(r"[0-9.eE+-]{%d,}|[eE][+-]?0*[0-9]{3,}" % (max_number_chars + 1))


def _scan_numbers(text: str, max_number_chars: int) -> None:
    if not _suspect(max_number_chars).search(text):
        return
    for m in _NUMBER.finditer(text):
        literal = m.group()
        if literal[0] == '"':
            continue
        if len(literal) > max_number_chars:
            raise BoundedJSONError(f"a number of {len(literal)} characters (at most {max_number_chars})",
                                   *_position(text, m.start()))
        if "e" in literal or "E" in literal:  # 1e999 would parse as infinity
            try:
                finite = math.isfinite(float(literal))
            except ValueError:
                continue  # not a number: the parse says where
            if not finite:
                raise BoundedJSONError(f"{literal} is too large for a number", *_position(text, m.start()))


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
    _scan_nesting(text, max_depth)
    _scan_numbers(text, max_number_chars)

    def constant(name: str) -> Any:  # the scan refused these already; the parser's hook, kept as a guard
        raise BoundedJSONError(f"{name} is not JSON (a number must be finite)")

    try:  # numbers by the parser's own fast path: the scan has bounded every one outside strings
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise BoundedJSONError(f"not JSON: {e.msg}", e.lineno, e.colno) from None
    except RecursionError:  # not reached after the scan; the parser's own guard, kept as one
        raise BoundedJSONError(f"nested deeper than {max_depth} levels") from None
