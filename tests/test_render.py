"""Output formats (text, JSON, SARIF 2.1.0) and the `kiln` command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from compiler.cli import main
from compiler.checks import all_rules
from compiler.diagnostics import Diagnostic, Severity, Span
from compiler.diagnostics.render import render_json, render_sarif, render_text, summary_line
from compiler.pipeline import validate_path
from compiler.spec import rules as spec_rules

ROOT = Path(__file__).resolve().parents[1]
SPEC_CASES = ROOT / "tests" / "cases" / "spec"
EXAMPLES = sorted(ROOT.glob("examples/*/kiln.yaml"))
INVALID = SPEC_CASES / "limits-misspelled-and-ranges.yaml"  # one K101 and two K104 on line 14
FRONT_END_CODES = sorted(r.code for r in vars(spec_rules).values()
                         if isinstance(r, type) and "code" in r.__dict__)

SOURCE = "kiln: v1\nname: demo\nmodels:\n  chat:\n    limits: {max_batch_szie: 8}\n"


def _diag(code: str = "K101", line: int = 5, column: int = 14, end_column: int | None = 28,
          severity: Severity = Severity.ERROR, help: str | None = "did you mean 'max_batch_size'?",
          notes: tuple[str, ...] = ()) -> Diagnostic:
    return Diagnostic(code, severity, "unknown key 'max_batch_szie' in models.chat.limits", "kiln.yaml",
                      Span(line, column, line if end_column else None, end_column), help, notes)


def _caret_column(rendered: str, source_line: str) -> tuple[int, int]:
    """(column of the first caret relative to the source text, caret count) in a rendered block."""
    lines = rendered.splitlines()
    src = next(ln for ln in lines if ln.endswith(source_line) and "|" in ln)
    caret = next(ln for ln in lines if "^" in ln)
    text_start = src.index("| ") + 2
    assert caret.index("| ") == src.index("| "), "the caret line's gutter must line up with the source's"
    first = caret.index("^")
    return first - text_start + 1, caret.count("^")


# --- text -------------------------------------------------------------------------------------

def test_text_header_source_caret_help() -> None:
    out = render_text([_diag()], {"kiln.yaml": SOURCE})
    lines = out.splitlines()
    assert lines[0] == "kiln.yaml:5:14: error: unknown key 'max_batch_szie' in models.chat.limits [K101]"
    assert lines[1] == "    5 |     limits: {max_batch_szie: 8}"
    assert _caret_column(out, "    limits: {max_batch_szie: 8}") == (14, 14)
    assert lines[-1] == "  help: did you mean 'max_batch_size'?"


def test_text_caret_width_one_without_end() -> None:
    out = render_text([_diag(end_column=None, help=None)], {"kiln.yaml": SOURCE})
    assert _caret_column(out, "    limits: {max_batch_szie: 8}") == (14, 1)
    assert "help:" not in out


def test_text_caret_clipped_to_the_line() -> None:
    out = render_text([_diag(column=30, end_column=90)], {"kiln.yaml": SOURCE})
    col, width = _caret_column(out, "    limits: {max_batch_szie: 8}")
    assert col == 30 and col + width - 1 <= len("    limits: {max_batch_szie: 8}")


def test_text_without_source_or_line_out_of_range() -> None:
    out = render_text([_diag()], {})
    assert out.splitlines()[0].startswith("kiln.yaml:5:14: error:")
    assert "^" not in out and "|" not in out
    out = render_text([_diag(line=99)], {"kiln.yaml": SOURCE})
    assert "^" not in out


def test_text_tabs_are_shown_as_spaces_so_the_caret_lines_up() -> None:
    src = "hosts:\n\tcount: 8\n"
    out = render_text([Diagnostic("K005", Severity.ERROR, "tab", "k.yaml", Span(2, 1))], {"k.yaml": src})
    assert "\t" not in out
    assert _caret_column(out, " count: 8") == (1, 1)


def test_text_warning_notes_and_color() -> None:
    d = _diag(severity=Severity.WARNING, notes=("first note",))
    plain = render_text([d], {"kiln.yaml": SOURCE})
    assert ": warning: " in plain and "  note: first note" in plain and "\x1b[" not in plain
    painted = render_text([d], {"kiln.yaml": SOURCE}, color=True)
    assert "\x1b[1;33mwarning\x1b[0m" in painted
    assert re.sub(r"\x1b\[[0-9;]*m", "", painted) == plain


def test_text_for_real_diagnostics() -> None:
    result = validate_path(INVALID, display="case.yaml")
    text = INVALID.read_text(encoding="utf-8")
    out = render_text(result.diagnostics, {"case.yaml": text})
    blocks = re.split(r"\n(?=case\.yaml:)", out)
    assert len(blocks) == len(result.diagnostics) == 3
    for block, d in zip(blocks, result.diagnostics):
        assert block.startswith(f"case.yaml:{d.span.line}:{d.span.column}: error: {d.message} [{d.code}]")
        col, _ = _caret_column(block, text.splitlines()[d.span.line - 1])
        assert col == d.span.column


@pytest.mark.parametrize(("case", "suggestions"), [
    ("unknown-keys-deep", {"revison": "revision", "sample": "samples", "htp": "http",
                           "power_limit": "power_limit_w", "profle": "profile"}),
    ("unknown-top-level-key", {"modles": "models"}),
    ("limits-misspelled-and-ranges", {"max_batch_szie": "max_batch_size"}),
    ("toolchain-missing-keys", {"tensorrt_lm": "tensorrt_llm"}),
])
def test_unknown_keys_suggest_the_closest_key(case: str, suggestions: dict[str, str]) -> None:
    found = {}
    for d in validate_path(SPEC_CASES / f"{case}.yaml").diagnostics:
        if d.code == "K101":
            key = re.search(r"unknown key '([^']+)'", d.message).group(1)
            found[key] = re.match(r"did you mean '([^']+)'\?", d.help or "").group(1)
    assert found == suggestions


def test_invalid_choices_list_the_choices() -> None:
    diags = validate_path(SPEC_CASES / "kernels-invalid.yaml").diagnostics
    helps = {d.message.split(":")[0]: d.help for d in diags if d.code == "K105"}
    assert helps["models.qwen-moe.kernels.attention"].startswith("did you mean 'flashinfer'?")
    assert "cutlass" in helps["models.qwen-moe.kernels.moe"]


def test_summary_line() -> None:
    assert summary_line([]) == "no problems found"
    assert summary_line([_diag()]) == "1 error"
    assert summary_line([_diag(), _diag(), _diag(severity=Severity.WARNING)]) == "2 errors, 1 warning"
    assert summary_line([_diag(severity=Severity.NOTE)]) == "no problems found"


# --- JSON -------------------------------------------------------------------------------------

def _from_dict(d: dict) -> Diagnostic:
    return Diagnostic(d["code"], Severity(d["severity"]), d["message"], d["file"],
                      Span(d["line"], d["column"], d["end_line"], d["end_column"]), d["help"], tuple(d["notes"]))


def test_json_round_trips() -> None:
    diags = [_diag(), _diag(code="K104", severity=Severity.WARNING, end_column=None, help=None, notes=("n1", "n2")),
             *validate_path(INVALID).diagnostics]
    payload = json.loads(render_json(diags))
    assert [_from_dict(d) for d in payload["diagnostics"]] == diags
    assert payload["errors"] == len(diags) - 1 and payload["warnings"] == 1


def test_json_empty() -> None:
    assert json.loads(render_json([])) == {"diagnostics": [], "errors": 0, "warnings": 0}


# --- SARIF ------------------------------------------------------------------------------------

# The parts of SARIF 2.1.0 that Kiln emits (the full schema is not reachable offline).
SARIF_SUBSET = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string"},
        "version": {"const": "2.1.0"},
        "runs": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object", "required": ["driver"],
                        "properties": {"driver": {
                            "type": "object", "required": ["name"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "version": {"type": "string"},
                                "rules": {"type": "array", "items": {
                                    "type": "object", "required": ["id"],
                                    "properties": {
                                        "id": {"type": "string", "minLength": 1},
                                        "name": {"type": "string"},
                                        "shortDescription": {"$ref": "#/$defs/message"},
                                        "fullDescription": {"$ref": "#/$defs/message"},
                                        "help": {"$ref": "#/$defs/message"},
                                        "defaultConfiguration": {
                                            "type": "object",
                                            "properties": {"level": {"$ref": "#/$defs/level"}}},
                                    }}},
                            }}},
                    },
                    "results": {"type": "array", "items": {
                        "type": "object",
                        "required": ["ruleId", "message", "locations"],
                        "properties": {
                            "ruleId": {"type": "string"},
                            "ruleIndex": {"type": "integer", "minimum": 0},
                            "level": {"$ref": "#/$defs/level"},
                            "message": {"$ref": "#/$defs/message"},
                            "locations": {"type": "array", "minItems": 1, "items": {
                                "type": "object", "required": ["physicalLocation"],
                                "properties": {"physicalLocation": {
                                    "type": "object", "required": ["artifactLocation", "region"],
                                    "properties": {
                                        "artifactLocation": {
                                            "type": "object", "required": ["uri"],
                                            "properties": {"uri": {"type": "string", "minLength": 1}}},
                                        "region": {
                                            "type": "object", "required": ["startLine"],
                                            "properties": {
                                                "startLine": {"type": "integer", "minimum": 1},
                                                "startColumn": {"type": "integer", "minimum": 1},
                                                "endLine": {"type": "integer", "minimum": 1},
                                                "endColumn": {"type": "integer", "minimum": 1}}},
                                    }}}}},
                        }}},
                },
            },
        },
    },
    "$defs": {
        "level": {"enum": ["none", "note", "warning", "error"]},
        "message": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
    },
}


def _check_sarif(doc: dict) -> None:
    jsonschema.Draft202012Validator.check_schema(SARIF_SUBSET)
    jsonschema.Draft202012Validator(SARIF_SUBSET).validate(doc)
    for run in doc["runs"]:
        rules = run["tool"]["driver"]["rules"]
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids)), "each rule is listed once"
        for res in run["results"]:
            assert res["ruleId"] in ids
            assert rules[res["ruleIndex"]]["id"] == res["ruleId"]


def _all_case_diagnostics() -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for case in sorted(SPEC_CASES.glob("*.yaml")):
        out.extend(validate_path(case, display=f"tests/cases/spec/{case.name}").diagnostics)
    return out


def test_sarif_validates_for_every_case() -> None:
    diags = _all_case_diagnostics()
    doc = json.loads(render_sarif(diags, "0.1.0"))
    _check_sarif(doc)
    [run] = doc["runs"]
    assert run["tool"]["driver"]["name"] == "kiln" and run["tool"]["driver"]["version"] == "0.1.0"
    assert len(run["results"]) == len(diags)
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == {d.code for d in diags}
    for res, d in zip(run["results"], diags):
        region = res["locations"][0]["physicalLocation"]["region"]
        assert (region["startLine"], region["startColumn"]) == (d.span.line, d.span.column)
        assert res["message"]["text"].startswith(d.message)
        assert res["level"] == d.severity.value


def test_sarif_levels_and_windows_paths() -> None:
    diags = [_diag(severity=Severity.WARNING), _diag(code="K104", severity=Severity.NOTE),
             Diagnostic("K001", Severity.ERROR, "bad", "dir\\kiln.yaml", Span(1, 1))]
    doc = json.loads(render_sarif(diags, "0.1.0"))
    _check_sarif(doc)
    results = doc["runs"][0]["results"]
    assert [r["level"] for r in results] == ["warning", "note", "error"]
    assert results[2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "dir/kiln.yaml"
    assert "help: did you mean" in results[0]["message"]["text"]


def test_sarif_empty_run_is_valid() -> None:
    doc = json.loads(render_sarif([], "0.1.0"))
    _check_sarif(doc)
    assert doc["runs"][0]["results"] == [] and doc["runs"][0]["tool"]["driver"]["rules"] == []


def test_sarif_subset_rejects_broken_documents() -> None:
    good = json.loads(render_sarif([_diag()], "0.1.0"))
    validator = jsonschema.Draft202012Validator(SARIF_SUBSET)
    for breaking in (
        lambda d: d.update(version="2.0.0"),
        lambda d: d["runs"][0]["results"][0].update(level="fatal"),
        lambda d: d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"].update(startLine=0),
        lambda d: d["runs"][0]["tool"]["driver"].pop("name"),
        lambda d: d["runs"][0]["results"][0]["message"].pop("text"),
    ):
        doc = json.loads(json.dumps(good))
        breaking(doc)
        assert not validator.is_valid(doc)


# --- CLI --------------------------------------------------------------------------------------

@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_cli_examples_pass(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["validate", str(example)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "error" not in out.split(": ")[-1]


def test_cli_invalid_case_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["validate", "--color", "never", str(INVALID)])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"{INVALID}:14:14: error: unknown key 'max_batch_szie'" in out
    assert "[K101]" in out and out.count("[K104]") == 2
    assert out.rstrip().endswith(": 3 errors")
    assert "\x1b[" not in out


def test_cli_several_specs(capsys: pytest.CaptureFixture[str]) -> None:
    other = SPEC_CASES / "serving-port-collision.yaml"
    rc = main(["validate", "--format", "json", str(INVALID), str(other)])
    payload = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert {d["file"] for d in payload["diagnostics"]} == {str(INVALID), str(other)}
    assert payload["errors"] == 4


def test_cli_color_always(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--color", "always", str(INVALID)]) == 1
    assert "\x1b[1;31merror\x1b[0m" in capsys.readouterr().out


def test_cli_directory_is_an_unreadable_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path)]) == 1
    assert "[K010]" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["validate", "no/such/kiln.yaml"],
    ["validate", "--format", "xml", str(INVALID)],
    ["validate", "--bogus", str(INVALID)],
    ["validate"],
    ["validate", "--gpu-profiles", "no/such/lgip.txt", str(INVALID)],
    ["explain", "K999"],
    ["explain", "nonsense"],
    ["frobnicate"],
    [],
])
def test_cli_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.strip(), "a usage error says what was wrong on stderr"
    assert "Traceback" not in captured.err


def test_cli_missing_file_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "no/such/kiln.yaml"]) == 2
    assert "no such file: no/such/kiln.yaml" in capsys.readouterr().err


def test_cli_explain_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "K101"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("K101 unknown-key (error, spec structure)")
    assert spec_rules.UnknownKey.doc() in out


def test_cli_explain_is_case_insensitive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "k109"]) == 0
    assert "MIG" in capsys.readouterr().out


def test_cli_explain_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^(K\d{3})\s", out, re.M)
    assert listed == sorted(listed)
    assert set(FRONT_END_CODES) <= set(listed)
    assert set(listed) == {r.code for r in all_rules()}


def test_cli_every_rule_has_a_doc() -> None:
    for rule in all_rules():
        assert rule.doc().strip(), rule.code
        assert re.fullmatch(r"K\d{3}", rule.code)


def test_cli_schema_check_passes_on_checked_in_schema(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    rc = main(["schema", "--check"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "up to date" in captured.out


def test_cli_schema_check_fails_on_stale_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.spec.schema import SCHEMA_FILE, schema_text

    stale = json.loads(schema_text())
    stale["description"] = "an older description"
    (tmp_path / SCHEMA_FILE).write_text(json.dumps(stale, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert main(["schema", "--check", "--output-dir", str(tmp_path), "--reference", str(tmp_path / "ref.md")]) == 1
    err = capsys.readouterr().err
    assert "stale" in err and "kiln schema" in err


def test_cli_schema_check_fails_when_missing_then_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.spec.schema import SCHEMA_FILE, schema_text

    ref = ["--reference", str(tmp_path / "ref.md")]
    assert main(["schema", "--check", "--output-dir", str(tmp_path), *ref]) == 1
    assert main(["schema", "--output-dir", str(tmp_path), *ref]) == 0
    assert (tmp_path / SCHEMA_FILE).read_text(encoding="utf-8") == schema_text()
    assert main(["schema", "--check", "--output-dir", str(tmp_path), *ref]) == 0
    capsys.readouterr()
    assert main(["schema", "--stdout"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(schema_text())


def test_cli_format_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--format", "json", str(INVALID)]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert [(d["code"], d["line"], d["column"]) for d in payload["diagnostics"]] == [
        ("K101", 14, 14), ("K104", 14, 51), ("K104", 14, 70)]
    assert payload["errors"] == 3


def test_cli_format_sarif(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--format", "sarif", str(INVALID)]) == 1
    doc = json.loads(capsys.readouterr().out)
    _check_sarif(doc)
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ["K101", "K104", "K104"]


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_cli_output_file(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / f"report.{fmt}"
    assert main(["validate", "--format", fmt, "--color", "always", "--output", str(target), str(INVALID)]) == 1
    assert capsys.readouterr().out == ""
    body = target.read_text(encoding="utf-8")
    assert body.endswith("\n")
    assert not list(tmp_path.glob("*.tmp")), "the temporary file is renamed into place"
    if fmt == "text":
        assert "[K101]" in body and "\x1b[" not in body, "no colour codes in a file"
    else:
        json.loads(body)


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    from compiler import __version__

    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
