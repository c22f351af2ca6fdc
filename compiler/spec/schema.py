"""JSON Schema (2020-12) export of Spec v1, generated from the pydantic models."""

from __future__ import annotations

import json
from pathlib import Path

from .models import Spec

SCHEMA_FILE = "kiln-v1.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:kiln:spec:v1"


def _close_maps(node: object) -> None:
    """Maps keyed by a name pattern must refuse other keys, as the parser does."""
    if isinstance(node, dict):
        if "patternProperties" in node and "properties" not in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            _close_maps(value)
    elif isinstance(node, list):
        for value in node:
            _close_maps(value)


def spec_schema() -> dict:
    schema = Spec.model_json_schema(mode="validation", ref_template="#/$defs/{model}")
    _close_maps(schema)
    ordered = {"$schema": DIALECT, "$id": SCHEMA_ID}
    ordered.update(schema)
    return ordered


def schema_text() -> str:
    return json.dumps(spec_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / SCHEMA_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(schema_text(), encoding="utf-8")
    tmp.replace(target)
    return target


def schema_is_current(directory: Path) -> bool:
    target = directory / SCHEMA_FILE
    return target.is_file() and target.read_text(encoding="utf-8") == schema_text()
