"""The checked-in JSON Schema (schemas/kiln-v1.schema.json): current, valid, documented, and in
agreement with the compiler on the examples and on a selection of invalid cases."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.pipeline import validate_path
from compiler.spec.loader import load_file
from compiler.spec.schema import SCHEMA_FILE, schema_text, spec_schema
from compiler.spec.types import NAME_RE

ROOT = Path(__file__).resolve().parents[1]
CHECKED_IN = ROOT / "schemas" / SCHEMA_FILE
EXAMPLES = sorted(ROOT.glob("examples/*/kiln.yaml"))
SPEC_CASES = ROOT / "tests" / "cases" / "spec"
NAME = re.compile(NAME_RE)


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(CHECKED_IN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator(schema: dict) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema)


def _yaml_data(path: Path):
    return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))


def test_checked_in_schema_is_current() -> None:
    assert CHECKED_IN.is_file(), f"{CHECKED_IN.relative_to(ROOT)} is missing; run `python3 -m compiler schema`"
    assert CHECKED_IN.read_text(encoding="utf-8") == schema_text(), (
        f"{CHECKED_IN.relative_to(ROOT)} is stale: the spec models changed. "
        "Run `python3 -m compiler schema` and commit the result.")


def test_schema_text_is_deterministic() -> None:
    assert schema_text() == schema_text()
    assert json.loads(schema_text()) == spec_schema()


def test_schema_is_a_valid_2020_12_schema(schema: dict) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert jsonschema.validators.validator_for(schema) is jsonschema.Draft202012Validator


def test_refs_resolve(schema: dict) -> None:
    refs: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    assert refs
    for ref in refs:
        assert ref.startswith("#/$defs/"), ref
        assert ref.split("/")[-1] in schema["$defs"], ref


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_examples_validate(example: Path, validator: jsonschema.Draft202012Validator) -> None:
    errors = sorted(validator.iter_errors(_yaml_data(example)), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_examples_reference_the_schema() -> None:
    for example in EXAMPLES:
        first = example.read_text(encoding="utf-8").splitlines()[0]
        assert first == "# yaml-language-server: $schema=../../schemas/kiln-v1.schema.json", example


def _object_schemas(schema: dict):
    yield "(root)", schema
    for name, sub in schema["$defs"].items():
        if sub.get("type") == "object" or "properties" in sub:
            yield name, sub


def test_every_property_has_a_description(schema: dict) -> None:
    missing = []
    for owner, sub in _object_schemas(schema):
        assert sub.get("description", "").strip(), f"{owner} has no description"
        for prop, body in sub.get("properties", {}).items():
            # beside anyOf/oneOf, not inside a branch: editors show only the property's own description
            if not str(body.get("description", "")).strip():
                missing.append(f"{owner}.{prop}")
    assert not missing, f"properties without a description: {missing}"


def test_objects_forbid_unknown_keys(schema: dict) -> None:
    for owner, sub in _object_schemas(schema):
        assert sub.get("additionalProperties") is False, owner


# --- the schema rejects what the compiler rejects ---------------------------------------------

# Cases whose faults a JSON Schema can express (types, enums, ranges, patterns, unknown and missing
# keys). Cross-field rules (max_input_len <= max_seq_len, distinct ports, serves xor mig, ...) are
# the compiler's alone.
REJECTED = [
    "unknown-top-level-key", "unknown-keys-deep", "dtype-invalid", "quantization-enums", "kernels-invalid",
    "quoted-numbers", "booleans-where-ints", "floats-where-ints", "toolchain-float-version",
    "toolchain-unpinned-image", "toolchain-missing-keys", "source-unpinned-revision", "parallelism-ranges",
    "hosts-ranges", "hosts-wrong-types", "missing-toolchain", "missing-name-and-models", "version-unsupported",
    "version-missing", "null-where-required", "image-publish-invalid", "models-empty", "runtime-invalid",
]

# Cases where every fault is a leaf value: the schema's errors sit on exactly the compiler's lines.
SAME_LINES = [
    "dtype-invalid", "quantization-enums", "kernels-invalid", "quoted-numbers", "booleans-where-ints",
    "toolchain-float-version", "toolchain-unpinned-image", "source-unpinned-revision", "hosts-wrong-types",
    "runtime-invalid", "null-where-required", "hosts-ranges",
]


def _case(name: str) -> Path:
    path = SPEC_CASES / f"{name}.yaml"
    assert path.is_file(), path
    return path


@pytest.mark.parametrize("name", REJECTED)
def test_schema_rejects_invalid_case(name: str, validator: jsonschema.Draft202012Validator) -> None:
    path = _case(name)
    assert not validate_path(path).ok
    assert list(validator.iter_errors(_yaml_data(path))), f"the schema accepts {name}"


@pytest.mark.parametrize("name", SAME_LINES)
def test_schema_errors_on_the_compilers_lines(name: str, validator: jsonschema.Draft202012Validator) -> None:
    path = _case(name)
    loaded = load_file(path)
    doc = loaded.document
    assert doc is not None
    schema_lines = {doc.span_of(tuple(e.absolute_path)).line for e in validator.iter_errors(doc.data)}
    compiler_lines = {d.span.line for d in validate_path(path).diagnostics}
    assert schema_lines == compiler_lines


@pytest.mark.parametrize("name", ["names-uppercase", "names-shell-metacharacters", "name-too-long"])
def test_schema_rejects_bad_map_keys(name: str, validator: jsonschema.Draft202012Validator) -> None:
    data = load_file(_case(name)).document.data
    bad = [k for section in ("models", "hosts") for k in (data.get(section) or {}) if not NAME.fullmatch(k)]
    assert bad
    messages = " ".join(e.message for e in validator.iter_errors(data))
    for key in bad:
        assert repr(key) in messages, f"the schema accepts the name {key!r}"


def test_schema_rejects_a_misspelled_key_with_the_key_named(validator: jsonschema.Draft202012Validator) -> None:
    data = _yaml_data(_case("limits-misspelled-and-ranges"))
    messages = [e.message for e in validator.iter_errors(data)]
    assert any("max_batch_szie" in m for m in messages), messages
