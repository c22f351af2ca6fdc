"""The checkpoint-config table (``data/checkpoint_config.json``) as typed, immutable objects.

It answers three questions, each row with its sources and a status:

- ``runtime(tensorrt_llm)``: which transformers version the pinned TensorRT-LLM reads a
  checkpoint's config.json with, and so which config schema the checkpoint must be written in;
- ``schema(major)``: how that transformers major version names RoPE and the dtype in config.json
  (transformers 5 writes one ``rope_parameters`` object and ``dtype``; 4.x reads ``rope_theta``,
  ``rope_scaling`` and ``torch_dtype`` and takes a default theta when they are missing);
- ``builder(modelopt)``: the torch and transformers versions Kiln quantizes with for a ModelOpt pin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from compiler.resources import read_data

from .types import Source, Status

__all__ = ["BuilderRow", "CheckpointConfigError", "CheckpointConfigTable", "ConfigSchema", "ROPE_LAYOUTS",
           "RuntimeRow", "TableSource", "load_checkpoint_config"]

STATUSES = frozenset({"verified", "partially-verified", "inferred", "unverified"})
#: Where a config schema keeps RoPE: top-level rope_theta/rope_scaling, or one rope_parameters object.
ROPE_LAYOUTS = ("top-level", "rope_parameters")


TableSource = Source  # where a row's fact comes from (compiler/catalog/types.py)


class CheckpointConfigError(ValueError):
    """checkpoint_config.json does not hold together (unknown source, schema, status...)."""


@dataclass(frozen=True)
class ConfigSchema:
    """How one transformers major version reads config.json."""

    major: str
    rope: str  # one of ROPE_LAYOUTS
    dtype_key: str  # "torch_dtype" or "dtype"
    foreign: tuple[str, ...]  # keys of the other schema that this reader misreads or ignores
    status: Status
    sources: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class RuntimeRow:
    """What a TensorRT-LLM release reads checkpoints with."""

    tensorrt_llm: str
    transformers: str | None  # None: not read from a source (the schema is then inferred)
    config_schema: str
    torch: str | None
    status: Status
    sources: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class BuilderRow:
    """The torch and transformers versions Kiln quantizes with for one ModelOpt pin."""

    modelopt: str
    torch: str
    transformers: str
    status: Status
    sources: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class CheckpointConfigTable:
    sources: Mapping[str, TableSource]
    schemas: Mapping[str, ConfigSchema]
    runtimes: Mapping[str, RuntimeRow]
    builders: Mapping[str, BuilderRow]

    def runtime(self, tensorrt_llm: str) -> RuntimeRow | None:
        return self.runtimes.get(tensorrt_llm)

    def schema(self, major: str) -> ConfigSchema:
        return self.schemas[major]

    def builder(self, modelopt: str | None) -> BuilderRow | None:
        return self.builders.get(modelopt) if modelopt is not None else None


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def _sources(row: Mapping[str, Any], known: Mapping[str, TableSource], where: str) -> tuple[str, ...]:
    ids = tuple(row.get("sources") or ())
    if not ids:
        raise CheckpointConfigError(f"{where}: no sources")
    for s in ids:
        if s not in known:
            raise CheckpointConfigError(f"{where}: unknown source {s!r}")
    if row.get("status") not in STATUSES:
        raise CheckpointConfigError(f"{where}: status {row.get('status')!r} is not one of {sorted(STATUSES)}")
    return ids


def parse_table(doc: Mapping[str, Any]) -> CheckpointConfigTable:
    if doc.get("schema_version") != 1:
        raise CheckpointConfigError(f"unknown schema_version {doc.get('schema_version')!r}")
    sources = {sid: TableSource(id=sid, repository=s["repository"], path=s["path"], what=s["what"],
                                version=s.get("version"), commit=s.get("commit"), url=s.get("url"))
               for sid, s in doc["sources"].items()}
    schemas = {}
    for major, s in doc["config_schemas"].items():
        if s["rope"] not in ROPE_LAYOUTS:
            raise CheckpointConfigError(f"config_schemas.{major}: rope {s['rope']!r} is not one of {ROPE_LAYOUTS}")
        if s["dtype_key"] in s["foreign"]:
            raise CheckpointConfigError(f"config_schemas.{major}: dtype_key {s['dtype_key']!r} is also foreign")
        schemas[major] = ConfigSchema(major=major, rope=s["rope"], dtype_key=s["dtype_key"],
                                      foreign=tuple(s["foreign"]), status=s["status"],
                                      sources=_sources(s, sources, f"config_schemas.{major}"), note=s.get("note"))
    runtimes = {}
    for version, r in doc["runtimes"].items():
        where = f"runtimes.{version}"
        if r["config_schema"] not in schemas:
            raise CheckpointConfigError(f"{where}: unknown config_schema {r['config_schema']!r}")
        if r["transformers"] is not None and _major(r["transformers"]) != r["config_schema"]:
            raise CheckpointConfigError(f"{where}: transformers {r['transformers']} is not of schema "
                                        f"{r['config_schema']}")
        runtimes[version] = RuntimeRow(tensorrt_llm=version, transformers=r["transformers"],
                                       config_schema=r["config_schema"], torch=r.get("torch"), status=r["status"],
                                       sources=_sources(r, sources, where), note=r.get("note"))
    builders = {version: BuilderRow(modelopt=version, torch=b["torch"], transformers=b["transformers"],
                                    status=b["status"], sources=_sources(b, sources, f"builders.{version}"),
                                    note=b.get("note"))
                for version, b in doc["builders"].items()}
    return CheckpointConfigTable(sources=sources, schemas=schemas, runtimes=runtimes, builders=builders)


@lru_cache(maxsize=1)
def load_checkpoint_config() -> CheckpointConfigTable:
    """The packaged table (parsed once per process)."""
    return parse_table(json.loads(read_data("catalog", "data", "checkpoint_config.json")))
