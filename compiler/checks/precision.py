"""K3xx: precision x architecture: weight, activation and KV-cache formats against the GPUs that serve them.

The support facts are TensorRT-LLM's (trtllm-triton-facts.md s3): the PyTorch-backend hardware
matrix for the llmapi target, the engine-era matrix where the legacy engine target differs, and
the compute capability of each GPU from the catalog. ModelOpt decides which formats calibrate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Iterable

from compiler.catalog.types import WEAK_STATUSES, GpuSpec
from compiler.diagnostics import Diagnostic, Severity
from compiler.spec.models import UNQUANTIZED, Model, Quantization

from .base import Check, CheckContext, weak_fact_note

SIXTEEN_BIT = UNQUANTIZED  # bf16 / fp16

#: Activation format used when `activations` is not given (None: the model dtype).
DEFAULT_ACTIVATIONS: dict[str, str | None] = {
    "bf16": None, "fp16": None,
    "fp8": "fp8", "fp8_block": "fp8", "fp8_rowwise": "fp8",
    "mxfp8": "mxfp8",
    "nvfp4": "nvfp4",
    "mxfp4": "bf16",  # W4A16_MXFP4
    "int8": "int8",  # SmoothQuant
    "int4_awq": None, "int4_gptq": None,  # W4A16 at the model dtype
}

#: Activation formats each weight format can be paired with (K306); None = the 16-bit model dtype.
VALID_ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "fp8": ("fp8",), "fp8_block": ("fp8",), "fp8_rowwise": ("fp8",),
    "mxfp8": ("mxfp8",),
    "nvfp4": ("nvfp4", "fp8"),
    "mxfp4": ("bf16", "fp8", "mxfp8"),
    "int8": ("int8", "bf16", "fp16"),
    "int4_awq": ("bf16", "fp16", "fp8"),
    "int4_gptq": ("bf16", "fp16"),
}

#: TensorRT-LLM names of the valid pairs, for messages.
PAIR_NAMES: dict[tuple[str, str], str] = {
    ("fp8", "fp8"): "FP8", ("fp8_block", "fp8"): "FP8_BLOCK_SCALES",
    ("fp8_rowwise", "fp8"): "FP8_PER_CHANNEL_PER_TOKEN", ("mxfp8", "mxfp8"): "MXFP8",
    ("nvfp4", "nvfp4"): "NVFP4", ("nvfp4", "fp8"): "W4A8_NVFP4_FP8",
    ("mxfp4", "bf16"): "W4A16_MXFP4", ("mxfp4", "fp8"): "W4A8_MXFP4_FP8", ("mxfp4", "mxfp8"): "W4A8_MXFP4_MXFP8",
    ("int8", "int8"): "W8A8 SmoothQuant", ("int8", "bf16"): "W8A16 (weight-only)",
    ("int8", "fp16"): "W8A16 (weight-only)", ("int4_awq", "bf16"): "W4A16_AWQ", ("int4_awq", "fp16"): "W4A16_AWQ",
    ("int4_awq", "fp8"): "W4A8_AWQ", ("int4_gptq", "bf16"): "W4A16_GPTQ", ("int4_gptq", "fp16"): "W4A16_GPTQ",
}

BLACKWELL_FP4_HELP = "serve it on Blackwell (B200, GB200, B300, GB300, RTX PRO 6000)"


def effective_activations(m: Model) -> str:
    """The activation format the model runs with: explicit, else the weights' default, else its dtype."""
    q = m.quantization
    if q.activations is not None:
        return q.activations
    return DEFAULT_ACTIVATIONS.get(q.weights) or m.dtype


def quant_path(name: str, *rest) -> tuple:
    return ("models", name, "quantization") + rest


def _hosts_text(hosts: list[str]) -> str:
    quoted = ", ".join(repr(h) for h in hosts)
    return f"host{'s' * (len(hosts) > 1)} {quoted}"


@dataclass
class Pair:
    """A model and one GPU model that serves it (on one or more hosts)."""

    name: str
    model: Model
    gpu: GpuSpec
    hosts: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.gpu.name} (SM{self.gpu.sm_version}) on {_hosts_text(self.hosts)}"

    def notes(self) -> tuple[str, ...]:
        status = self.gpu.status_of("compute_capability")
        if status in WEAK_STATUSES:
            return (weak_fact_note(f"the compute capability of {self.gpu.name}", status),)
        return ()


def served_pairs(ctx: CheckContext) -> list[Pair]:
    """Each (model, GPU model) pair where some host serves the model, in spec order."""
    pairs: dict[tuple[str, str], Pair] = {}
    for unit in ctx.ir.units:
        model = ctx.spec.models.get(unit.model)
        host = ctx.ir.hosts.get(unit.host)
        if model is None or host is None or host.gpu is None:
            continue
        pair = pairs.setdefault((unit.model, host.gpu.name), Pair(unit.model, model, host.gpu))
        if unit.host not in pair.hosts:
            pair.hosts.append(unit.host)
    return list(pairs.values())


def _weight_formats(name: str, q: Quantization) -> list[tuple[tuple, str, str]]:
    """(spec path, what, format) for the main weight format and every override that sets one."""
    out = [(quant_path(name, "weights"), "weights", q.weights)]
    for i, o in enumerate(q.overrides):
        if o.weights is not None:
            out.append((quant_path(name, "overrides", i, "weights"), f"weights of modules matching {o.match!r}",
                        o.weights))
    return out


# --- hardware support predicates (SM version -> supported?) ----------------------------------

def _fp8_ok(sm: int) -> bool:
    return sm >= 89


def _fp4_ok(sm: int) -> bool:
    return sm >= 100


def _mxfp8_ok(sm: int) -> bool:
    return sm in (100, 103)


def _fp8_block_ok(sm: int) -> bool:
    return sm in (90, 100, 103)


def _fp8_rowwise_ok(sm: int) -> bool:
    return sm == 90


def weights_supported(fmt: str, sm: int) -> bool:
    """Whether a weight format has kernels on this SM at all (target-specific gaps are K304)."""
    return {
        "fp8": _fp8_ok, "fp8_block": _fp8_block_ok, "fp8_rowwise": _fp8_rowwise_ok, "mxfp8": _mxfp8_ok,
        "nvfp4": _fp4_ok, "mxfp4": _fp4_ok,
    }.get(fmt, lambda _sm: True)(sm)


class Fp8NeedsAda(Check):
    """FP8 weights, activations or KV cache on a GPU older than Ada/Hopper (SM < 89).

    FP8 (E4M3) tensor-core math exists from compute capability 8.9 on (Ada Lovelace, Hopper,
    Blackwell). The A100 (SM80) has no FP8 at all: an FP8 checkpoint, W4A8 (int4 weights with FP8
    activations) or an FP8 KV cache cannot run there.

    Exception: the TensorRT-LLM PyTorch backend (the llmapi target) lists an FP8 KV cache as
    supported on Ampere, so an FP8 KV cache on SM80 is only refused for the engine target.
    FP8 block and rowwise scaling have narrower support of their own (K303).
    """

    code = "K301"
    name = "fp8-needs-sm89"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for p in served_pairs(ctx):
            sm = p.gpu.sm_version
            if _fp8_ok(sm):
                continue
            q = p.model.quantization
            help = "serve it on Ada, Hopper or Blackwell (SM89+), or use bf16, int8 or int4_awq (W4A16) on this GPU"
            for path, what, fmt in _weight_formats(p.name, q):
                if fmt == "fp8":
                    yield ctx.diag(self, path, f"model {p.name!r} uses fp8 {what}, but {p.where} has no FP8 "
                                               "tensor cores (FP8 needs SM 89 or newer)", help=help, notes=p.notes())
            # Other weight formats with fp8 activations are refused for their weights (K302/K303) or
            # as a combination (K306); W4A8 AWQ is the one whose weights alone would run here.
            if q.activations == "fp8" and q.weights == "int4_awq":
                yield ctx.diag(self, quant_path(p.name, "activations"),
                               f"model {p.name!r} uses fp8 activations (W4A8 AWQ), but {p.where} has no FP8 tensor "
                               "cores (INT4 with FP8 activations needs SM 89 or newer)",
                               help="use bf16/fp16 activations (W4A16) on this GPU, or serve it on SM89+",
                               notes=p.notes())
            if q.kv_cache == "fp8" and ctx.spec.target == "engine":
                yield ctx.diag(self, quant_path(p.name, "kv_cache"),
                               f"model {p.name!r} uses an fp8 KV cache on the engine target, but {p.where} has no "
                               "FP8 support in the engine-era support matrix (FP8 needs SM 89 or newer)",
                               help="use kv_cache: int8 or auto on this GPU, or the llmapi target (its PyTorch "
                                    "backend supports an FP8 KV cache on Ampere)", notes=p.notes())


class Fp4NeedsBlackwell(Check):
    """NVFP4/MXFP4 or MXFP8 formats on a GPU without the hardware for them.

    NVFP4 and MXFP4 (4-bit E2M1 with block scales) weights, NVFP4 activations and an NVFP4 KV cache
    need Blackwell tensor cores: SM100 (B200, GB200), SM103 (B300, GB300) or SM120 (RTX PRO 6000
    Blackwell). Hopper and older have no FP4.

    MXFP8 (E4M3 with an E8M0 scale per 32 values) is supported on SM100/SM103 only; the Transformer
    Engine matrix lists it as "no" on SM120.
    """

    code = "K302"
    name = "fp4-needs-blackwell"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for p in served_pairs(ctx):
            sm = p.gpu.sm_version
            q = p.model.quantization
            weights_ok = weights_supported(q.weights, sm)
            for path, what, fmt in _weight_formats(p.name, q):
                if fmt in ("nvfp4", "mxfp4") and not _fp4_ok(sm):
                    yield ctx.diag(self, path, f"model {p.name!r} uses {fmt} {what}, but {p.where} has no FP4 "
                                               "tensor cores (FP4 needs Blackwell: SM100, SM103 or SM120)",
                                   help=BLACKWELL_FP4_HELP + ", or use fp8 (SM89+) or int4_awq on this GPU",
                                   notes=p.notes())
                elif fmt == "mxfp8" and not _mxfp8_ok(sm):
                    yield ctx.diag(self, path, f"model {p.name!r} uses mxfp8 {what}, but {p.where} does not "
                                               "support MXFP8 (SM100 and SM103 only)",
                                   help="serve it on B200, GB200, B300 or GB300, or use fp8"
                                        + (" or fp8_block" if _fp8_block_ok(sm) else ""), notes=p.notes())
            # Explicit activations are checked only in a valid pair (else K306) whose weights run here
            # (else the weights are reported): in practice W4A8_MXFP4_MXFP8 on SM120.
            acts = q.activations
            if not weights_ok or acts not in VALID_ACTIVATIONS.get(q.weights, ()):
                pass
            elif acts == "nvfp4" and not _fp4_ok(sm):
                yield ctx.diag(self, quant_path(p.name, "activations"),
                               f"model {p.name!r} uses nvfp4 activations, but {p.where} has no FP4 tensor cores "
                               "(FP4 needs Blackwell: SM100, SM103 or SM120)", help=BLACKWELL_FP4_HELP,
                               notes=p.notes())
            elif acts == "mxfp8" and not _mxfp8_ok(sm):
                yield ctx.diag(self, quant_path(p.name, "activations"),
                               f"model {p.name!r} uses mxfp8 activations, but {p.where} does not support MXFP8 "
                               "(SM100 and SM103 only)",
                               help="use fp8 activations (W4A8_MXFP4_FP8) or bf16 on this GPU", notes=p.notes())
            if q.kv_cache == "nvfp4" and not _fp4_ok(sm):
                yield ctx.diag(self, quant_path(p.name, "kv_cache"),
                               f"model {p.name!r} uses an nvfp4 KV cache, but {p.where} has no FP4 support "
                               "(FP4 needs Blackwell: SM100, SM103 or SM120)",
                               help="use kv_cache: fp8 on SM89+ GPUs, or serve it on Blackwell", notes=p.notes())


class Fp8ScalingUnsupported(Check):
    """FP8 block scaling or FP8 rowwise scaling on a GPU whose kernels do not implement it.

    In TensorRT-LLM's PyTorch-backend hardware matrix, FP8 block scales (FP8_BLOCK_SCALES,
    DeepSeek-style 128x128 weight tiles) run on Hopper (SM90) and Blackwell SM100/SM103 only: not on
    Ada (SM89) and not on SM120. FP8 rowwise (per-channel weights, per-token activations) runs on
    Hopper only; on SM100 the rowwise GEMM plugin raises NotImplementedError.
    """

    code = "K303"
    name = "fp8-scaling-unsupported"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for p in served_pairs(ctx):
            sm = p.gpu.sm_version
            for path, what, fmt in _weight_formats(p.name, p.model.quantization):
                if fmt == "fp8_block" and not _fp8_block_ok(sm):
                    yield ctx.diag(self, path, f"model {p.name!r} uses fp8_block {what}, but {p.where} has no FP8 "
                                               "block-scaling kernels (SM90, SM100 and SM103 only)",
                                   help="use weights: fp8 (per-tensor)" + (" on this GPU" if _fp8_ok(sm) else
                                                                            ", or serve it on Hopper or Blackwell"),
                                   notes=p.notes())
                elif fmt == "fp8_rowwise" and not _fp8_rowwise_ok(sm):
                    yield ctx.diag(self, path, f"model {p.name!r} uses fp8_rowwise {what}, but {p.where} has no FP8 "
                                               "rowwise kernels (Hopper SM90 only)",
                                   help="use weights: fp8 or fp8_block" if _fp8_block_ok(sm) else
                                   ("use weights: fp8 (per-tensor)" if _fp8_ok(sm) else
                                    "serve it on Hopper, or use bf16/int8/int4_awq on this GPU"),
                                   notes=p.notes())


class Int4UnsupportedOnPytorch(Check):
    """An INT4 AWQ/GPTQ recipe that the PyTorch backend (llmapi target) does not support on this GPU.

    TensorRT-LLM's PyTorch-backend hardware matrix has no W4A16 AWQ or W4A16 GPTQ kernels on
    Blackwell (SM100/SM120), and W4A8 AWQ (int4 weights, FP8 activations) only on Ada and Hopper
    (SM89/SM90). The legacy engine target lists INT4 on Blackwell, so this is an llmapi-only rule.
    On Blackwell, NVFP4 is the 4-bit format with native support.
    """

    code = "K304"
    name = "int4-unsupported-on-pytorch"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.spec.target != "llmapi":
            return
        for p in served_pairs(ctx):
            sm = p.gpu.sm_version
            if sm < 100:
                continue
            acts = effective_activations(p.model)
            q = p.model.quantization
            help = "use weights: nvfp4 (native 4-bit on Blackwell) or fp8, or the engine target (TensorRT-LLM <= 1.2.x)"
            for path, what, fmt in _weight_formats(p.name, q):
                if fmt not in ("int4_awq", "int4_gptq"):
                    continue
                if fmt == "int4_awq" and path == quant_path(p.name, "weights") and acts == "fp8":
                    yield ctx.diag(self, quant_path(p.name, "activations"),
                                   f"model {p.name!r} uses W4A8 AWQ (int4_awq weights, fp8 activations), which the "
                                   f"PyTorch backend supports only on SM89/SM90, not on {p.where}", help=help,
                                   notes=p.notes())
                else:
                    recipe = "W4A16 AWQ" if fmt == "int4_awq" else "W4A16 GPTQ"
                    yield ctx.diag(self, path, f"model {p.name!r} uses {fmt} {what} ({recipe}), which the PyTorch "
                                               f"backend (llmapi target) does not support on Blackwell: {p.where}",
                                   help=help, notes=p.notes())


class NvFp4KvCacheNeedsGate(Check):
    """An NVFP4 KV cache without a quality gate.

    Attention is sensitive to outliers in keys and values; 4-bit E2M1 values with a scale per 16
    keep far less dynamic range than FP8, and the loss depends on the model and the data. Kiln
    only accepts an NVFP4 KV cache together with a `quality_gate` that measures the regression.
    """

    code = "K305"
    name = "nvfp4-kv-cache-needs-gate"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.spec.models.items():
            q = m.quantization
            if q.kv_cache == "nvfp4" and q.quality_gate is None:
                yield ctx.diag(self, quant_path(name, "kv_cache"),
                               f"model {name!r} uses an nvfp4 KV cache without a quality gate: FP4 loses much of "
                               "the dynamic range attention needs, and the accuracy loss is model-specific",
                               help="add `quality_gate: {eval: <file>, max_regression_pct: <pct>}`, or use "
                                    "kv_cache: fp8")


class InvalidFormatCombination(Check):
    """A weight format combined with an activation format that no quantization recipe implements.

    Valid pairs (TensorRT-LLM QuantAlgo in parentheses):

    - bf16 / fp16 weights: activations unset or the same 16-bit format (no quantization)
    - fp8, fp8_block, fp8_rowwise: fp8 (FP8, FP8_BLOCK_SCALES, FP8_PER_CHANNEL_PER_TOKEN)
    - mxfp8: mxfp8
    - nvfp4: nvfp4 (NVFP4, the default) or fp8 (W4A8_NVFP4_FP8)
    - mxfp4: bf16 (W4A16_MXFP4, the default), fp8 (W4A8_MXFP4_FP8) or mxfp8 (W4A8_MXFP4_MXFP8)
    - int8: int8 (W8A8 SmoothQuant, the default) or bf16/fp16 (W8A16 weight-only)
    - int4_awq: bf16/fp16 (W4A16_AWQ, the default) or fp8 (W4A8_AWQ)
    - int4_gptq: bf16/fp16 (W4A16_GPTQ)
    """

    code = "K306"
    name = "invalid-format-combination"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.spec.models.items():
            q = m.quantization
            a = q.activations
            if a is None:
                continue
            path = quant_path(name, "activations")
            if q.weights in SIXTEEN_BIT:
                if a != q.weights:
                    yield ctx.diag(self, path, f"model {name!r} has unquantized {q.weights} weights but {a} "
                                               "activations: activation quantization needs quantized weights",
                                   help=f"remove `activations`, or quantize the weights (e.g. weights: {a})"
                                   if a in ("fp8", "mxfp8", "nvfp4", "int8") else "remove `activations`")
                continue
            valid = VALID_ACTIVATIONS[q.weights]
            if a not in valid:
                shown = ", ".join(f"{v} ({PAIR_NAMES[(q.weights, v)]})" for v in valid)
                yield ctx.diag(self, path, f"model {name!r} pairs {q.weights} weights with {a} activations, a "
                                           "combination no quantization recipe implements",
                               help=f"{q.weights} weights take activations: {shown}")


def calibration_reasons(name: str, m: Model) -> list[tuple[tuple, str]]:
    """(spec path, reason) for each part of the recipe that needs activation statistics."""
    q = m.quantization
    acts = effective_activations(m)
    out: list[tuple[tuple, str]] = []
    reason = _weights_calibrate(q.weights, acts)
    if reason:
        path = quant_path(name, "activations") if q.activations is not None and q.weights not in (
            "fp8", "nvfp4", "int4_awq", "int4_gptq") else quant_path(name, "weights")
        out.append((path, reason))
    if q.kv_cache in ("fp8", "int8", "nvfp4"):
        out.append((quant_path(name, "kv_cache"),
                    f"an {q.kv_cache} KV cache needs per-tensor key/value scales measured on calibration data"))
    for i, o in enumerate(q.overrides):
        if o.weights is not None and o.weights != q.weights:
            r = _weights_calibrate(o.weights, DEFAULT_ACTIVATIONS.get(o.weights) or m.dtype)
            if r:
                out.append((quant_path(name, "overrides", i, "weights"), f"override {o.match!r}: {r}"))
    return out


def _weights_calibrate(w: str, acts: str) -> str | None:
    if w == "fp8" or (w in ("nvfp4", "mxfp4") and acts == "fp8"):
        return f"{w} weights with fp8 activations use static per-tensor activation scales (ModelOpt max calibration)"
    if w == "nvfp4":
        return "nvfp4 calibrates the per-tensor global scale of its activations (ModelOpt max calibration)"
    if w == "int8" and acts == "int8":
        return "int8 SmoothQuant derives its smoothing factors from activation statistics"
    if w == "int4_awq":
        return "AWQ searches per-channel scales on calibration activations"
    if w == "int4_gptq":
        return "GPTQ minimises each layer's output error on calibration activations"
    return None  # bf16/fp16, weight-only int8, fp8_block, fp8_rowwise, mxfp8, mxfp4 (W4A16 / MXFP8): dynamic


class CalibrationMissing(Check):
    """A quantization recipe that needs activation statistics has no `calibration` data.

    ModelOpt calibrates (runs sample text through the model and records activation ranges) for:
    fp8 (static per-tensor activation scales), nvfp4 (per-tensor global scales), any format with
    fp8 activations (W4A8), int8 SmoothQuant (smoothing factors), int4_awq (AWQ scale search),
    int4_gptq (GPTQ's layer-wise error minimisation) and an fp8, int8 or nvfp4 KV cache (key/value
    scales). Formats whose scales are computed from the weights or on the fly need none:
    fp8_block, fp8_rowwise, mxfp8, mxfp4 with bf16 or mxfp8 activations, and int8 weight-only.

    Without data from the serving domain the scales come from generic text (quantize.py defaults
    to cnn_dailymail), and the build would not be reproducible from the spec.
    """

    code = "K307"
    name = "calibration-missing"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.spec.models.items():
            if m.quantization.calibration is not None:
                continue
            reasons = calibration_reasons(name, m)
            if not reasons:
                continue
            path, first = reasons[0]
            yield ctx.diag(self, path, f"model {name!r} needs calibration data but has no `calibration`: {first}",
                           help="add `calibration: {data: <jsonl or text file from the serving domain>}` under "
                                "quantization", notes=tuple(r for _, r in reasons[1:]))


class SmoothQuantNeedsEngine(Check):
    """INT8 SmoothQuant (int8 weights with int8 activations, W8A8) on the llmapi target.

    W8A8 SmoothQuant appears only in TensorRT-LLM's legacy engine precision table; the PyTorch
    backend's quantization matrix has no INT8 activation path. Use the engine target (TensorRT-LLM
    <= 1.2.x), int8 weight-only (activations: bf16), or fp8 on SM89+ GPUs.
    """

    code = "K308"
    name = "smoothquant-needs-engine"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.spec.target != "llmapi":
            return
        for name, m in ctx.spec.models.items():
            q = m.quantization
            if q.weights == "int8" and effective_activations(m) == "int8":
                path = quant_path(name, "activations" if q.activations is not None else "weights")
                yield ctx.diag(self, path, f"model {name!r} uses int8 SmoothQuant (W8A8), which only the legacy "
                                           "engine path supports; the llmapi target's PyTorch backend has no W8A8",
                               help="use `target: engine` (TensorRT-LLM <= 1.2.x), int8 weight-only "
                                    "(activations: bf16), or weights: fp8 on SM89+ GPUs")


def allowed_blocks(fmt: str, acts: str | None) -> tuple[int, ...]:
    """Block (group) sizes a weight format takes; () = the format has no block scales."""
    if fmt == "nvfp4":
        return (32,) if acts == "fp8" else (16,)  # W4A8_NVFP4_FP8 scales weights per 32 (ModelOpt)
    return {"mxfp8": (32,), "mxfp4": (32,), "int4_awq": (32, 64, 128), "int4_gptq": (32, 64, 128),
            "fp8_block": (128,)}.get(fmt, ())


class BlockSizeInvalid(Check):
    """A `block_size` that the weight format cannot take.

    - bf16, fp16, fp8 (per-tensor), fp8_rowwise and int8 have no block scales: a block size means
      nothing for them
    - nvfp4: 16 (the hardware block: one E4M3 scale per 16 values); W4A8_NVFP4_FP8 (fp8
      activations) uses 32
    - mxfp8 and mxfp4: 32 (the OCP MX block, one E8M0 scale per 32 values)
    - int4_awq and int4_gptq: 32, 64 or 128 (group sizes of the INT4 kernels; default 128)
    - fp8_block: 128 (128x128 weight tiles)

    Each override's `block_size` is checked against the override's own format (or the model's, when
    the override sets only a block size).
    """

    code = "K309"
    name = "block-size-invalid"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.spec.models.items():
            q = m.quantization
            acts = effective_activations(m)
            checks = [(quant_path(name, "block_size"), q.block_size, q.weights, "")]
            for i, o in enumerate(q.overrides):
                fmt = o.weights or q.weights
                checks.append((quant_path(name, "overrides", i, "block_size"), o.block_size, fmt,
                               f" (override {o.match!r})"))
            for path, block, fmt, where in checks:
                if block is None:
                    continue
                allowed = allowed_blocks(fmt, acts)
                if not allowed:
                    yield ctx.diag(self, path, f"model {name!r}{where}: {fmt} weights have no block scales, so "
                                               f"block_size {block} cannot apply",
                                   help="remove `block_size`, or choose a block-scaled format (nvfp4, mxfp4, "
                                        "int4_awq, fp8_block)")
                elif block not in allowed:
                    shown = str(allowed[0]) if len(allowed) == 1 else \
                        ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}"
                    yield ctx.diag(self, path, f"model {name!r}{where}: {fmt} weights take block_size {shown}, "
                                               f"not {block}",
                                   help=f"set block_size: {allowed[-1]}" if len(allowed) == 1 else
                                   f"use one of {', '.join(map(str, allowed))} (default {allowed[-1]})")


class PatternMatchesNothing(Check):
    """An `exclude` or `overrides[].match` pattern matches no module of the model's architecture.

    Patterns are shell-style globs over module names, spelled the Hugging Face (Llama) way for every
    architecture: `model.layers.3.self_attn.q_proj`, `model.layers.3.mlp.gate_proj`, MoE experts
    `model.layers.3.mlp.experts.17.down_proj`, routers `model.layers.3.mlp.gate`, and `lm_head`.
    ModelOpt silently ignores a pattern that matches nothing, so a typo would leave modules
    quantized that were meant to stay in high precision (or the reverse).
    """

    code = "K310"
    name = "pattern-matches-nothing"
    severity = Severity.WARNING
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.capacity.modules import inventory

        for name, m in ctx.spec.models.items():
            rm = ctx.ir.models.get(name)
            arch = rm.arch if rm is not None else None
            if arch is None:
                continue
            q = m.quantization
            patterns: list[tuple[tuple, str, str]] = []
            if "exclude" in q.model_fields_set:
                patterns += [(quant_path(name, "exclude", i), p, "exclude") for i, p in enumerate(q.exclude)]
            patterns += [(quant_path(name, "overrides", i, "match"), o.match, "override")
                         for i, o in enumerate(q.overrides)]
            if not patterns:
                continue
            groups = inventory(arch)
            # A tied lm_head shares the embedding's weights but is still a module named lm_head.
            extra = ["lm_head"] if not arch.encoder_only else []
            notes = tuple(weak_fact_note(f"the {fact} of {arch.name}", arch.status_of(fact))
                          for fact in ("layers", "experts") if arch.status_of(fact) in WEAK_STATUSES)
            for path, pattern, kind in patterns:
                if any(fnmatchcase(n, pattern) for n in extra) or any(g.matches(pattern) for g in groups):
                    continue
                examples = [next(g.names()) for g in groups if g.is_linear][:3]
                yield ctx.diag(self, path, f"{kind} pattern {pattern!r} of model {name!r} matches no module of "
                                           f"{arch.name}; it would be silently ignored",
                               help="module names look like " + ", ".join(examples)
                                    + "; patterns are globs (`*` matches dots too)", notes=notes)
