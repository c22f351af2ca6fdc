"""The first hour: `kiln init --example` writes a starter spec that validates, and the field
reference (docs/spec-reference.md) is generated from the schema and fresh."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from compiler.cli import main
from compiler.pipeline import validate_path
from compiler.spec.models import Spec
from compiler.spec.reference import REFERENCE_FILE, reference_is_current, reference_text
from compiler.spec.starter import starter_text

ROOT = Path(__file__).parents[1]


def test_init_example_writes_a_starter_spec_that_validates_clean(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "deploy" / "kiln.yaml"  # deploy/ does not exist yet: init makes it (issue 36)
    assert main(["init", str(spec), "--example"]) == 0
    assert "kiln validate" in capsys.readouterr().out
    assert spec.read_text(encoding="utf-8") == starter_text()
    result = validate_path(spec)
    assert result.ok and result.diagnostics == [], [d.message for d in result.diagnostics]
    assert main(["plan", str(spec), "--store", str(tmp_path / "store")]) == 0
    capsys.readouterr()
    # never over an existing file: a second run is a usage error and leaves the file alone
    spec.write_text("kiln: v1\n", encoding="utf-8")
    assert main(["init", str(spec), "--example"]) == 2
    assert "exists" in capsys.readouterr().err
    assert spec.read_text(encoding="utf-8") == "kiln: v1\n"


def test_the_starter_spec_explains_itself() -> None:
    text = starter_text()
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#") or " # " in line]
    assert len(comments) >= 15  # a commented file, not a bare one
    for step in ("kiln validate", "kiln plan", "kiln build", "spec-reference.md", "first-spec.md"):
        assert step in text, step


def _spec_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every field of the spec by its reference path (models.<name>.limits.max_seq_len, gpus[] ...)."""
    out: set[str] = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        for sub, suffix in _nested(field.annotation):
            out |= _spec_paths(sub, path + suffix)
    return out


def _nested(annotation, suffix: str = "") -> list[tuple[type[BaseModel], str]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, suffix)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple):
        return [x for a in args for x in _nested(a, suffix + "[]")]
    if origin is dict:
        return _nested(args[1], suffix + ".<name>")
    return [x for a in args for x in _nested(a, suffix)]


def test_the_reference_documents_every_field_of_the_spec() -> None:
    text = reference_text()
    sections = set(re.findall(r"^## `([^`]+)`", text, flags=re.M))
    documented = {f"{s}.{f}" for s, body in re.findall(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S)
                  for f in re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)}
    documented |= set(re.findall(r"^\| `([^`]+)` \|", text.split("## `", 1)[0], flags=re.M))  # the top level
    same_as = {s for s, body in re.findall(r"^## `([^`]+)`\n\nThe same fields as \[`([^`]+)`", text, re.M)}
    missing = set()
    for path in _spec_paths(Spec):
        parent, _, leaf = path.rpartition(".")
        # a section that has the same fields as another documents its nested sections there too
        if path in documented or any(path.startswith(s + ".") for s in same_as):
            continue
        missing.add(path)
    assert not missing, sorted(missing)
    assert "models.<name>.quantization" in sections and "hosts.<name>.gpus[].mig[]" in sections


def test_the_checked_in_reference_is_fresh_and_check_says_when_it_is_not(tmp_path: Path, capsys,
                                                                        monkeypatch) -> None:
    assert reference_is_current(ROOT / REFERENCE_FILE), "run `kiln schema` and commit docs/spec-reference.md"
    monkeypatch.chdir(ROOT)
    assert main(["schema", "--check"]) == 0
    capsys.readouterr()
    stale = tmp_path / "ref.md"
    stale.write_text(reference_text().replace("Spec format version.", "An older text."), encoding="utf-8")
    assert main(["schema", "--check", "--reference", str(stale)]) == 1
    err = capsys.readouterr().err
    assert str(stale) in err and "stale" in err and "kiln schema" in err
    schemas = tmp_path / "schemas"
    assert main(["schema", "--output-dir", str(schemas), "--reference", str(stale)]) == 0
    assert reference_is_current(stale)
    assert main(["schema", "--check", "--output-dir", str(schemas), "--reference", str(stale)]) == 0


def test_the_guide_names_only_fields_the_reference_has() -> None:
    guide = (ROOT / "docs" / "first-spec.md").read_text(encoding="utf-8")
    reference = reference_text()
    paths = set(re.findall(r"`((?:models|hosts|toolchain)\.[a-z_<>.\[\]]+)`", guide))
    assert paths
    for path in paths:
        parent, _, leaf = path.rpartition(".")
        assert f"## `{path}`" in reference or (f"## `{parent}`" in reference and f"| `{leaf}` |" in reference), path


def test_every_command_of_the_guide_parses() -> None:
    import shlex

    from compiler.cli import _parser

    guide = (ROOT / "docs" / "first-spec.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in guide.splitlines() if line.startswith("    kiln ")]
    lines += [m for m in re.findall(r"`(kiln [^`]+)`", guide) if "SPEC" not in m and "CODE" not in m]
    assert len(lines) >= 5
    for line in lines:
        words = shlex.split(line.split("#")[0])[1:]
        if len(words) == 1:  # a command named in prose (`kiln validate`): it must exist
            assert words[0] in _parser()._subparsers._group_actions[0].choices, line
            continue
        try:
            _parser().parse_args(words)
        except SystemExit as e:
            raise AssertionError(f"docs/first-spec.md: `{line}` does not parse") from e
