"""The config.json a served checkpoint carries: written in the schema of the transformers version
that the pinned TensorRT-LLM reads it with (compiler/catalog/data/checkpoint_config.json).

Why a conversion and not an export under that version: the builder quantizes with the torch,
transformers and ModelOpt versions of its own toolchain (ModelOpt 0.47 with transformers 5.14), and
a transformers 5 export writes `rope_parameters` and `dtype`, which the transformers 4.57 inside
TensorRT-LLM 1.2 does not read: it takes RoPE theta 10000 and no scaling, and the model generates
garbage past short contexts. Installing the runtime's transformers on the builder would tie every
builder to one runtime pin and one ModelOpt range at once; rewriting the few keys whose schema
differs between transformers majors, from the source's own config.json, does not.

The rules: the keys the target schema reads are restored from the source config where the export
dropped them (its RoPE, dtype key, max_position_embeddings); RoPE written by the other schema is
translated (rope_parameters <-> rope_theta + rope_scaling + partial_rotary_factor); the other
schema's keys are removed, so one config.json states one RoPE. A RoPE the target schema cannot
express (per-layer-type rope_parameters) is refused, never guessed. Pure functions over dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.catalog.checkpoint_config import load_checkpoint_config

from .base import Params

CONFIG_JSON = "config.json"
#: Keys the export writes for itself: never taken from the source.
EXPORT_OWNED = frozenset({"quantization_config", "transformers_version", "_name_or_path"})
#: Where each RoPE layout keeps its fields.
ROPE_KEYS = {"top-level": ("rope_theta", "rope_scaling", "partial_rotary_factor"),
             "rope_parameters": ("rope_parameters", "partial_rotary_factor")}
_NOT_SCALING = ("rope_theta", "rope_type", "type", "partial_rotary_factor")


class CheckpointConfigError(Exception):
    pass


class ConfigPlan(Params):
    """The config.json schema a checkpoint is written in, as the action's parameters: the table's
    row, so that a corrected row rebuilds exactly the checkpoints it concerns. The TensorRT-LLM pin
    itself is not part of it: pins whose runtimes read the same schema share checkpoints."""

    transformers: str | None  # the version the runtime reads config.json with (None: not in the table)
    schema_major: str
    rope: str  # "top-level" | "rope_parameters"
    dtype_key: str
    foreign: list[str]


def config_plan(tensorrt_llm: str) -> ConfigPlan | None:
    """The plan for a TensorRT-LLM pin; None when the table has no row for it (the actions that
    write checkpoints then refuse to run: Kiln cannot say what the runtime reads)."""
    table = load_checkpoint_config()
    row = table.runtime(tensorrt_llm)
    if row is None:
        return None
    s = table.schema(row.config_schema)
    return ConfigPlan(transformers=row.transformers, schema_major=s.major, rope=s.rope, dtype_key=s.dtype_key,
                      foreign=list(s.foreign))


def require_plan(plan: ConfigPlan | None, tensorrt_llm: str | None = None) -> ConfigPlan:
    if plan is None:
        pinned = f" {tensorrt_llm}" if tensorrt_llm else ""
        raise CheckpointConfigError(
            f"Kiln does not know which transformers version TensorRT-LLM{pinned} reads config.json with "
            "(compiler/catalog/data/checkpoint_config.json has no row for it), so it cannot write a checkpoint "
            "config that runtime reads correctly; pin a TensorRT-LLM version from that table")
    return plan


# --- RoPE in either layout --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rope:
    theta: float | None  # None: not stated (the reader's class default applies)
    rope_type: str  # "default" when unscaled
    scaling: dict  # the scaling fields (factor, low_freq_factor, ...), without theta and type
    partial_rotary_factor: float | None


def layout_of(config: dict) -> str:
    return "rope_parameters" if isinstance(config.get("rope_parameters"), dict) else "top-level"


def rope_of(config: dict) -> Rope:
    """The RoPE a config.json states, in whichever layout it is written."""
    if layout_of(config) == "rope_parameters":
        rp = config["rope_parameters"]
        if rp and all(isinstance(v, dict) for v in rp.values()):
            raise CheckpointConfigError(f"per-layer-type rope_parameters ({', '.join(sorted(rp))}) have no form in "
                                        "the top-level rope_theta/rope_scaling schema; Kiln does not convert them")
        theta = rp.get("rope_theta", config.get("rope_theta"))
        rope_type = rp.get("rope_type") or rp.get("type") or "default"
        scaling = {k: v for k, v in rp.items() if k not in _NOT_SCALING}
        partial = rp.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    else:
        theta = config.get("rope_theta")
        rs = config.get("rope_scaling")
        if rs is None:
            rope_type, scaling = "default", {}
        elif isinstance(rs, dict):
            rope_type = rs.get("rope_type") or rs.get("type") or "default"
            scaling = {k: v for k, v in rs.items() if k not in _NOT_SCALING}
        else:
            raise CheckpointConfigError(f"rope_scaling must be an object or null, not {rs!r}")
        partial = config.get("partial_rotary_factor")
    return Rope(theta=theta, rope_type=rope_type, scaling=scaling, partial_rotary_factor=partial)


def render_rope(rope: Rope, layout: str) -> dict:
    """`rope` as the keys of one layout."""
    if layout == "top-level":
        out: dict[str, Any] = {}
        if rope.theta is not None:
            out["rope_theta"] = rope.theta
        unscaled = rope.rope_type == "default" and not rope.scaling
        out["rope_scaling"] = None if unscaled else {"rope_type": rope.rope_type, **rope.scaling}
    else:
        rp = {"rope_type": rope.rope_type, **rope.scaling}
        if rope.theta is not None:
            rp["rope_theta"] = rope.theta
        if rope.partial_rotary_factor is not None:
            rp["partial_rotary_factor"] = rope.partial_rotary_factor
        out = {"rope_parameters": rp}
    if rope.partial_rotary_factor is not None:
        out["partial_rotary_factor"] = rope.partial_rotary_factor
    return out


def rope_entries(source: dict, layout: str) -> dict:
    """The source's RoPE keys in `layout`: copied as they are when the source is written in that
    layout (the checkpoint then states exactly what the source states), translated otherwise."""
    if layout_of(source) == layout:
        return {k: source[k] for k in ROPE_KEYS[layout] if k in source}
    return render_rope(rope_of(source), layout)


def dtype_of(config: dict) -> Any:
    return config["dtype"] if config.get("dtype") is not None else config.get("torch_dtype")


# --- the conversion ---------------------------------------------------------------------------------
def runtime_config(doc: dict, source: dict, plan: ConfigPlan) -> dict:
    """`doc` (an exported config.json, or the source's own) as the runtime's transformers reads it:
    RoPE and max_position_embeddings from `source`, the dtype of `doc` (what its weights are) under
    the schema's key, keys the export dropped restored from `source`, the other schema's keys gone."""
    if doc is not source:
        _same_rope(doc, source)
    rope_keys = set(ROPE_KEYS["top-level"]) | set(ROPE_KEYS["rope_parameters"])
    out = {k: v for k, v in doc.items() if k not in plan.foreign and k not in rope_keys}
    for key, value in source.items():
        if key not in out and key not in plan.foreign and key not in rope_keys and key not in EXPORT_OWNED \
                and key not in ("dtype", "torch_dtype"):
            out[key] = value
    out.update(rope_entries(source, plan.rope))
    dtype = dtype_of(doc)
    if dtype is None:
        dtype = dtype_of(source)
    out.pop("dtype", None)
    out.pop("torch_dtype", None)
    if dtype is not None:
        out[plan.dtype_key] = dtype
    if "max_position_embeddings" in source:
        out["max_position_embeddings"] = source["max_position_embeddings"]
    return out


def _same_rope(doc: dict, source: dict) -> None:
    """The builder's transformers must have read the source's RoPE as the source states it: the
    quantization and the quality gate ran on that model. A builder whose transformers cannot read
    the source's schema would have calibrated another model; refuse rather than ship its figures."""
    if layout_of(doc) == "top-level" and "rope_theta" not in doc and doc.get("rope_scaling") is None:
        return  # the export states no RoPE at all: nothing to compare
    got, want = rope_of(doc), rope_of(source)
    theta_differs = want.theta is not None and got.theta is not None and float(got.theta) != float(want.theta)
    if theta_differs or got.rope_type != want.rope_type:
        raise CheckpointConfigError(
            f"the builder's transformers read RoPE (theta {got.theta}, type {got.rope_type}) from a source whose "
            f"config.json states theta {want.theta}, type {want.rope_type}: it cannot read that config's schema, so "
            "the model it quantized is not the source model")


def config_bytes(config: dict) -> bytes:
    return (json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write_runtime_config(path: Path, source_config: Path, plan: ConfigPlan, log=None) -> None:
    """Rewrite the exported config.json at `path` for the runtime (source_config: the source's)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    source = json.loads(source_config.read_text(encoding="utf-8"))
    out = runtime_config(doc, source, plan)
    path.write_bytes(config_bytes(out))
    if log:
        changed = sorted(k for k in set(doc) | set(out) if doc.get(k, _ABSENT) != out.get(k, _ABSENT))
        log.info("config.json written for transformers %s (schema %s): %s", plan.transformers or "?",
                 plan.schema_major, ", ".join(changed) or "unchanged")


def source_config_bytes(raw: bytes, plan: ConfigPlan) -> bytes:
    """A source's config.json for the runtime: the same bytes when the runtime reads it as it is."""
    source = json.loads(raw.decode("utf-8"))
    out = runtime_config(source, source, plan)
    return raw if out == source else config_bytes(out)


_ABSENT = object()
