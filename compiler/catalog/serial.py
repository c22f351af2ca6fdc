"""Catalog facts to and from plain JSON data, so that an action's parameters carry the facts it
reads (a catalog correction then rebuilds exactly the artifacts that used the corrected fact)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .types import GpuSpec, MigGeometry, MigProfile, MlaDims, ModelArch


def to_data(obj: Any) -> Any:
    """Dataclasses to dicts, tuples to lists, recursively (JSON-ready)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    return obj


def profile_from_data(d: dict) -> MigProfile:
    return MigProfile(**{**d, "placements": tuple(d["placements"]), "attributes": tuple(d["attributes"])})


def gpu_from_data(d: dict) -> GpuSpec:
    mig = d["mig"]
    geometry = MigGeometry(**{**mig, "profiles": tuple(profile_from_data(p) for p in mig["profiles"])})
    return GpuSpec(**{**d, "compute_capability": tuple(d["compute_capability"]),
                      "graphics_mhz": tuple(d["graphics_mhz"]), "memory_mhz": tuple(d["memory_mhz"]),
                      "power_w": tuple(d["power_w"]), "sources": tuple(d["sources"]), "mig": geometry})


def arch_from_data(d: dict) -> ModelArch:
    mla = MlaDims(**d["mla"]) if d.get("mla") else None
    return ModelArch(**{**d, "mla": mla, "sources": tuple(d["sources"])})
