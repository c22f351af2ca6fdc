"""Deterministic YAML output (sorted keys, block style)."""

from __future__ import annotations

import io

from ruamel.yaml import YAML


def dump_yaml(data: object) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = True  # type: ignore[attr-defined]
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()
