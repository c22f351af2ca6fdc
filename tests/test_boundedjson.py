"""compiler/boundedjson.py: JSON of files Kiln reads back, bounded in nesting and number size."""

from __future__ import annotations

import pytest

from compiler.boundedjson import BoundedJSONError, loads_bounded


@pytest.mark.parametrize("text", ['{"a": [1, 2.5, "x", null, true]}', "[]", '"s"', "0", "-1e10"])
def test_what_json_loads_reads_within_the_bounds_is_read_the_same(text: str) -> None:
    import json

    assert loads_bounded(text) == json.loads(text)
    assert loads_bounded(text.encode()) == json.loads(text)


@pytest.mark.parametrize("text,why", [
    ("[" * 100_000, "nested deeper than 64"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
    ('{"a":' * 65 + "1" + "}" * 65, "nested deeper than 64"),
    ("[" * 65 + "]" * 65, "nested deeper than 64"),
    ("9" * 5_000, "a number of 5000 characters \\(at most 100\\)"),
    ("[" + "1" * 101 + "]", "a number of 101 characters \\(at most 100\\)"),
    ("1." + "5" * 200, "a number of 202 characters \\(at most 100\\)"),
    ("1e999", "too large for a number"),
    ("NaN", "NaN is not JSON"),
    ("[-Infinity]", "-Infinity is not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    ("{", "Expecting"),
])
def test_deep_nesting_huge_numbers_and_non_json_are_one_clear_error(text, why: str) -> None:
    with pytest.raises(BoundedJSONError, match=why):
        loads_bounded(text)


def test_the_bounds_are_the_callers() -> None:
    assert loads_bounded("[" * 64 + "]" * 64) is not None
    assert loads_bounded("[[1]]", max_depth=2) == [[1]]
    with pytest.raises(BoundedJSONError, match="deeper than 1"):
        loads_bounded("[[1]]", max_depth=1)
    assert loads_bounded("1" * 200, max_number_chars=200) == int("1" * 200)
    with pytest.raises(BoundedJSONError, match="longer than 3 characters"):
        loads_bounded("1234", max_chars=3)


def test_a_bounded_json_error_is_a_value_error() -> None:
    assert issubclass(BoundedJSONError, ValueError)  # callers catching ValueError for JSON keep working
