"""JSON parsing bounded in nesting depth and number size, for files Kiln reads back but did not just
write (store records, refs, the digest cache; anything a person, a disk or a cache may have changed).

`json.loads` recurses once per nesting level (`[[[[...` 100,000 deep raises RecursionError, which
callers catching ValueError miss) and turns a 100,000-digit number into an int in quadratic time
(or refuses it with a ValueError past 4,300 digits). Here nesting is refused past `max_depth`
(the parser's own recursion guard stops it near 1,000 levels, the result's depth is then counted),
number literals past `max_number_chars` characters are refused before conversion, and so are
NaN/Infinity (not JSON). Every failure is one exception type,
BoundedJSONError (a ValueError), whose message says what was wrong.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["BoundedJSONError", "loads_bounded"]

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_NUMBER_CHARS = 100  # digits, sign, point and exponent of one number literal


class BoundedJSONError(ValueError):
    """Not JSON, or JSON beyond the bounds given to `loads_bounded`."""


def _check_depth(value: Any, max_depth: int) -> None:
    """Raise when arrays/objects nest deeper than `max_depth` (iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > max_depth:
                raise BoundedJSONError(f"nested deeper than {max_depth} levels")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def loads_bounded(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH,
                  max_number_chars: int = DEFAULT_MAX_NUMBER_CHARS, max_chars: int | None = None) -> Any:
    """`json.loads(text)`, refusing (BoundedJSONError) text longer than `max_chars`, nesting deeper
    than `max_depth`, a number literal longer than `max_number_chars` and NaN/Infinity. Bytes must
    be UTF-8."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BoundedJSONError(f"not UTF-8 (byte {e.start})") from None
    if max_chars is not None and len(text) > max_chars:
        raise BoundedJSONError(f"longer than {max_chars} characters")

    def number(kind, convert):
        def parse(literal: str):
            if len(literal) > max_number_chars:
                raise BoundedJSONError(f"{kind} literal longer than {max_number_chars} characters")
            value = convert(literal)
            if not math.isfinite(value):  # 1e999 parses as inf
                raise BoundedJSONError(f"number {literal[:20]} is out of range")
            return value
        return parse

    def constant(name: str):
        raise BoundedJSONError(f"{name} is not JSON")

    try:
        value = json.loads(text, parse_int=number("integer", int), parse_float=number("number", float),
                           parse_constant=constant)
    except BoundedJSONError:
        raise
    except RecursionError:  # the C parser counts its nesting against the interpreter's recursion limit
        raise BoundedJSONError(f"nested deeper than {max_depth} levels") from None
    except ValueError as e:
        raise BoundedJSONError(str(e)[:120]) from None
    _check_depth(value, max_depth)
    return value
