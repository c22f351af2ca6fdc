"""The Triton model repository of one host, as pure functions: spec -> parameters -> files.

`repository_params` picks, from the spec and the resolved serving units, every value the
repository shows (it becomes the action's parameters, so a change to anything else never rebuilds
the repository). `render` turns those parameters into {relative path: bytes} through the Jinja2
templates in compiler/templates/triton/ (StrictUndefined, and a finalize hook that refuses None, so no
value can go missing or print as "None"). The Python models' code is copied verbatim from the
same directory. Tokenizer files are not rendered: the action copies them from the checkpoint into
the directories `tokenizer_dirs` names.

Where the knobs go (facts §4–5): Triton's `max_batch_size` and the dynamic batcher's delay only
bound Triton-side batching; admission control is the dynamic batcher's queue policy (a bounded
queue and a timeout that REJECTs); the engine's build limits stay out of config.pbtxt (ignored
there, tensorrtllm_backend#402) and the LLM-API limits live in model.yaml.

Each serving container sees only its unit's devices (the host script passes them with --gpus),
so device ordinals inside it start at 0: a MIG unit binds "0", a tp=4 group "0,1,2,3", once per
Triton instance (`gpu_device_ids`, ';' between instances).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from compiler import resources
from compiler.graph.kinds import Params
from compiler.ir import Resolved, ResolvedModel
from compiler.params import BUILD_INPUT
from compiler.templating import strict_environment

from .layout import ENGINE_PARTS, REPOSITORY_DIR, engine_dir, engine_names, model_dir
from .yamlout import dump_yaml

if TYPE_CHECKING:  # jinja2 loads when a template is rendered: plan and validate never need it
    from jinja2 import Environment

TEMPLATE_DIR = resources.template_dir("triton")
TARGETS = ("llmapi", "engine")
TOKENIZER_DIR = "tokenizer"  # inside a model's directory; parameters name it relative to that directory


class RenderError(Exception):
    pass


# --- parameters ---------------------------------------------------------------------------------
class QueuePolicy(Params):
    max_queue_size: int | None
    timeout_us: int | None


class TritonModel(Params):
    """The values one model's part of the repository shows."""

    name: str
    max_batch_size: int
    max_input_len: int
    max_beam_width: int
    max_queue_delay_us: int
    queue: QueuePolicy | None
    decoupled: bool
    stream_text: str = "cumulative"
    instances: int
    ranks: int = 1  # engine target: MPI ranks (tp * pp), one tritonserver each
    gpu_device_ids: str
    # engine runtime knobs the inflight_batcher_llm backend reads from its parameters
    gpt_model_type: str
    batch_scheduler_policy: str
    kv_cache_free_gpu_mem_fraction: float
    enable_kv_cache_reuse: bool
    enable_chunked_context: bool
    cuda_graph_mode: bool


class RepositoryParams(Params):
    """Everything the repository of one host depends on, except the LLM-API options (a dependency)
    and the tokenizer files (copied from the tokenizer artifacts)."""

    effect_of_fields = BUILD_INPUT

    host: str
    target: str
    models: list[TritonModel]
    templates: dict[str, str]  # template file -> digest
    tokenizers: dict[str, str] = {}  # model -> the action whose tree holds its tokenizer files
    tensorrt_llm: str | None = None  # shown in model.yaml (llmapi target only)


def _devices_per_unit(ir: Resolved, host: str, model: str) -> int:
    counts = {len(u.gpu_indexes) for u in ir.host_units(host) if u.model == model}
    if len(counts) != 1:  # validation (K7xx) makes every unit of a model as wide as tp * pp
        raise RenderError(f"model {model!r} on host {host!r}: serving units of different widths {sorted(counts)}")
    return counts.pop()


def model_params(rm: ResolvedModel, devices: int) -> TritonModel:
    """The values one model's part of the repository shows (pure)."""
    s, lim, rt = rm.spec.serving, rm.spec.limits, rm.spec.runtime
    one = ",".join(str(i) for i in range(devices))
    queue = None
    if s.max_queue_size is not None or s.queue_timeout_ms is not None:
        queue = QueuePolicy(max_queue_size=s.max_queue_size,
                            timeout_us=None if s.queue_timeout_ms is None else s.queue_timeout_ms * 1000)
    return TritonModel(
        name=rm.name, max_batch_size=lim.max_batch_size, max_input_len=lim.max_input_len,
        max_beam_width=lim.max_beam_width, max_queue_delay_us=s.max_queue_delay_us, queue=queue,
        decoupled=s.streaming, stream_text=s.stream_text, instances=s.instances, ranks=devices,
        gpu_device_ids=";".join([one] * s.instances),
        gpt_model_type="V1" if rt.scheduler == "static_batch" else "inflight_fused_batching",
        batch_scheduler_policy="max_utilization" if rt.scheduler == "max_utilization" else "guaranteed_no_evict",
        kv_cache_free_gpu_mem_fraction=rt.kv_cache_memory_fraction, enable_kv_cache_reuse=rt.block_reuse,
        enable_chunked_context=rt.chunked_prefill, cuda_graph_mode=rt.cuda_graph_batch_sizes is not None)


def repository_params(ir: Resolved, host: str, target: str | None = None) -> RepositoryParams:
    """The repository of `host` for the spec's target (or `target`)."""
    target = target or ir.target
    # a disaggregated model's servers are trtllm-serve role servers, never Triton models
    served = sorted({u.model for u in ir.host_units(host) if u.role is None})
    return RepositoryParams(
        host=host, target=target,
        models=[model_params(ir.models[m], _devices_per_unit(ir, host, m)) for m in served],
        templates=template_digests(target),
        tensorrt_llm=ir.spec.toolchain.tensorrt_llm if target == "llmapi" else None)


def template_digests(target: str, template_dir: Path = TEMPLATE_DIR) -> dict[str, str]:
    """Digests of the files one target renders from (the shared macros and the target's directory),
    so that editing a template rebuilds the repositories that use it and no others."""
    files = [template_dir / "macros.j2", *sorted((template_dir / target).rglob("*"))]
    return {p.relative_to(template_dir).as_posix(): "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files if p.is_file() and "__pycache__" not in p.parts}


# --- rendering ----------------------------------------------------------------------------------
def _finalize(value: object) -> object:
    if value is None:
        from jinja2 import TemplateError

        raise TemplateError("a template printed None: the value is missing from the parameters")
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _pbstr(value: object) -> str:
    """A protobuf text-format string literal (parameters are strings; bools as the backends parse them)."""
    if value is None:
        from jinja2 import TemplateError

        raise TemplateError("a template quoted None: the value is missing from the parameters")
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@functools.lru_cache(maxsize=16)  # compiled templates are kept: an action per host or model
def environment(template_dir: Path = TEMPLATE_DIR) -> Environment:
    return strict_environment(template_dir, _finalize, {"pbstr": _pbstr}, trim_blocks=True, lstrip_blocks=True)


def llm_api_yaml(name: str, options: dict, tensorrt_llm: str | None = None) -> bytes:
    """`1/model.yaml`: the model's LLM-API options plus where the checkpoint and tokenizer sit in the image."""
    doc = {**options, "model": model_dir(name), "backend": "pytorch",
           "tokenizer": f"{REPOSITORY_DIR}/{name}/{TOKENIZER_DIR}"}
    pin = f" (TensorRT-LLM {tensorrt_llm})" if tensorrt_llm else ""
    header = f"# LLM() arguments for Triton model {name}{pin}; generated by kiln\n"
    return (header + dump_yaml(doc)).encode()


def render(params: RepositoryParams, llm_options: dict[str, dict] | None = None,
           template_dir: Path = TEMPLATE_DIR) -> dict[str, bytes]:
    """The repository's files, tokenizers excepted. `llm_options`: model -> LLM-API options (llmapi)."""
    env = environment(template_dir)
    files: dict[str, bytes] = {}
    if params.target not in TARGETS:
        raise RenderError(f"unknown serving target {params.target!r}")

    def put(path: str, template: str, **ctx) -> None:
        files[path] = env.get_template(template).render(**ctx).encode()

    def copy(path: str, source: str) -> None:
        files[path] = (template_dir / source).read_bytes()

    for m in params.models:
        name = m.name
        if params.target == "llmapi":
            if llm_options is None or name not in llm_options:
                raise RenderError(f"no LLM-API options for model {name!r}")
            put(f"{name}/config.pbtxt", "llmapi/config.pbtxt.j2", m=m, tokenizer_dir=TOKENIZER_DIR)
            copy(f"{name}/1/model.py", "llmapi/model.py")
            files[f"{name}/1/model.yaml"] = llm_api_yaml(name, llm_options[name], params.tensorrt_llm)
            continue
        names = engine_names(name)
        ctx = {"m": m, "names": names, "tokenizer_dir": TOKENIZER_DIR, "engine_path": engine_dir(name)}
        for part in ("ensemble", *ENGINE_PARTS):
            put(f"{names[part]}/config.pbtxt", f"engine/{part}.pbtxt.j2", **ctx)
        for part in ("preprocessing", "postprocessing", "bls"):
            copy(f"{names[part]}/1/model.py", f"engine/{part}.py")
        # Triton loads no model without a version directory, even where it holds no model file
        files[f"{names['ensemble']}/1/README"] = (b"Version 1 of an ensemble: Triton reads the steps from "
                                                  b"../config.pbtxt; this directory only has to exist.\n")
        files[f"{names['tensorrt_llm']}/1/README"] = (f"Version 1 of the engine model: the backend reads the engine "
                                                      f"from {engine_dir(name)} (parameter gpt_model_path); this "
                                                      f"directory only has to exist.\n").encode()
    return files


def tokenizer_dirs(params: dict) -> dict[str, str]:
    """Repository directory -> the model whose tokenizer files go there."""
    out = {}
    for m in params.models:
        name = m.name
        if params.target == "llmapi":
            out[f"{name}/{TOKENIZER_DIR}"] = name
        else:
            names = engine_names(name)
            for part in ("preprocessing", "postprocessing"):
                out[f"{names[part]}/{TOKENIZER_DIR}"] = name
    return out
