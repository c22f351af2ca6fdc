"""`engine`: the legacy TensorRT engine of a model (target `engine`, TensorRT-LLM <= 1.2.x).

The recipe is two commands, both from TensorRT-LLM itself: `examples/quantization/quantize.py`
(ModelOpt under the hood) turns the Hugging Face model into a TensorRT-LLM checkpoint at the spec's
format, calibration and parallelism; `trtllm-build` compiles it with the spec's limits and plugins
(paged KV cache and paged context FMHA, FP8 context FMHA where the format allows). Every flag is
checked against the flag set of those programs (data/trtllm_cli.json, with its source) before
anything runs, and the engine's own `config.json` is checked against the recipe afterwards.

It needs a GPU. It runs where `tensorrt_llm` is importable with CUDA (the commands as
subprocesses, with $KILN_TRTLLM_EXAMPLES pointing at TensorRT-LLM's examples/ directory), or
else in the TensorRT-LLM release container through the Docker SDK. Elsewhere the executor defers it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from compiler import resources
from compiler.graph.model import Action
from compiler.serving.layout import ENGINE_SUBDIR
from compiler.store.canonical import pretty_json
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext
from .source import SourceRef, fetch_huggingface, local_source, lower_source, source_needs
RELEASE_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:{version}"  # tag only: its digest is not in our facts
CONTAINER_EXAMPLES = "/app/tensorrt_llm/examples"
# Where the recipe's directories are mounted inside the release container.
MOUNTS = {"model": "/mnt/model", "calib": "/mnt/calibration", "scratch": "/mnt/scratch", "engine": "/mnt/engine"}

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


class EngineError(Exception):
    pass


@lru_cache(maxsize=1)
def cli_flags() -> dict[str, dict]:
    data = json.loads(resources.read_data("actions", "data", "trtllm_cli.json"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


# --- the recipe (pure) ---------------------------------------------------------------------------
class EngineQuant(Params):
    weights: str
    activations: str | None
    qformat: str | None  # quantize.py --qformat; None: quantize.py has no such format
    quant_algo: str | None  # the QuantAlgo the checkpoint then records
    kv_cache_dtype: str | None
    kv_cache_quant_algo: str | None
    awq_block_size: int | None


class EngineCalibration(Params):
    samples: int
    max_seq_len: int
    batch_size: int
    seed: int


class EngineLimits(Params):
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    max_beam_width: int


class EngineBuild(Params):
    tokens_per_block: int
    fp8_context_fmha: bool


class EngineParams(Params):
    effect_of_fields = BUILD_INPUT
    model: str
    source: SourceRef
    dtype: str
    quant: EngineQuant
    calibration: EngineCalibration | None
    tp: int
    pp: int
    limits: EngineLimits
    build: EngineBuild
    tensorrt_llm: str


def recipe(params: EngineParams, model_dir: str, calib_dir: str | None, ckpt_dir: str, engine_dir: str) -> dict:
    """The two command lines, as argument lists (program first)."""
    q = params.quant
    quantize = ["quantize.py", "--model_dir", model_dir, "--output_dir", ckpt_dir,
                "--dtype", DTYPES[params.dtype], "--qformat", q.qformat,
                "--tp_size", str(params.tp), "--pp_size", str(params.pp)]
    if q.kv_cache_dtype is not None:
        quantize += ["--kv_cache_dtype", q.kv_cache_dtype]
    if q.awq_block_size is not None:
        quantize += ["--awq_block_size", str(q.awq_block_size)]
    cal = params.calibration
    if cal is not None and calib_dir is not None:
        quantize += ["--calib_dataset", calib_dir, "--calib_size", str(cal.samples),
                     "--calib_max_seq_length", str(cal.max_seq_len), "--batch_size", str(cal.batch_size),
                     "--seed", str(cal.seed)]
    lim, b = params.limits, params.build
    build = ["trtllm-build", "--checkpoint_dir", ckpt_dir, "--output_dir", engine_dir,
             "--max_batch_size", str(lim.max_batch_size), "--max_input_len", str(lim.max_input_len),
             "--max_seq_len", str(lim.max_seq_len), "--max_num_tokens", str(lim.max_num_tokens),
             "--max_beam_width", str(lim.max_beam_width),
             "--kv_cache_type", "paged", "--tokens_per_block", str(b.tokens_per_block),
             "--gpt_attention_plugin", "auto", "--context_fmha", "enable", "--remove_input_padding", "enable",
             "--use_paged_context_fmha", "enable",
             "--use_fp8_context_fmha", "enable" if b.fp8_context_fmha else "disable",
             "--workers", str(params.tp * params.pp)]
    if q.qformat == "full_prec":
        build += ["--gemm_plugin", "auto"]  # only non-quantized GEMMs use it
    return {"quantize": quantize, "build": build}


def check_flags(argv: list[str]) -> list[str]:
    """Problems with a command line against the real flag set: unknown flags, values outside a
    flag's choices, a switch given a value."""
    program = argv[0]
    known = cli_flags()[program]
    problems, i = [], 1
    while i < len(argv):
        flag = argv[i]
        if flag not in known:
            problems.append(f"{program}: no such flag {flag}")
            i += 2 if i + 1 < len(argv) and not argv[i + 1].startswith("--") else 1
            continue
        spec = known[flag]
        if spec is True:
            i += 1
            continue
        if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            problems.append(f"{program}: {flag} needs a value")
            i += 1
            continue
        if isinstance(spec, list) and argv[i + 1] not in spec:
            problems.append(f"{program}: {flag} {argv[i + 1]!r} is not one of {', '.join(spec)}")
        i += 2
    return problems


def check_engine_config(config: dict, params: EngineParams) -> list[str]:
    """What an engine's config.json (`version`, `pretrained_config`, `build_config`, as
    TensorRT-LLM's Engine.save writes it) says differently from the recipe: the serving config
    built on it would promise limits the engine does not have."""
    problems = []
    bc = config.get("build_config") or {}
    for key, want in params.limits.to_json().items():
        if bc.get(key) != want:
            problems.append(f"build_config.{key} is {bc.get(key)!r}, the spec says {want}")
    plugin = bc.get("plugin_config") or {}
    for key, want in (("use_paged_context_fmha", True), ("use_fp8_context_fmha", params.build.fp8_context_fmha),
                      ("tokens_per_block", params.build.tokens_per_block)):
        if plugin.get(key) != want:
            problems.append(f"build_config.plugin_config.{key} is {plugin.get(key)!r}, the recipe says {want}")
    kv_type = str(bc.get("kv_cache_type", "")).upper().rsplit(".", 1)[-1]
    if kv_type != "PAGED":
        problems.append(f"build_config.kv_cache_type is {bc.get('kv_cache_type')!r}, the recipe builds PAGED")
    pc = config.get("pretrained_config") or {}
    mapping = pc.get("mapping") or {}
    if (mapping.get("tp_size"), mapping.get("pp_size")) != (params.tp, params.pp):
        problems.append(f"pretrained_config.mapping is tp={mapping.get('tp_size')} pp={mapping.get('pp_size')}, "
                        f"the spec says tp={params.tp} pp={params.pp}")
    quant = pc.get("quantization") or {}
    q = params.quant
    if quant.get("quant_algo") != q.quant_algo:
        problems.append(f"pretrained_config.quantization.quant_algo is {quant.get('quant_algo')!r}, "
                        f"the spec's format is {q.quant_algo!r}")
    if quant.get("kv_cache_quant_algo") != q.kv_cache_quant_algo:
        problems.append(f"pretrained_config.quantization.kv_cache_quant_algo is {quant.get('kv_cache_quant_algo')!r}, "
                        f"the spec says {q.kv_cache_quant_algo!r}")
    return problems


# --- lowering ----------------------------------------------------------------------------------------
def lower_model(ctx: LowerContext, name: str) -> Action:
    """The recipe's quantize.py format, QuantAlgo and FP8 FMHA rule are the format table's engine
    row; the KV cache's --kv_cache_dtype its kv_cache row."""
    rm = ctx.ir.models[name]
    model, f = rm.spec, rm.formats
    weights = f.storage_weights
    engine = f.recipe.engine if f.recipe is not None else None
    qformat, algo = (engine.qformat, engine.quant_algo) if engine is not None else (None, None)
    kv = (f.kv.engine_kv_cache_dtype, f.kv.kv_cache_quant_algo) if f.kv.quantized else (None, None)
    source, inputs, files = lower_source(ctx, model)
    cal = model.quantization.calibration
    lim = model.limits
    params = EngineParams(
        model=name, source=source, dtype=f.dtype,
        quant=EngineQuant(weights=weights, activations=f.act_quant, qformat=qformat, quant_algo=algo,
                          kv_cache_dtype=kv[0], kv_cache_quant_algo=kv[1],
                          awq_block_size=f.block_size if qformat in ("int4_awq", "w4a8_awq") else None),
        calibration=None if cal is None or qformat == "full_prec" else
        EngineCalibration(samples=cal.samples, max_seq_len=cal.max_seq_len, batch_size=cal.batch_size, seed=cal.seed),
        tp=model.parallelism.tp, pp=model.parallelism.pp,
        limits=EngineLimits(max_batch_size=lim.max_batch_size, max_input_len=lim.max_input_len,
                            max_seq_len=lim.max_seq_len, max_num_tokens=lim.max_num_tokens,
                            max_beam_width=lim.max_beam_width),
        build=EngineBuild(tokens_per_block=model.runtime.tokens_per_block,
                          fp8_context_fmha=bool(model.kernels.fp8_context_fmha is not False
                                                and engine is not None and engine.fp8_context_fmha)),
        tensorrt_llm=ctx.spec.toolchain.tensorrt_llm)
    deps = (f"calibration-set/{name}",) if params.calibration is not None else ()
    needs = ("gpu",) + (() if source.path else ("network",))
    inputs.update(ctx.limit_inputs([name]))  # the engine bakes max_batch_size in
    return ENGINE.action(f"engine/{name}", params, inputs=inputs, deps=deps, needs=needs, files=files)


def _has_trtllm() -> bool:
    return importlib.util.find_spec("tensorrt_llm") is not None


# --- running -----------------------------------------------------------------------------------------
def preflight(params: EngineParams) -> None:
    """Everything `run` refuses before it touches a model: a format quantize.py does not have, a
    flag or value the pinned programs do not accept."""
    if params.quant.qformat is None:
        q = params.quant
        raise EngineError(f"TensorRT-LLM's quantize.py has no format for {q.weights} weights with "
                          f"{q.activations or 'unquantized'} activations; use the llmapi target")
    for argv in recipe(params, "MODEL", "CALIB", "CKPT", "ENGINE").values():
        problems = check_flags(argv)
        if problems:
            raise EngineError("; ".join(problems))


def run(params: EngineParams, ctx: RunContext) -> None:
    preflight(params)
    work = ctx.out.parent / "engine-work"
    work.mkdir()
    model_dir = local_source(ctx, work) if params.source.path else fetch_huggingface(params.source, ctx.log)
    calib = None
    if params.calibration is not None:
        calib = work / "calib"
        calib.mkdir()
        shutil.copyfile(ctx.deps[f"calibration-set/{params.model}"] / "calibration.jsonl", calib / "train.jsonl")
    engine_dir = ctx.out / ENGINE_SUBDIR  # the Triton repository's gpt_model_path points here (serving.layout)
    if _has_trtllm():
        _run_local(params, model_dir, calib, work / "ckpt", engine_dir, ctx)
    else:
        _run_container(params, model_dir, calib, work, engine_dir, ctx)
    config = json.loads((engine_dir / "config.json").read_text(encoding="utf-8"))
    problems = check_engine_config(config, params)
    if problems:
        raise EngineError("the built engine does not match the spec: " + "; ".join(problems))
    rec = recipe(params, "<model>", "<calibration>" if calib else None, "<checkpoint>", ENGINE_SUBDIR)
    (ctx.out / "recipe.json").write_bytes(pretty_json(rec))


def _run_local(params, model_dir: Path, calib, ckpt: Path, engine_dir: Path, ctx: RunContext) -> None:
    examples = os.environ.get("KILN_TRTLLM_EXAMPLES")
    if not examples:
        raise EngineError("set KILN_TRTLLM_EXAMPLES to TensorRT-LLM's examples/ directory (quantize.py lives there)")
    rec = recipe(params, str(model_dir), str(calib) if calib else None, str(ckpt), str(engine_dir))
    for argv in (rec["quantize"], rec["build"]):
        cmd = ([sys.executable, str(Path(examples) / "quantization" / "quantize.py")] + argv[1:]
               if argv[0] == "quantize.py" else [shutil.which("trtllm-build") or "trtllm-build"] + argv[1:])
        ctx.log.info("$ %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        ctx.log.info("%s", proc.stdout[-20000:] + proc.stderr[-20000:])
        if proc.returncode != 0:
            raise EngineError(f"{argv[0]} exited {proc.returncode}; see the log")


def _run_container(params, model_dir: Path, calib, work: Path, engine_dir: Path, ctx: RunContext) -> None:
    try:
        import docker
    except ImportError:
        raise EngineError("neither tensorrt_llm nor the Docker SDK (pip install docker) is available") from None
    engine_dir.mkdir()
    rec = recipe(params, MOUNTS["model"], MOUNTS["calib"] if calib else None, f"{MOUNTS['scratch']}/ckpt",
                 MOUNTS["engine"])
    script = " && ".join([
        " ".join(["python3", f"{CONTAINER_EXAMPLES}/quantization/quantize.py", *rec["quantize"][1:]]),
        " ".join(rec["build"])])
    volumes = {str(Path(model_dir).resolve()): {"bind": MOUNTS["model"], "mode": "ro"},
               str(work.resolve()): {"bind": MOUNTS["scratch"], "mode": "rw"},
               str(engine_dir.resolve()): {"bind": MOUNTS["engine"], "mode": "rw"}}
    if calib:
        volumes[str(Path(calib).resolve())] = {"bind": MOUNTS["calib"], "mode": "ro"}
    image = RELEASE_IMAGE.format(version=params.tensorrt_llm)
    ctx.log.info("docker run %s: %s", image, script)
    client = docker.from_env()
    try:
        logs = client.containers.run(image, ["bash", "-c", script], volumes=volumes, remove=True,
                                     device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])],
                                     stdout=True, stderr=True)
    except docker.errors.DockerException as e:
        raise EngineError(f"the TensorRT-LLM container failed: {e}") from None
    finally:
        client.close()
    ctx.log.info("%s", logs.decode("utf-8", "replace")[-40000:])


class Engine(ActionKind[EngineParams]):
    kind, version, Params = "engine", 1, EngineParams
    isolated = True  # quantize.py and trtllm-build run for minutes: killed with its process group on interrupt

    def lower(self, ctx: LowerContext) -> list[Action]:
        if ctx.ir.target != "engine":
            return []
        return [lower_model(ctx, name) for name in sorted(ctx.ir.models)]

    def size(self, action: Action, ir):
        from .sizing import engine_size, serving_arch

        p = action.params
        return engine_size(ir.models[p.model], serving_arch(ir, p.model), p.calibration)

    def missing(self, params: EngineParams, needs, builder) -> list[str]:
        out = [] if builder.has("gpu") else ["gpu"]
        machine = getattr(builder, "machine", None)
        trtllm = builder.has("tensorrt_llm") if machine is not None and machine.elsewhere else _has_trtllm()
        if not out and not trtllm and not builder.has("docker"):
            out.append("docker")  # no tensorrt_llm here: the release container must run it
        return out + source_needs(params.source, builder)

    def preflight(self, params: EngineParams) -> None:
        preflight(params)

    def run(self, params: EngineParams, ctx: RunContext) -> None:
        run(params, ctx)


ENGINE = KIND = Engine()
