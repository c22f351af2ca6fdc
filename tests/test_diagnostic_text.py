"""The text a user reads from `kiln validate`, frozen: for every spec case under tests/cases/ and every
example, the CLI's output (each diagnostic's `file:line:col: severity: message [code]`, the quoted
source line and caret, notes, help, the summary line) against one golden file per case directory,
tests/golden/diagnostics/<directory>.txt. tests/test_spec_cases.py pins each diagnostic's code and
position; this pins its words. `pytest tests/test_diagnostic_text.py --update-expectations` rewrites
the files (then review the diff).

The cases are validated in-process from the repository root with relative paths, as `kiln validate
tests/cases/...` prints them there. The one machine path a message may hold, the spec's repository
(K915: an input outside it), is written `<repository>`, and a path it resolves to as relative to it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.cli.output import render_diagnostics
from compiler.ir.inputs import find_repository
from compiler.pipeline import validate_path

from .expectations import case_files, case_options

ROOT = Path(__file__).resolve().parent.parent
CASES = Path("tests/cases")
GOLDEN = ROOT / "tests" / "golden" / "diagnostics"


def _groups() -> dict[str, list[Path]]:
    """Golden file name -> the specs it covers (paths relative to the repository root)."""
    groups: dict[str, list[Path]] = {}
    for case in case_files(ROOT / CASES):
        rel = case.relative_to(ROOT)
        groups.setdefault(rel.parent.relative_to(CASES).as_posix(), []).append(rel)
    groups["examples"] = sorted(p.relative_to(ROOT) for p in (ROOT / "examples").glob("*/kiln.yaml"))
    return groups


GROUPS = _groups()
_RESOLVED = re.compile(r"resolves to '(/[^']*)'")


def _portable(text: str, repository: Path) -> str:
    """`text` with the repository's absolute path, the one part that depends on the checkout, as
    `<repository>` (and a resolved path outside it as relative to it)."""
    text = _RESOLVED.sub(lambda m: f"resolves to '<repository>/{os.path.relpath(m.group(1), repository)}'", text)
    return text.replace(str(repository), "<repository>")


def _argv(spec: Path) -> list[str]:
    options = case_options(spec, spec.read_text(encoding="utf-8"))
    argv = ["validate", str(spec)]  # first: --gpu-profiles takes the paths that follow it
    for capture in options.gpu_profiles:
        argv += ["--gpu-profiles", *map(str, capture)]
    return argv


def _transcript(spec: Path) -> str:
    """`$ kiln validate ...` and what it prints (colorless), as in a terminal at the repository root."""
    options = case_options(spec, spec.read_text(encoding="utf-8"))
    # $KILN_MODELS, a second input root, would show in K915's message: the goldens assume none.
    result = validate_path(spec, dataclasses.replace(options, models_root=None))
    text = render_diagnostics([result])
    return f"$ kiln {' '.join(_argv(spec))}\n{_portable(text, find_repository(ROOT))}\n"


@pytest.fixture
def at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("KILN_MODELS", raising=False)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_diagnostic_text_matches_the_golden_file(group: str, at_root, update_expectations: bool) -> None:
    got = "\n".join(_transcript(spec) for spec in GROUPS[group])
    golden = GOLDEN / f"{group}.txt"
    if update_expectations:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got, encoding="utf-8")
        return
    assert golden.is_file(), f"no {golden.relative_to(ROOT)}: run pytest --update-expectations"
    want = golden.read_text(encoding="utf-8")
    # the first differing transcript, not the whole directory's, in the failure
    for mine, theirs in zip(got.split("\n$ kiln "), want.split("\n$ kiln ")):
        assert mine == theirs, f"{golden.relative_to(ROOT)} differs: review, then --update-expectations"
    assert got == want, f"{golden.relative_to(ROOT)}: cases added or removed; run --update-expectations"


def test_no_golden_file_without_its_cases() -> None:
    stale = {p.relative_to(GOLDEN).with_suffix("").as_posix() for p in GOLDEN.rglob("*.txt")} - set(GROUPS)
    assert not stale, f"golden files of case directories that no longer exist: {sorted(stale)}"


@pytest.mark.parametrize("spec", [CASES / "hardware/mig/capture-applies-to-its-gpu.yaml",
                                  CASES / "spec/one-run-all-problems.yaml"], ids=str)
def test_the_transcript_is_what_the_command_prints(spec: Path, at_root, capsys) -> None:
    """The goldens render in-process; the `kiln` command prints the same text (one case with
    --gpu-profiles, one without)."""
    main(_argv(spec))
    printed = capsys.readouterr().out
    assert _transcript(spec) == f"$ kiln {' '.join(_argv(spec))}\n{printed}"
