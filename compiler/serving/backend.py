"""What the pinned TensorRT-LLM Triton backend (`backend: "tensorrtllm"`, inflight_batcher_llm) reads
from a model configuration, and a check that a generated configuration supplies it.

The facts are data (compiler/actions/data/tensorrtllm_backend.json, with the source files and
commits they were read from): every parameter the backend reads, its type and whether it has a
fallback, and every input and output tensor with the type, shape and reshape the backend's own
template declares. A configuration that misses a parameter read without a fallback does not load
("Cannot find parameter with name: ..."); a value the backend cannot parse, or a tensor it does not
read, is silently replaced by a default or ignored, which is worse; a per-prompt scalar without
`reshape: { shape: [ ] }` breaks the backend's batch split as soon as a request holds two prompts.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from compiler import resources

BACKEND = "tensorrtllm"
_BOOLS = {"True", "true", "TRUE", "1", "False", "false", "FALSE", "0"}
_INT = re.compile(r"^\s*[+-]?\d+")  # std::stoi reads a leading integer
_UINT = re.compile(r"^\s*\+?\d+")
_FLOAT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INT_LIST = re.compile(r"^\s*-?\d+(\s*,\s*-?\d+)*\s*$")
_INT_LIST_LIST = re.compile(r"^\{\s*-?\d+(\s*,\s*-?\d+)*\s*\}(\s*,\s*\{\s*-?\d+(\s*,\s*-?\d+)*\s*\})*$")


@dataclass(frozen=True)
class Facts:
    parameters: dict
    inputs: dict
    outputs: dict
    data_types: dict
    source: dict


@functools.lru_cache(maxsize=1)
def facts() -> Facts:
    d = json.loads(resources.read_data("actions", "data", "tensorrtllm_backend.json"))
    return Facts(d["parameters"], d["inputs"], d["outputs"], d["data_types"], d["_source"])


def parses_as(kind: str, value: str) -> bool:
    """Whether the backend's parser for `kind` accepts `value` (model_state.cc GetParameter<T>)."""
    if kind == "string":
        return True
    if kind == "bool":
        return value in _BOOLS
    if kind == "int32":
        return bool(_INT.match(value))
    if kind in ("uint32", "uint64"):
        return bool(_UINT.match(value))
    if kind == "float":
        return bool(_FLOAT.match(value))
    if kind == "int_list":
        return bool(_INT_LIST.match(value))
    if kind == "int_list_list":
        return bool(_INT_LIST_LIST.match(value.replace(" ", "")))
    if kind == "device_sets":
        return all(_INT_LIST.match(s) for s in value.split(";"))
    raise ValueError(f"unknown parameter type {kind!r} in tensorrtllm_backend.json")


def check(config) -> list[str]:
    """Problems of one `backend: "tensorrtllm"` ModelConfig against what the backend reads."""
    from .pbtxt import model_config_pb2

    f, mc = facts(), model_config_pb2()
    type_name = mc.DataType.Name
    out: list[str] = []
    params = {k: v.string_value for k, v in config.parameters.items()}
    for name, spec in f.parameters.items():
        if name not in params:
            if spec["required"]:
                out.append(f"parameter {name!r} is missing; the {BACKEND} backend reads it without a fallback "
                           "and the model does not load")
            continue
        value = params[name]
        if not parses_as(spec["type"], value):
            out.append(f"parameter {name}={value!r} is not a {spec['type']} the {BACKEND} backend can read")
        elif "values" in spec and value not in spec["values"]:
            out.append(f"parameter {name}={value!r} is not one of {spec['values']}")
    for name in sorted(set(params) - set(f.parameters)):
        out.append(f"parameter {name!r} is not read by the {BACKEND} backend")
    out += _tensors("input", config.input, f.inputs, f.data_types, type_name)
    out += _tensors("output", config.output, f.outputs, f.data_types, type_name)
    return out


def _tensors(kind: str, declared, known: dict, data_types: dict, type_name) -> list[str]:
    out = []
    have = {t.name: t for t in declared}
    for name, spec in known.items():
        if spec["required"] and name not in have:
            out.append(f"{kind} {name!r} is missing; the {BACKEND} backend needs it")
    for name, t in have.items():
        spec = known.get(name)
        if spec is None:
            out.append(f"{kind} {name!r} is not read by the {BACKEND} backend")
            continue
        want = [spec["data_type"]] if spec["data_type"] else data_types[name]
        if type_name(t.data_type) not in want:
            out.append(f"{kind} {name!r} is {type_name(t.data_type)}; the {BACKEND} backend reads {' or '.join(want)}")
        if list(t.dims) != spec["dims"]:
            out.append(f"{kind} {name!r} has dims {list(t.dims)}; the {BACKEND} backend's are {spec['dims']}")
        if kind == "input":
            reshape = list(t.reshape.shape) if t.HasField("reshape") else None
            if reshape != spec["reshape"] and spec["reshape"] is None:
                out.append(f"input {name!r} has reshape {reshape}; the {BACKEND} backend's template has none")
            elif reshape != spec["reshape"]:
                out.append(f"input {name!r} needs reshape: {{ shape: {spec['reshape']} }}: the {BACKEND} backend "
                           "splits a request's prompts along the batch dimension and reads one value per prompt")
            if t.allow_ragged_batch != spec["ragged"]:
                out.append(f"input {name!r} allow_ragged_batch is {str(t.allow_ragged_batch).lower()}; the "
                           f"{BACKEND} backend's template has {str(spec['ragged']).lower()}")
    return out
