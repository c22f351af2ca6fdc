"""NVIDIA Dynamo releases and the TensorRT-LLM version each one runs (catalog/data/dynamo.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from compiler import resources


@dataclass(frozen=True)
class DynamoRelease:
    line: str  # major.minor: patch releases of one line pin the same TensorRT-LLM
    tensorrt_llm: str
    status: str
    note: str = ""


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(resources.read_data("catalog", "data", "dynamo.json"))


def source() -> str:
    return _table()["source"]


def release(version: str) -> DynamoRelease | None:
    """The record of a Dynamo version such as "1.6.1" (by its major.minor line), or None."""
    line = ".".join(version.split(".")[:2])
    for r in _table()["releases"]:
        if r["dynamo"] == line:
            return DynamoRelease(r["dynamo"], r["tensorrt_llm"], r["status"], r.get("note", ""))
    return None


def known_lines() -> list[str]:
    return [r["dynamo"] for r in _table()["releases"]]
