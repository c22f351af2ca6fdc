"""Spec fields and their other valid values, by type: the machinery of the field walks
(tests/test_tune_reads.py: the records pass's READS against the lowering; tests/test_field_effects.py:
every spec leaf moves an artifact or is said to have no effect).

The values are not listed by hand: they follow each field's type in compiler/spec/models.py (every
other value of a Literal, a boolean flipped, an integer doubled or halved within its bounds, None
where it may be unset), plus a few strings a type cannot make up (STRINGS)."""

from __future__ import annotations

import dataclasses
import shutil
import types
from pathlib import Path
from typing import Annotated, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from compiler.spec import models as spec_models

from .quickstart import with_tuning

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# an image Kiln cannot read the TensorRT-LLM version of (K804 warns): the pin can change alone
CUSTOM_IMAGE = "registry.example.com/triton/custom:1@"
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@"


def spec_text(name: str) -> str:
    return (EXAMPLES / name / "kiln.yaml").read_text(encoding="utf-8")


def on_engine(doc: dict) -> dict:
    """The spec on the engine target: no quality gate (K807), no CUDA-graph sizes (K603)."""
    doc["target"] = "engine"
    for m in doc["models"].values():
        (m.get("quantization") or {}).pop("quality_gate", None)
        (m.get("runtime") or {}).pop("cuda_graph_batch_sizes", None)
    return doc


@dataclasses.dataclass(frozen=True)
class Base:
    name: str
    text: str
    model: str
    files: tuple[str, ...]  # example directories copied beside the spec


BASES = (
    Base("quickstart", with_tuning(spec_text("quickstart")), "tiny", ("quickstart",)),
    Base("quickstart-engine", yaml.safe_dump(on_engine(yaml.safe_load(with_tuning(spec_text("quickstart")))),
                                             sort_keys=False), "tiny", ("quickstart",)),
    Base("h200-tp8", spec_text("h200-tp8-llama70b").replace(NGC_IMAGE, CUSTOM_IMAGE), "llama70b", ()),
    Base("h200-tp8-engine", yaml.safe_dump(on_engine(yaml.safe_load(
        spec_text("h200-tp8-llama70b").replace(NGC_IMAGE, CUSTOM_IMAGE))), sort_keys=False), "llama70b", ()),
    Base("nvfp4-moe", spec_text("nvfp4-moe-blackwell").replace(NGC_IMAGE, CUSTOM_IMAGE), "qwen-moe",
         ("nvfp4-moe-blackwell",)),
)

# strings a type cannot make up: each names something that exists here (files copied beside the spec)
STRINGS = {
    "huggingface": ["acme/other-model"], "revision": ["1" * 40], "digest": ["sha256:" + "2" * 64],
    "path": ["model-copy"], "data": ["data/calib-code.jsonl", "data/eval.jsonl"],
    "eval": ["data/eval-code.jsonl", "data/calib.jsonl"],
    "architecture": ["llama-3.1-8b", "llama-3.1-70b", "qwen3-235b-a22b"],
    "tensorrt_llm": ["1.2.0", "1.3.0rc29"], "modelopt": ["0.45.0", "0.47.0"],
}


# --- a field's other values, by its type ------------------------------------------------------------
def members(tp) -> tuple[list, list, bool]:
    """(the types a field may hold, their constraints, whether it may be None)."""
    meta: list = []
    while get_origin(tp) is Annotated:
        tp, *more = get_args(tp)
        meta += more
    if get_origin(tp) in (Union, types.UnionType):
        out, nullable = [], False
        for a in get_args(tp):
            if a is type(None):
                nullable = True
                continue
            m, more, n = members(a)
            out, meta, nullable = out + m, meta + more, nullable or n
        return out, meta, nullable
    return [tp], meta, False


def field_of(path: tuple, root: type[BaseModel] = spec_models.Model) -> tuple[object, list]:
    """(the type, the constraints) of the field at `path` below `root` (a model's spec by default; a
    str segment names a field or a mapping's key, an int a list's item)."""
    tp, meta = root, []
    for seg in path:
        kinds = members(tp)[0]
        model = next((m for m in kinds if isinstance(m, type) and issubclass(m, BaseModel)
                      and isinstance(seg, str) and seg in m.model_fields), None)
        if model is not None:
            info = model.model_fields[seg]
            tp, meta = info.annotation, list(info.metadata)
        else:  # a mapping's key or a list's index: the item's type
            box = next(m for m in kinds if get_origin(m) in (dict, list))
            tp, meta = get_args(box)[-1], []
    return tp, meta


def bounded(values, meta) -> list:
    """The values within the field's bounds (Field(ge=..., le=...), gt, lt)."""
    checks = [c for m in meta for c in getattr(m, "metadata", [m])]

    def within(v) -> bool:
        return all((getattr(c, "ge", None) is None or v >= c.ge) and (getattr(c, "gt", None) is None or v > c.gt)
                   and (getattr(c, "le", None) is None or v <= c.le) and (getattr(c, "lt", None) is None or v < c.lt)
                   for c in checks)
    return [v for v in values if within(v)]


def other_values(path: tuple, value, root: type[BaseModel] = spec_models.Model) -> list:
    """The other valid values of the field at `path` (see field_of), by its type."""
    tp, own = field_of(path, root)
    kinds, meta, nullable = members(tp)
    meta = [*meta, *own]
    out: list = []
    for m in kinds:
        if get_origin(m) is Literal:
            out += list(get_args(m))
        elif m is bool:
            out += [True, False]
        elif m is int:
            out += bounded([value * 2, value // 2, value + 1] if isinstance(value, int) else [1, 2, 16], meta)
        elif m is float:
            out += bounded([round(value * 0.9, 4), round(value / 2, 4)] if isinstance(value, float) else [0.5],
                            meta)
        elif m is str:
            out += STRINGS.get(path[-1], [f"{value}x"])
        elif get_origin(m) is list:
            item = members(get_args(m)[0])[0][0]
            if item is int:
                out += [[1, 2, 4], [8]]
            elif isinstance(item, type) and issubclass(item, BaseModel):
                out += [[{"match": "*lm_head*", "weights": "bf16"}], [{"match": "model.layers.0.*", "block_size": 64}]]
            else:
                out += [[*(value or []), "*.mlp.gate"], []]
    if nullable:
        out.append(None)
    return [v for i, v in enumerate(out) if v != value and v not in out[:i]]


def set_field(doc: dict, path: tuple, value) -> None:
    """Set a field of the spec's data (None: unset it), making the sections on the way."""
    for k in path[:-1]:
        if isinstance(k, int):  # a list's item
            doc = doc[k]
            continue
        if not isinstance(doc.get(k), (dict, list)):
            doc[k] = {}
        doc = doc[k]
    if value is None:
        doc.pop(path[-1], None)
    else:
        doc[path[-1]] = value


def value_at(doc: dict, field: str):
    for seg in field.split("."):
        doc = doc.get(seg) if isinstance(doc, dict) else None
    return doc


def edited(doc: dict, path: tuple, value) -> dict:
    """The spec's data with the field at `path` set to `value` (None: unset), and what the value needs
    beside it (companions: the GPUs of a new tensor-parallel size; no Triton queue under trtllm-serve;
    the engine target's rules). `doc` is changed in place."""
    if path == ("target",):
        return on_engine(doc) if value == "engine" else {**doc, "target": value}
    set_field(doc, path, value)
    if path[0] != "models" or len(path) < 3:
        return doc
    m, field = path[1], ".".join(str(s) for s in path[2:])
    if field == "parallelism.pp" and isinstance(value, int):  # as many GPUs: the stages split the tensor-parallel group
        par = doc["models"][m]["parallelism"]
        par["tp"] = max(1, par.get("tp", 1) // value)
    if field in ("parallelism.tp", "parallelism.pp"):
        par = doc["models"][m].get("parallelism") or {}
        gpus = par.get("tp", 1) * par.get("pp", 1)
        for host in doc.get("hosts", {}).values():
            for g in host.get("gpus", []):
                if g.get("serves") == m and isinstance(g.get("index"), list):
                    g["index"] = list(range(gpus))
    if field == "serving.runtime" and value == "trtllm-serve":
        for k in ("max_queue_size", "queue_timeout_ms", "max_queue_delay_us"):
            doc["models"][m]["serving"].pop(k, None)
    return doc
