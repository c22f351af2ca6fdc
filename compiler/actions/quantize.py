"""`quantize`: post-training quantization of one model with NVIDIA ModelOpt, exported as a unified
Hugging Face checkpoint (config.json with `quantization_config`, hf_quant_config.json, safetensors,
and the source's tokenizer files): the checkpoint TensorRT-LLM's PyTorch backend loads.

Its key covers the source files' digests (or the pinned Hugging Face revision), the calibration set
(as a dependency), the eval set when the model has a quality gate, the recipe (weights,
activations, KV cache, block size, exclusions, overrides, calibration length and batch size), the
model dtype, the builder's toolchain (the ModelOpt pin and the torch and transformers versions the
table compiler/catalog/data/checkpoint_config.json gives for it: from the spec and Kiln's data, never
from what a machine has installed, so the key is the same on every machine; the action refuses to
run under other versions) and the config.json schema of the transformers that the pinned
TensorRT-LLM reads the checkpoint with (hf_config.py: the export's config.json is rewritten in it).
It does not cover the gate's threshold: `quality-gate/<model>` compares the figures this action
measures, so tightening a threshold re-runs no quantization.

The quality figures are measured here because only this action holds the fake-quantized model in
memory: the unquantized model is evaluated first, then the model after calibration and after
ModelOpt's export preprocessing (fused QKV / gate-up layers share scales, AWQ scales folded into
the layer norms), i.e. the model the checkpoint encodes. Both go to quality.json.

torch, transformers and ModelOpt are imported inside run(): validating and planning never load them.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from compiler.catalog.checkpoint_config import load_checkpoint_config
from compiler.graph.model import Action
from compiler.spec.models import UNQUANTIZED
from compiler.store.canonical import pretty_json
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext
from .hf_config import CONFIG_JSON, CheckpointConfigError, ConfigPlan, config_plan, require_plan, write_runtime_config
from .sizing import CPU_THREADS
from .source import TOKENIZER_FILES, SourceRef, fetch_huggingface, local_source, lower_source, source_needs

EVAL_MAX_TOKENS = 2048  # each eval text is cut to this many tokens (or the model's context, if shorter)
EXPERTS = "*experts*"  # module names of routed experts (compiler/capacity/modules.py naming)

_LOCK = threading.Lock()  # ModelOpt and torch settings are process-global: one quantization at a time


class QuantizeError(Exception):
    pass


# --- parameters and lowering ----------------------------------------------------------------------
class ModelOptPlan(Params):
    """How ModelOpt makes one recipe: the format table's row (compiler/catalog/data/formats.json),
    carried in the parameters so that a corrected row rebuilds exactly the checkpoints using it."""

    recipe: str  # the recipe's name, for messages
    config: str  # named config of the pinned ModelOpt whose weight (and input) quantizer is used
    activations_config: str | None  # a second config whose input quantizer replaces the first one's
    inputs: str  # "config" | "disabled" | "activations_config"
    algorithm: str | None  # calibration algorithm; None: no calibration pass
    exports_quant_algo: str | None  # what ModelOpt writes to hf_quant_config.json
    quant_algo: str | None  # what TensorRT-LLM reads (the export is rewritten to it when they differ)
    experts_only: bool  # TensorRT-LLM runs the recipe in MoE expert layers only: quantize only those
    cuda_only: bool


class KvPlan(Params):
    name: str
    config: str | None  # named ModelOpt KV config
    entry: dict[str, Any] | None  # the quant_cfg entry Kiln adds where ModelOpt has no config
    cuda_only: bool


class OverrideParams(Params):
    match: str
    weights: str | None = None
    block_size: int | None = None
    plan: ModelOptPlan | None = None  # the override's own recipe, when it sets quantized weights


class CalibrationParams(Params):
    max_seq_len: int
    batch_size: int


class EvalParams(Params):
    metric: str
    samples: int | None
    max_tokens: int


class QuantizeParams(Params):
    effect_of_fields = BUILD_INPUT
    model: str
    source: SourceRef
    dtype: str
    weights: str
    activations: str | None  # quantized activation format; None = the model dtype
    kv_cache: str
    block_size: int | None
    exclude: list[str]
    overrides: list[OverrideParams]
    calibration: CalibrationParams | None
    quality: EvalParams | None  # the eval the quality gate compares (its threshold is quality-gate's)
    modelopt: str | None
    torch: str | None  # the builder's torch and transformers for the ModelOpt pin (None: not in the table)
    transformers: str | None
    plan: ModelOptPlan | None  # None: the weights stay unquantized (only the KV cache is quantized)
    kv: KvPlan | None
    checkpoint_config: ConfigPlan | None  # the schema the runtime reads config.json in (None: pin not in the table)


def modelopt_plan(recipe) -> ModelOptPlan | None:
    """The ModelOpt part of a format-table recipe (None for unquantized weights)."""
    if recipe is None or not recipe.quantized:
        return None
    m = recipe.modelopt
    if m is None:
        raise QuantizeError(f"ModelOpt (as Kiln drives it) cannot make {recipe.label}: {recipe.modelopt_note}")
    return ModelOptPlan(recipe=recipe.label, config=m.config, activations_config=m.activations_config,
                        inputs=m.inputs, algorithm=m.algorithm, exports_quant_algo=m.exports_quant_algo,
                        quant_algo=recipe.quant_algo, experts_only=recipe.experts_only, cuda_only=m.cuda_only)


def kv_plan(kv) -> KvPlan | None:
    if not kv.quantized:
        return None
    return KvPlan(name=kv.name, config=kv.modelopt_config,
                  entry=dict(kv.modelopt_entry) if kv.modelopt_entry else None, cuda_only=kv.cuda_only)


def needs_gpu(params: QuantizeParams) -> list[str]:
    """The parts of the recipe ModelOpt can only fake-quantize on CUDA (the format table's cuda_only)."""
    out = []
    if params.plan is not None and params.plan.cuda_only:
        out.append(f"{params.plan.recipe}")
    if params.kv is not None and params.kv.cuda_only:
        out.append(f"an {params.kv.name} KV cache")
    for o in params.overrides:
        if o.plan is not None and o.plan.cuda_only:
            out.append(f"{o.plan.recipe} for {o.match!r}")
    return out


def lower_model(ctx: LowerContext, name: str) -> Action:
    rm = ctx.ir.models[name]
    model, f = rm.spec, rm.formats
    q = model.quantization
    source, inputs, files = lower_source(ctx, model)
    gate = None
    if q.quality_gate is not None:
        g = q.quality_gate
        inputs["eval"] = ctx.file_digest(g.eval)
        files["eval"] = str(ctx.input_path(g.eval))
        gate = EvalParams(metric=g.metric, samples=g.samples, max_tokens=EVAL_MAX_TOKENS)
    cal = q.calibration
    overrides = []
    for o, mf in zip(q.overrides, f.overrides):
        own = o.weights is not None and o.weights not in UNQUANTIZED
        overrides.append(OverrideParams(match=o.match, weights=o.weights, block_size=o.block_size,
                                        plan=modelopt_plan(mf.recipe) if own else None))
    tc = ctx.spec.toolchain
    builder = load_checkpoint_config().builder(tc.modelopt)
    params = QuantizeParams(
        model=name, source=source, dtype=f.dtype, weights=f.weights, activations=f.act_quant, kv_cache=f.kv_cache,
        block_size=f.block_size, exclude=list(f.exclude), overrides=overrides,
        calibration=None if cal is None else CalibrationParams(max_seq_len=cal.max_seq_len, batch_size=cal.batch_size),
        quality=gate, modelopt=tc.modelopt, torch=builder.torch if builder else None,
        transformers=builder.transformers if builder else None, plan=modelopt_plan(f.recipe), kv=kv_plan(f.kv),
        checkpoint_config=config_plan(tc.tensorrt_llm))
    needs = ("torch", "gpu") if needs_gpu(params) else ("torch",)
    if not source.path:
        needs += ("network",)
    deps = (f"calibration-set/{name}",) if cal is not None else ()
    return QUANTIZE.action(f"quantize/{name}", params, inputs=inputs, deps=deps, needs=needs, files=files)


# --- the ModelOpt configuration -----------------------------------------------------------------
def _named(mtq, name: str) -> dict:
    try:
        return copy.deepcopy(getattr(mtq, name))
    except AttributeError:
        raise QuantizeError(f"this ModelOpt has no {name}; the recipe needs it") from None


def _entry(cfg: dict, quantizer: str) -> dict:
    """The '*weight_quantizer' / '*input_quantizer' entry of a named config."""
    for e in cfg["quant_cfg"]:
        if e.get("quantizer_name") == quantizer and "parent_class" not in e:
            return copy.deepcopy(e)
    raise QuantizeError(f"ModelOpt config has no {quantizer!r} entry")


def _pair(mtq, plan: ModelOptPlan) -> tuple[dict, dict, dict]:
    """(base config, weight entry, input entry) of a recipe's ModelOpt plan."""
    base = _named(mtq, plan.config)
    w = _entry(base, "*weight_quantizer")
    if plan.inputs == "activations_config":
        i = _entry(_named(mtq, plan.activations_config), "*input_quantizer")
    elif plan.inputs == "disabled":
        i = {"quantizer_name": "*input_quantizer", "enable": False}
    else:
        i = _entry(base, "*input_quantizer")
    return base, w, i


def _algorithm(base: dict, plan: ModelOptPlan):
    """The named config's algorithm (with its settings) when it is the one the table names; else the
    table's (ModelOpt 0.47's W4A8_MXFP4_FP8 preset names none, which would skip calibrating the
    static FP8 input scales)."""
    algo = base.get("algorithm")
    method = algo.get("method") if isinstance(algo, dict) else algo
    return algo if method == plan.algorithm else plan.algorithm


def _with_block(entry: dict, block_size: int, what: str) -> dict:
    cfg = entry.get("cfg")
    cfgs = cfg if isinstance(cfg, list) else [cfg]
    first = cfgs[0] if cfgs and isinstance(cfgs[0], dict) else None
    if first is None or not first.get("block_sizes") or -1 not in first["block_sizes"]:
        raise QuantizeError(f"{what}: block_size applies only to block-scaled or group-wise formats")
    first = {**first, "block_sizes": {**first["block_sizes"], -1: block_size}}
    out = dict(entry)
    out["cfg"] = [first, *cfgs[1:]] if isinstance(cfg, list) else first
    return out


def _scoped(entry: dict, pattern: str, quantizer: str) -> dict:
    out = {k: v for k, v in entry.items() if k != "quantizer_name"}
    out["quantizer_name"] = f"{pattern}.{quantizer}"
    return out


def build_quant_config(params: QuantizeParams, mtq=None) -> dict:
    """The spec's recipe as a ModelOpt quantize config: the recipe's named config (format table),
    its weight entry re-blocked when block_size is set (scoped to expert modules for recipes
    TensorRT-LLM runs in experts only), the KV-cache entries, then the spec's exclusions and
    overrides as entries scoped to the matching modules (ModelOpt applies entries in order, later
    ones win: overrides in spec order, so the last match wins as the spec says)."""
    if mtq is None:
        import modelopt.torch.quantization as mtq
    plan = params.plan
    if plan is None:  # only the KV cache is quantized
        cfg = {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"}
    else:
        base, w, i = _pair(mtq, plan)
        if params.block_size is not None:
            w = _with_block(w, params.block_size, f"{params.weights} weights")
        entries = []
        if plan.experts_only:
            entries = [{"quantizer_name": "*weight_quantizer", "enable": False},
                       {"quantizer_name": "*input_quantizer", "enable": False},
                       _scoped(w, EXPERTS, "weight_quantizer"), _scoped(i, EXPERTS, "input_quantizer")]
            entries += [e for e in base["quant_cfg"]
                        if e.get("quantizer_name") not in ("*weight_quantizer", "*input_quantizer")
                        or "parent_class" in e]
        else:
            for e in base["quant_cfg"]:
                if e.get("quantizer_name") == "*weight_quantizer" and "parent_class" not in e:
                    e = w
                elif e.get("quantizer_name") == "*input_quantizer" and "parent_class" not in e:
                    e = i
                entries.append(e)
        cfg = {"quant_cfg": entries, "algorithm": _algorithm(base, plan)}
    if params.kv is not None:
        if params.kv.config is not None:
            cfg["quant_cfg"] += _named(mtq, params.kv.config)["quant_cfg"]
        elif params.kv.entry is not None:
            cfg["quant_cfg"].append(copy.deepcopy(params.kv.entry))
    for pattern in params.exclude:
        cfg["quant_cfg"].append({"quantizer_name": f"{pattern}.*", "enable": False})
    for o in params.overrides:
        pattern, ow, ob = o.match, o.weights, o.block_size
        if ow in UNQUANTIZED:
            cfg["quant_cfg"] += [{"quantizer_name": f"{pattern}.weight_quantizer", "enable": False},
                                 {"quantizer_name": f"{pattern}.input_quantizer", "enable": False}]
            continue
        if o.plan is not None:
            _, w2, i2 = _pair(mtq, o.plan)
        elif plan is not None:
            w2, i2 = _pair(mtq, plan)[1:]
        else:
            raise QuantizeError(f"override {pattern!r}: block_size with unquantized weights")
        if ob is not None:
            w2 = _with_block(w2, ob, f"override {pattern!r}")
        cfg["quant_cfg"].append(_scoped(w2, pattern, "weight_quantizer"))
        if o.plan is not None:
            cfg["quant_cfg"].append(_scoped(i2, pattern, "input_quantizer"))
    return cfg


def normalize_export(out: Path, plan: ModelOptPlan | None, log=None) -> None:
    """Make the exported checkpoint name its recipe as TensorRT-LLM reads it: ModelOpt 0.47 writes
    some recipes under another quant_algo (MXFP4 as "mxfp4"; the format table's
    modelopt.exports_quant_algo), which TensorRT-LLM 1.2's QuantAlgo does not parse."""
    if plan is None or plan.quant_algo is None or plan.exports_quant_algo == plan.quant_algo:
        return
    for name, keys in (("hf_quant_config.json", ("quantization",)), ("config.json", ("quantization_config",))):
        path = out / name
        if not path.is_file():
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        section = doc
        for k in keys:
            section = section.get(k) if isinstance(section, dict) else None
        if isinstance(section, dict) and section.get("quant_algo") == plan.exports_quant_algo:
            section["quant_algo"] = plan.quant_algo
            path.write_text(json.dumps(doc, indent=4, sort_keys=True) + "\n", encoding="utf-8")
            if log:
                log.info("%s: quant_algo %s -> %s (what TensorRT-LLM reads)", name, plan.exports_quant_algo,
                         plan.quant_algo)


# --- running ------------------------------------------------------------------------------------
def read_eval(path: Path, metric: str, samples: int | None) -> list:
    from .calibration import CalibrationDataError, read_texts

    raw = path.read_text(encoding="utf-8")
    if metric == "perplexity":
        try:
            items: list = read_texts(raw)
        except CalibrationDataError as e:
            raise QuantizeError(f"eval data: {e}") from None
    else:
        items = []
        for i, ln in enumerate((ln for ln in raw.splitlines() if ln.strip()), start=1):
            try:
                obj = json.loads(ln)
            except ValueError as e:
                raise QuantizeError(f"eval data line {i}: not JSON: {e}") from None
            if not (isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and isinstance(obj.get("answer"), str)):
                raise QuantizeError(f"eval data line {i}: exact_match needs objects with string \"prompt\" and "
                                    "\"answer\" fields")
            items.append((obj["prompt"], obj["answer"]))
    items = items[:samples] if samples else items
    if not items:
        raise QuantizeError("the eval data holds no samples")
    return items


def evaluate(model, tokenizer, items: list, metric: str, max_tokens: int) -> float:
    """Perplexity (token-weighted over all texts, each cut to max_tokens) or exact match (the
    fraction of prompts whose greedy continuation, as many tokens long as the answer, equals the
    answer after stripping whitespace)."""
    import torch

    device = input_device(model)
    with torch.inference_mode():
        if metric == "perplexity":
            nll, count = 0.0, 0
            for text in items:
                ids = tokenizer(text, return_tensors="pt", add_special_tokens=False,
                                truncation=True, max_length=max_tokens).input_ids.to(device)
                if ids.shape[1] < 2:
                    continue
                logits = model(input_ids=ids).logits[0, :-1].float()
                nll += torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
                count += ids.shape[1] - 1
            if count == 0:
                raise QuantizeError("the eval texts are too short to measure perplexity (under 2 tokens each)")
            return math.exp(nll / count)
        hits = 0
        for prompt, answer in items:
            want = answer.strip()
            n_new = max(1, len(tokenizer(want, add_special_tokens=False).input_ids))
            ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
            out = greedy(model, ids, n_new)
            hits += tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip() == want
        return hits / len(items)


def greedy(model, ids, n_new: int):
    """Greedy decoding without a KV cache (short continuations; no generation config involved)."""
    import torch

    with torch.inference_mode():
        for _ in range(n_new):
            nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    return ids


def regression_pct(metric: str, base: float, quant: float) -> float:
    """How much worse the quantized figure is, in percent of the unquantized one (negative: better)."""
    if metric == "perplexity":
        return (quant - base) / base * 100.0
    if base == 0:
        return 0.0 if quant >= base else math.inf
    return (base - quant) / base * 100.0


def torch_dtype(dtype: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def load_kwargs(dtype: str, shares: dict[int | str, int] | None = None) -> dict[str, Any]:
    """from_pretrained's arguments: the dtype (the one-device load, then moved to its device); for a
    calibration sharded over GPUs, also device_map "auto" with each GPU's share as its max_memory,
    and "cpu"'s where the rest is offloaded (ModelOpt's PTQ example, examples/llm_ptq/example_utils.py
    get_model; compiler/actions/sizing.py)."""
    kwargs: dict[str, Any] = {"dtype": torch_dtype(dtype)}
    if shares is not None:
        kwargs.update(device_map="auto", max_memory=dict(shares))
    return kwargs


def load(model_dir: Path, dtype: str, device: str, shares: dict[int | str, int] | None = None):
    """The model and its tokenizer: on `device` whole, or over the devices of `shares` (gpu_shares).
    A load that places weights where the plan has none (on "disk": the GPUs had less free memory
    than their shares, other processes hold the rest) is refused with what it needed and found."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), **load_kwargs(dtype, shares))
    except ValueError as e:
        # transformers 5.14 integrations/accelerate.py offload_weight: weights mapped to "disk" that
        # must be re-saved (MoE experts, non-safetensors) want an offload_folder
        if shares is None or "offload_folder" not in str(e):
            raise
        raise QuantizeError(spilled(shares, None)) from None
    if shares is None:
        model = model.to(device)
    else:
        placed = {str(d) for d in model.hf_device_map.values()}
        if "disk" in placed or ("cpu" in placed and "cpu" not in shares):
            raise QuantizeError(spilled(shares, model.hf_device_map))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return model.eval(), tokenizer


def spilled(shares: dict[int | str, int], device_map: dict | None) -> str:
    """Why a sharded or offloading load failed: the memory each device was to hold, what the GPUs
    had free, and where the weights went."""
    import torch

    gib = 1 << 30
    need = ", ".join(f"{'GPU ' + str(k) if k != 'cpu' else 'host'} {v / gib:.1f} GiB" for k, v in shares.items())
    if torch.cuda.is_available():
        free = ", ".join(f"GPU {i} {torch.cuda.mem_get_info(i)[0] / gib:.1f} GiB"
                         for i in range(torch.cuda.device_count()))
    else:
        free = "no CUDA device"
    went = ""
    if device_map is not None:
        counts: dict[str, int] = {}
        for d in device_map.values():
            counts[str(d)] = counts.get(str(d), 0) + 1
        went = " (modules placed: " + ", ".join(f"{n} on {d}" for d, n in sorted(counts.items())) + ")"
    return (f"the calibration's load does not fit the memory Kiln planned: it needs {need} for the weights and found "
            f"{free} free; transformers would put the rest on disk{went}. Other processes hold GPU memory "
            "(nvidia-smi --query-compute-apps=pid,used_memory lists them): free it, or build on another builder")


def input_device(model):
    """Where the batches go: the device of the model's first parameter, or the CPU where it is an
    offloaded one (on the meta device until accelerate's hook moves it to its GPU, inputs too)."""
    import torch

    d = next(model.parameters()).device
    return torch.device("cpu") if d.type == "meta" else d


def free_host_memory() -> int:
    """The host memory a load can take now: what accelerate counts for "cpu" (psutil's available)."""
    import psutil

    return int(psutil.virtual_memory().available)


def weight_bytes_of(model_dir: Path, dtype: str) -> tuple[int, int]:
    """The model's parameters and buffers at `dtype` and its largest block a sharded load places
    whole (a module of its `_no_split_modules`, or a leaf such as the embedding table), in bytes;
    counted on the meta device: nothing is read or allocated."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(model_dir)), dtype=torch_dtype(dtype))

    def size(m) -> int:
        return sum(t.numel() * t.element_size() for t in (*m.parameters(), *m.buffers()))

    whole = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in whole or not any(True for _ in m.children())]
    return size(model), max((size(m) for m in blocks), default=0)


def gpu_shares(model_dir: Path, params: QuantizeParams, memories: list[int], host: int | None = None,
               log=None, allow_offload: bool = True) -> dict[int | str, int] | None:
    """How the calibration uses the GPUs it is given (`memories`: each one's bytes) and `host` bytes
    of free host memory: None for the one-device load (one GPU holds the model, its batch and the
    context, or no GPU is given), else each GPU's share of the weights for a sharded load, and "cpu"
    with the host's share where the GPUs cannot hold them all (accelerate's offload), which only a
    way that offloads allows (`allow_offload`: the host memory was reserved for it). The same formulas as
    the plan's (compiler/actions/sizing.py calibration_gpus, offload_need), on the weights counted
    from the model itself."""
    from transformers import AutoConfig

    from .sizing import activation_bytes, calibration_gpus, host_share, offload_need, shard_share

    if not memories:
        return None
    cfg = AutoConfig.from_pretrained(str(model_dir))
    c = params.calibration
    batch, seq = (c.batch_size, c.max_seq_len) if c is not None else (1, 512)
    act = activation_bytes(cfg.hidden_size, cfg.vocab_size, batch, seq)
    weights, layer = weight_bytes_of(model_dir, params.dtype)
    smallest = min(memories)
    need = calibration_gpus(weights, act, smallest, layer)
    if need == 1:
        return None
    gib = 1 << 30
    shares: dict[int | str, int] = {i: int(shard_share(act, m)) for i, m in enumerate(memories)}
    offload = offload_need(weights, act, smallest, layer, len(memories)) if need is None or need > len(memories) \
        else None
    what = f"calibrating {params.model} ({weights / gib:.1f} GiB at {params.dtype})"
    if need is None or offload is None and need > len(memories):
        raise QuantizeError(f"{what} needs larger GPUs than {smallest / gib:.1f} GiB (one holds no weights beside the "
                            "batch and its largest layer); `kiln plan` shows what it needs")
    if offload is not None and not allow_offload:
        raise QuantizeError(f"{what} was placed on {len(memories)} GPU(s) of {smallest / gib:.1f} GiB without "
                            f"offloading to host memory, and counted here it needs {need} of them (or "
                            f"{offload[0] / gib:.1f} GiB offloaded, for which no host memory was reserved); "
                            "`kiln plan --builders` shows the ways it runs in")
    if offload is not None:
        spill, host_need = offload
        if host is None or host < host_need:
            found = f"{host / gib:.1f} GiB free" if host is not None else "none counted"
            raise QuantizeError(f"{what} needs {need} GPUs of {smallest / gib:.1f} GiB, this builder has "
                                f"{len(memories)}; offloading the {spill / gib:.1f} GiB they cannot hold needs "
                                f"{host_need / gib:.1f} GiB of free host memory, it has {found}; `kiln plan` shows "
                                "what it needs")
        shares["cpu"] = host_share(host)
    if log:
        log.info("sharding %.1f GiB of weights over %d GPUs (%s GiB each at most)%s", weights / gib, len(memories),
                 ", ".join(f"{v / gib:.1f}" for k, v in shares.items() if k != "cpu"),
                 f", offloading {offload[0] / gib:.1f} GiB to host memory" if offload else "")
    return shares


def calibration_batches(tokenizer, texts: list[str], max_seq_len: int, batch_size: int) -> list[dict]:
    """Each text tokenized and cut to max_seq_len; batches of batch_size, right-padded."""
    import torch

    seqs = [tokenizer(t, add_special_tokens=False, truncation=True, max_length=max_seq_len).input_ids for t in texts]
    seqs = [s for s in seqs if s]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    batches = []
    for i in range(0, len(seqs), batch_size):
        group = seqs[i:i + batch_size]
        width = max(len(s) for s in group)
        ids = torch.full((len(group), width), pad, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for r, s in enumerate(group):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


def quantize_in_memory(model, tokenizer, params: QuantizeParams, calibration_texts: list[str] | None, log=None):
    """Calibrate and fake-quantize `model` in place, then apply ModelOpt's export preprocessing
    (shared scales of fused layers, AWQ scales folded into norms): afterwards the model computes
    what the exported checkpoint encodes."""
    import modelopt.torch.quantization as mtq
    import torch

    cfg = build_quant_config(params, mtq)
    forward_loop = None
    if calibration_texts:
        c = params.calibration
        batches = calibration_batches(tokenizer, calibration_texts, c.max_seq_len, c.batch_size)
        device = input_device(model)

        def forward_loop(m) -> None:
            with torch.no_grad():
                for b in batches:
                    m(**{k: v.to(device) for k, v in b.items()})

        if log:
            log.info("calibrating on %d samples (%d batches, <= %d tokens each)", len(calibration_texts),
                     len(batches), params.calibration.max_seq_len)
    model = mtq.quantize(model, cfg, forward_loop)
    try:
        from modelopt.torch.export.unified_export_hf import requantize_resmooth_fused_llm_layers
    except ImportError:  # the export applies it anyway; the figures are then those before it
        if log:
            log.info("ModelOpt has no requantize_resmooth_fused_llm_layers: evaluating before export preprocessing")
    else:
        with torch.no_grad():
            requantize_resmooth_fused_llm_layers(model)
    return model


def public_version(version: str) -> str:
    """A version without its local label: torch 2.13.0+cpu and 2.13.0+cu128 are both 2.13.0 (the
    same release, built for another device; the key does not name the device either)."""
    return version.split("+", 1)[0]


def check_params(params: QuantizeParams) -> None:
    """What the parameters alone make impossible: no toolchain versions for the ModelOpt pin, no
    config schema for the TensorRT-LLM pin."""
    if params.modelopt is None:
        raise QuantizeError("toolchain.modelopt is not pinned; quantized checkpoints need it")
    if params.torch is None or params.transformers is None:
        raise QuantizeError(f"Kiln has no builder toolchain (torch, transformers) for ModelOpt {params.modelopt} "
                            "(compiler/catalog/data/checkpoint_config.json, `builders`); pin a ModelOpt version from "
                            "that table")
    try:
        require_plan(params.checkpoint_config)
    except CheckpointConfigError as e:
        raise QuantizeError(str(e)) from None


def check_builder(params: QuantizeParams) -> None:
    """The builder runs exactly the toolchain the key names: a checkpoint is only cached under the
    versions that made it. Compared with the installed packages, never written into the key."""
    import modelopt
    import torch
    import transformers

    check_params(params)
    wrong = []
    for what, pinned, have, package in (("ModelOpt", params.modelopt, modelopt.__version__, "nvidia-modelopt"),
                                        ("torch", params.torch, public_version(torch.__version__), "torch"),
                                        ("transformers", params.transformers, transformers.__version__,
                                         "transformers")):
        if have != pinned:
            wrong.append((what, pinned, have, package))
    if wrong:
        got = ", ".join(f"{what} {have} (the key says {pinned})" for what, pinned, have, _ in wrong)
        fix = " ".join(f"{package}=={pinned}" for _, pinned, _, package in wrong)
        raise QuantizeError(f"this builder has {got}; the toolchain for ModelOpt {params.modelopt} is torch "
                            f"{params.torch}, transformers {params.transformers} (toolchain.modelopt and "
                            f"compiler/catalog/data/checkpoint_config.json): pip install {fix} (a checkpoint is only "
                            "cached under the versions that made it)")


def placed_devices(params: QuantizeParams, way) -> tuple[str, list[int]]:
    """Where the calibration runs: ("cpu", []) or ("cuda", the memory of each GPU it may use), as
    `way` says, the way its placement chose (compiler/graph/sizes.py holds, RunContext.way): a CPU
    way runs on the CPU even where CUDA is visible (the plan placed it there: the probe counts no MIG
    slice as a GPU), a way of N GPUs on the first N, refused where this process sees fewer. Without
    a way (a run placed nowhere), every visible GPU, else the CPU."""
    import torch

    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    count = seen if way is None else way.gpus
    if count > seen:
        raise QuantizeError(f"quantize/{params.model} was placed to run {way.short()} ({way.text()}), and this "
                            f"builder's process sees {seen or 'no'} CUDA device{'s' * (seen != 1)}: build it where "
                            "the way's GPUs are (`kiln plan --builders` says where each action goes), or declare "
                            "the builder class as the machine is")
    if not count:
        return "cpu", []
    return "cuda", [torch.cuda.get_device_properties(i).total_memory for i in range(count)]


def run(params: QuantizeParams, ctx: RunContext) -> None:
    ctx.phase("loading")  # torch and ModelOpt, then the model: the first seconds to minutes
    try:
        import torch
    except ImportError:
        raise QuantizeError("quantization needs torch, transformers and nvidia-modelopt on the builder: "
                            "pip install torch, then pip install '.[quantize]'") from None
    gpu_parts = needs_gpu(params)
    device, memories = placed_devices(params, ctx.way)
    if gpu_parts and device == "cpu":
        where = ("this machine has no CUDA device" if ctx.way is None else
                 f"it was placed to run {ctx.way.short()}")
        raise QuantizeError(f"quantizing {', '.join(gpu_parts)} needs a GPU builder: ModelOpt fake-quantizes these only "
                            f"on CUDA (calibration and the quality gate run forward passes through them), and {where}")
    check_builder(params)
    ctx.log.info("%s: calibrating on %s", f"placed to run {ctx.way.short()}" if ctx.way is not None else
                 "placed nowhere (what this process sees)", f"{len(memories)} GPU(s)" if memories else "the CPU")
    with _LOCK, tempfile.TemporaryDirectory(prefix="kiln-quantize-") as scratch:
        prev_threads, prev_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
        torch.set_num_threads(CPU_THREADS)
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            with _into_log(ctx.log):
                _run(params, ctx, Path(scratch), device, memories)
        finally:
            torch.set_num_threads(prev_threads)
            torch.use_deterministic_algorithms(prev_det)


class _LogWriter(io.TextIOBase):
    def __init__(self, log) -> None:
        self.log = log

    def write(self, text: str) -> int:
        if text.strip():
            self.log.info("%s", text.rstrip())
        return len(text)


@contextlib.contextmanager
def _into_log(log):
    """ModelOpt and transformers print, warn and draw progress bars; that belongs in the action's
    log, not on the user's terminal. Only stdout is redirected: the build's progress goes to stderr."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(_LogWriter(log)):
            warnings.simplefilter("always")
            yield
    finally:
        for w in caught:
            log.info("warning: %s: %s", w.category.__name__, w.message)
        hf_logging.set_verbosity(level)
        if was:
            hf_logging.enable_progress_bar()


def _run(params: QuantizeParams, ctx: RunContext, scratch: Path, device: str, memories: list[int]) -> None:
    import time

    import torch
    from modelopt.torch.export import export_hf_checkpoint

    torch.manual_seed(0)
    if params.source.path:
        model_dir = local_source(ctx, scratch)
    else:
        model_dir = fetch_huggingface(params.source, ctx.log)
    shares = gpu_shares(model_dir, params, memories, free_host_memory() if memories else None, ctx.log,
                        allow_offload=ctx.way is None or ctx.way.offload_gib > 0)
    model, tokenizer = load(model_dir, params.dtype, device, shares)
    ctx.log.info("loaded on %s", device if shares is None else
                 ", ".join(sorted({str(d) for d in model.hf_device_map.values()})))

    texts = None
    if params.calibration is not None:
        from .calibration import read_texts

        dep = ctx.deps[f"calibration-set/{params.model}"]
        texts = read_texts((dep / "calibration.jsonl").read_text(encoding="utf-8"))

    quality = None
    if params.quality is not None:
        g = params.quality
        items = read_eval(ctx.files["eval"], g.metric, g.samples)
        max_tokens = min(g.max_tokens, getattr(model.config, "max_position_embeddings", None) or g.max_tokens)
        start = time.monotonic()
        ctx.phase("evaluating the unquantized model")
        base = evaluate(model, tokenizer, items, g.metric, max_tokens)
        ctx.log.info("unquantized %s: %.6g on %d eval samples (%.1fs)", g.metric, base, len(items),
                     time.monotonic() - start)

    ctx.phase("calibrating" if params.calibration is not None else "quantizing")
    start = time.monotonic()
    model = quantize_in_memory(model, tokenizer, params, texts, ctx.log)
    ctx.log.info("quantized in %.1fs on %s", time.monotonic() - start, device)

    if params.quality is not None:
        ctx.phase("evaluating the quantized model")
        quant = evaluate(model, tokenizer, items, g.metric, max_tokens)
        quality = {"metric": g.metric, "samples": len(items), "max_tokens": max_tokens,
                   "unquantized": _round(base), "quantized": _round(quant),
                   "regression_pct": _round(regression_pct(g.metric, base, quant)),
                   "recipe": {k: getattr(params, k) for k in ("weights", "activations", "kv_cache", "block_size")},
                   "device": device}
        ctx.log.info("quantized %s: %.6g (regression %.3f%%)", g.metric, quant, quality["regression_pct"])

    ctx.phase("exporting")
    export_hf_checkpoint(model, dtype=next(p.dtype for p in model.parameters() if p.is_floating_point()),
                         export_dir=ctx.out)
    normalize_export(ctx.out, params.plan, ctx.log)
    try:
        write_runtime_config(ctx.out / CONFIG_JSON, model_dir / CONFIG_JSON, require_plan(params.checkpoint_config),
                             ctx.log)
    except CheckpointConfigError as e:
        raise QuantizeError(str(e)) from None
    for name in TOKENIZER_FILES:
        if (model_dir / name).is_file() and not (ctx.out / name).exists():
            shutil.copyfile(model_dir / name, ctx.out / name)
    if quality is not None:
        (ctx.out / "quality.json").write_bytes(pretty_json(quality))
    ctx.log.info("exported %s", ", ".join(sorted(p.name for p in ctx.out.iterdir())))


def _round(x: float) -> float | None:
    """Figures with 6 significant digits: the same model gives the same text on every run."""
    if math.isinf(x) or math.isnan(x):
        return None
    return float(f"{x:.6g}")


class Quantize(ActionKind[QuantizeParams]):
    kind, version, Params = "quantize", 3, QuantizeParams
    # Minutes in torch: a process of its own, which an interrupted build kills; one at a time (the
    # device's memory, and ModelOpt's process-wide settings when run in-process).
    isolated = exclusive = True
    preload = ("torch", "transformers", "modelopt.torch.quantization", "modelopt.torch.export")  # 10 s of CPU

    def lower(self, ctx: LowerContext) -> list[Action]:
        if ctx.ir.target != "llmapi":
            return []  # the engine target quantizes inside its engine recipe (engine.py)
        return [lower_model(ctx, name) for name, rm in sorted(ctx.ir.models.items()) if rm.formats.quantized]

    def size(self, action: Action, ir):
        from .sizing import quantize_size

        p = action.params
        return quantize_size(ir.models[p.model], bool(needs_gpu(p)), p.calibration)

    def missing(self, params: QuantizeParams, needs, builder) -> list[str]:
        """torch (ModelOpt), a GPU for the formats ModelOpt only fake-quantizes on CUDA, and the
        network for a Hugging Face source without a local copy."""
        out = [] if builder.has("torch") else ["torch"]
        if needs_gpu(params) and not builder.has("gpu"):
            out.append("gpu")
        return out + source_needs(params.source, builder)

    def preflight(self, params: QuantizeParams) -> None:
        """The toolchain and config schema are known for the pins, and the ModelOpt configuration
        builds from the pinned ModelOpt's named configs."""
        check_params(params)
        build_quant_config(params)

    def run(self, params: QuantizeParams, ctx: RunContext) -> None:
        run(params, ctx)


QUANTIZE = KIND = Quantize()
