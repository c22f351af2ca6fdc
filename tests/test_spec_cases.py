"""Data-driven spec cases: each file under tests/cases/ names the diagnostics it must produce.

Run `pytest tests/test_spec_cases.py --update-expectations` to rewrite the expectations from the
current output (then review the diff)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.pipeline import validate_path

from .expectations import actual, case_files, case_options, parse_expectations, rewrite

CASES = Path(__file__).parent / "cases"


@pytest.mark.parametrize("case", case_files(CASES), ids=lambda p: str(p.relative_to(CASES)))
def test_case(case: Path, update_expectations: bool) -> None:
    text = case.read_text(encoding="utf-8")
    result = validate_path(case, case_options(case, text), display=case.name)
    found = actual(result.diagnostics)
    if update_expectations:
        case.write_text(rewrite(text, found), encoding="utf-8")
        return
    expected = parse_expectations(text)
    assert expected, f"{case.name} states no expectation; every case must expect at least one diagnostic"
    missing = sorted(expected - found)
    unexpected = sorted(found - expected)
    detail = "\n".join(f"  {d.span.line}:{d.span.column} {d.code} {d.message}" for d in result.diagnostics)
    assert not missing and not unexpected, (
        f"{case.name}\n missing: {[f'{e.line}:{e.render()}' for e in missing]}\n"
        f" unexpected: {[f'{e.line}:{e.render()}' for e in unexpected]}\n all diagnostics:\n{detail}")


def test_every_front_end_code_has_a_case() -> None:
    from compiler.spec import rules

    codes = {r.code for r in vars(rules).values() if isinstance(r, type) and hasattr(r, "code") and "code" in r.__dict__}
    covered: set[str] = set()
    for case in case_files(CASES):
        covered |= {e.code for e in parse_expectations(case.read_text(encoding="utf-8"))}
    # These faults cannot be written as a text file with comments; tests/test_loader.py covers them.
    byte_level = {"K008", "K009", "K010"}
    assert codes - covered - byte_level == set()


def test_rewrite_round_trips(tmp_path: Path) -> None:
    text = "a: 1\nb: [x]\n# only a comment\n"
    from .expectations import Expected

    found = {Expected(1, 4, "K101"), Expected(3, 1, "K102"), Expected(2, 5, "K103", True)}
    new = rewrite(text, found)
    assert parse_expectations(new) == found
    assert rewrite(new, found) == new


def test_rewrite_keeps_a_pointer_where_it_stands_and_renumbers_past_a_stale_one() -> None:
    """`--update-expectations` once moved `# expect[N]:` pointers inline (onto a `%YAML` line) and
    dropped them from the middle of a case, which shifted every later line off its expectation."""
    from .expectations import Expected

    text = "%YAML 1.1\n---\n# expect[1]: K014:1\n# expect[4]: K999:1\na: 1\nb: 2  # expect: K101:4\n"
    # the stale pointer (line 4 has nothing now) goes; lines 5 and 6 become 4 and 5
    found = {Expected(1, 1, "K014"), Expected(6, 4, "K101"), Expected(5, 1, "K102")}
    new = rewrite(text, found)
    assert new.splitlines()[:3] == ["%YAML 1.1", "---", "# expect[1]: K014:1"]
    renumbered = {Expected(1, 1, "K014"), Expected(5, 4, "K101"), Expected(4, 1, "K102")}
    assert parse_expectations(new) == renumbered
    assert rewrite(new, renumbered) == new
