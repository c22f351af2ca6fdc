"""K3xx: precision x architecture: weight, activation and KV-cache formats against the targets and
GPUs that must build and serve them.

Every fact comes from the format table (compiler/catalog/data/formats.json, with its sources in
TensorRT-LLM 1.2 and ModelOpt 0.47): which (weights, activations) pairs form a recipe, on which
SM versions each target runs a recipe's dense layers, which recipes Kiln can build for each
target, which calibrate, and which block sizes they take. The quantize and engine actions read the
same rows, so a spec these checks accept is one the build can make. A diagnostic that rests on a
fact the table holds as inferred or unverified says so in a note, with the fact's sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Iterable, Iterator

from compiler.catalog.formats import SIXTEEN_BIT, FormatTable, Recipe, Verdict, load_format_table
from compiler.catalog.types import WEAK_STATUSES, GpuSpec
from compiler.diagnostics import Diagnostic, Severity
from compiler.ir import ResolvedModel

from .base import Check, CheckContext, weak_fact_note

BLACKWELL_FP4_HELP = "serve it on Blackwell (B200, GB200, B300, GB300, RTX PRO 6000)"
TARGET_TEXT = {"llmapi": "the llmapi target (TensorRT-LLM's PyTorch backend)",
               "engine": "the engine target (TensorRT engines, TensorRT-LLM <= 1.2.x)"}


def quant_path(name: str, *rest) -> tuple:
    return ("models", name, "quantization") + rest


def _hosts_text(hosts: list[str]) -> str:
    quoted = ", ".join(repr(h) for h in hosts)
    return f"host{'s' * (len(hosts) > 1)} {quoted}"


def sm_list(sms: Iterable[int]) -> str:
    sms = list(sms)
    return ", ".join(f"SM{s}" for s in sms) if sms else "no GPU"


def verdict_notes(table: FormatTable, v: Verdict, what: str) -> tuple[str, ...]:
    """The note a diagnostic carries when the table's verdict is not verified."""
    if v.status not in WEAK_STATUSES:
        return ()
    sources = "; ".join(table.source(s).describe() for s in v.sources if s in table.sources)
    return (f"this rests on {what}, which the format table holds as {v.status} (sources: {sources})",)


@dataclass
class Pair:
    """A model and one GPU model that serves it (on one or more hosts)."""

    name: str
    model: ResolvedModel
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
        rm = ctx.ir.models.get(unit.model)
        host = ctx.ir.hosts.get(unit.host)
        if rm is None or rm.formats is None or host is None or host.gpu is None:
            continue
        pair = pairs.setdefault((unit.model, host.gpu.name), Pair(unit.model, rm, host.gpu))
        if unit.host not in pair.hosts:
            pair.hosts.append(unit.host)
    return list(pairs.values())


@dataclass(frozen=True)
class WeightUse:
    """One weight recipe a model uses: its main format, or an override's."""

    path: tuple  # spec path of the setting
    what: str  # "weights" or "weights of modules matching '...'"
    recipe: Recipe | None
    override: bool


def weight_uses(rm: ResolvedModel) -> list[WeightUse]:
    """The quantized weight recipes of a model: the main one, then every override that sets weights."""
    f, name = rm.formats, rm.name
    out = []
    if f.weights_quantized:
        out.append(WeightUse(quant_path(name, "weights"), "weights", f.recipe, False))
    for o in f.overrides:
        spec_weights = rm.spec.quantization.overrides[o.index].weights
        if spec_weights is not None and spec_weights not in SIXTEEN_BIT:
            out.append(WeightUse(quant_path(name, "overrides", o.index, "weights"),
                                 f"weights of modules matching {o.match!r}", o.recipe, True))
    return out


def blame(rm: ResolvedModel, use: WeightUse, default_ok: bool) -> tuple:
    """Where to point: the explicit `activations` when the weights' default recipe would have been
    fine (W4A8 where W4A16 runs), else the weights setting."""
    if not use.override and rm.spec.quantization.activations is not None and default_ok:
        return quant_path(rm.name, "activations")
    return use.path


def expert_module_patterns_hit(rm: ResolvedModel, pattern: str) -> bool:
    """Whether a module glob matches a routed-expert module of the model's architecture."""
    from compiler.capacity.modules import inventory

    return any(g.is_expert and g.matches(pattern) for g in inventory(rm.arch))


def family_code(recipe: Recipe, target: str, sm: int) -> str:
    """The rule that reports a recipe the target does not run on this GPU (by what would fix it)."""
    w, a = recipe.weights, recipe.activations
    if w in ("int4_awq", "int4_gptq") and target == "llmapi" and sm >= 100:
        return Int4UnsupportedOnPytorch.code
    if w in ("fp8_block", "fp8_rowwise"):
        return Fp8ScalingUnsupported.code
    if w in ("nvfp4", "mxfp4", "mxfp8") or a in ("nvfp4", "mxfp8"):
        return Fp4NeedsBlackwell.code
    if w == "fp8" or a == "fp8":
        return Fp8NeedsAda.code
    return RecipeUnsupported.code


def dense_findings(ctx: CheckContext) -> Iterator[tuple[str, Pair, WeightUse | None, str, tuple, Verdict]]:
    """(code, pair, weight use or None for the KV cache, message, path, verdict) for every recipe a
    served model uses that its target does not run on its GPU. Recipes the target cannot build at
    all are K312's; int8 SmoothQuant on llmapi is K308's."""
    table = load_format_table()
    target = ctx.ir.target
    for p in served_pairs(ctx):
        sm = p.gpu.sm_version
        arch = p.model.arch
        for use in weight_uses(p.model):
            r = use.recipe
            if r is None or not table.buildable(r, target) and not _rewritable(r, target):
                continue  # K306 / K312
            if target == "llmapi" and r.key == ("int8", "int8"):
                continue  # K308
            if r.experts_only:
                if arch is not None and arch.is_moe and not use.override:
                    continue  # its expert layers are K611's; the rest of the model stays 16-bit
                if arch is not None and arch.is_moe and expert_module_patterns_hit(
                        p.model, p.model.formats.overrides[use.path[4]].match):
                    continue
                yield (RecipeUnsupported.code, p, use,
                       f"model {p.name!r} uses {r.label} {use.what}, which TensorRT-LLM runs only in the expert "
                       f"layers of mixture-of-experts models" + ("" if arch is None or arch.is_moe else
                                                                 f"; {arch.name} has no experts"),
                       use.path, Verdict(False, r.llmapi.status, r.llmapi.sources, r.llmapi.note))
                continue
            v = table.supports(r, target, sm)
            if v:
                continue
            default = table.recipe(r.weights)
            path = blame(p.model, use, default is not None and default is not r and not default.experts_only
                         and bool(table.supports(default, target, sm)))
            runs = r.target(target).sms if r.target(target) is not None else ()
            code = family_code(r, target, sm) if runs else RecipeUnsupported.code
            if runs:
                msg = (f"model {p.name!r} uses {r.label} {use.what}, which {TARGET_TEXT[target]} runs on "
                       f"{sm_list(runs)}, not on {p.where}")
            else:
                msg = (f"model {p.name!r} uses {r.label} {use.what}, which {TARGET_TEXT[target]} of TensorRT-LLM "
                       f"{ctx.ir.toolchain.tensorrt_llm} runs on no GPU" + (f": {v.note}" if v.note else ""))
            yield code, p, use, msg, path, v
        kv = p.model.formats.kv
        if kv.quantized:
            support = kv.engine if target == "engine" else kv.llmapi
            if target == "engine" and kv.engine_kv_cache_dtype is None:
                continue  # K312
            if support.allows(sm):
                continue
            v = Verdict(False, support.status, support.sources, support.note)
            code = Fp8NeedsAda.code if kv.name == "fp8" else Fp4NeedsBlackwell.code if kv.name == "nvfp4" \
                else RecipeUnsupported.code
            yield (code, p, None, f"model {p.name!r} uses an {kv.name} KV cache, which {TARGET_TEXT[target]} supports "
                                  f"on {sm_list(support.sms)}, not on {p.where}", quant_path(p.name, "kv_cache"), v)


def _rewritable(recipe: Recipe, target: str) -> bool:
    """ModelOpt writes some recipes' quant_algo under a name TensorRT-LLM does not read (MXFP4
    exports say "mxfp4"); the quantize action rewrites hf_quant_config.json to the recipe's
    QuantAlgo, so those build on llmapi all the same."""
    m = recipe.modelopt
    return target == "llmapi" and m is not None and not m.trtllm_loads_export and recipe.quant_algo is not None \
        and bool(recipe.llmapi.sms or recipe.experts_only)


def kiln_buildable(table: FormatTable, recipe: Recipe, target: str) -> Verdict:
    """Whether Kiln builds the recipe for the target (the table's verdict, plus the export rewrite)."""
    v = table.buildable(recipe, target)
    if not v and _rewritable(recipe, target):
        return Verdict(True, v.status, v.sources, v.note)
    return v


class _PrecisionCheck(Check):
    """The common base of the K3xx rules (no `code`: not a rule itself): the family's place in the
    order checks run and report in, said once."""

    order = 30


class _DenseRule(_PrecisionCheck):
    """Reports dense_findings of its own code (no `code`: not a rule itself)."""

    fix_help: str = ""

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        table = load_format_table()
        for code, p, use, msg, path, v in dense_findings(ctx):
            if code != self.code:
                continue
            notes = p.notes() + verdict_notes(table, v, "this support fact")
            yield ctx.diag(self, path, msg, help=self.help_for(p, use), notes=notes)

    def help_for(self, p: Pair, use: WeightUse | None) -> str:
        return self.fix_help


class Fp8NeedsAda(_DenseRule):
    """FP8 weights, activations or KV cache on a GPU older than Ada/Hopper (SM < 89).

    FP8 (E4M3) tensor-core math exists from compute capability 8.9 on (Ada Lovelace, Hopper,
    Blackwell). The A100 (SM80) has no FP8 at all: an FP8 checkpoint, W4A8 (int4 weights with FP8
    activations) or an FP8 KV cache cannot run there.

    Exception: the TensorRT-LLM PyTorch backend (the llmapi target) lists an FP8 KV cache as
    supported on Ampere, so an FP8 KV cache on SM80 is only refused for the engine target.
    FP8 block and rowwise scaling have narrower support of their own (K303). The SM lists are the
    format table's (compiler/catalog/data/formats.json).
    """

    code = "K301"
    name = "fp8-needs-sm89"
    fix_help = "serve it on Ada, Hopper or Blackwell (SM89+), or use bf16, int8 weight-only or int4_awq (W4A16) here"

    def help_for(self, p: Pair, use: WeightUse | None) -> str:
        if use is None:
            return "use kv_cache: int8 or auto on this GPU, or the llmapi target (its PyTorch backend supports an " \
                   "FP8 KV cache on Ampere)"
        return self.fix_help


class Fp4NeedsBlackwell(_DenseRule):
    """NVFP4/MXFP4 or MXFP8 formats on a GPU without the hardware or kernels for them.

    NVFP4 and MXFP4 (4-bit E2M1 with block scales) weights, NVFP4 activations and an NVFP4 KV cache
    need Blackwell tensor cores: SM100 (B200, GB200), SM103 (B300, GB300) or SM120 (RTX PRO 6000
    Blackwell); Hopper and older have no FP4. FP4 weights with FP8 activations (W4A8) run on
    SM100/SM103 only. MXFP4 with 16-bit activations (W4A16_MXFP4) runs only in MoE expert layers,
    where Hopper runs it too (K611 checks the MoE backend). The SM lists are the format table's.
    """

    code = "K302"
    name = "fp4-needs-blackwell"

    def help_for(self, p: Pair, use: WeightUse | None) -> str:
        if use is None:
            return "use kv_cache: fp8 on SM89+ GPUs, or serve it on Blackwell"
        return BLACKWELL_FP4_HELP + ", or use fp8 (SM89+) or int4_awq on this GPU"


class Fp8ScalingUnsupported(_DenseRule):
    """FP8 block scaling or FP8 rowwise scaling on a GPU whose kernels do not implement it.

    In TensorRT-LLM's PyTorch-backend hardware matrix, FP8 block scales (FP8_BLOCK_SCALES,
    DeepSeek-style 128x128 weight tiles) run on Hopper (SM90) and Blackwell SM100/SM103 only: not on
    Ada (SM89) and not on SM120. FP8 rowwise (per-channel weights, per-token activations) runs on
    Hopper only; on SM100 the rowwise GEMM plugin raises NotImplementedError.
    """

    code = "K303"
    name = "fp8-scaling-unsupported"
    fix_help = "use per-tensor fp8 on this GPU, or serve it where the table's SM list says it runs"


class Int4UnsupportedOnPytorch(_DenseRule):
    """INT4 AWQ/GPTQ on a Blackwell GPU with the llmapi target.

    The PyTorch backend's quantization matrix has no W4A16 AWQ/GPTQ or W4A8 AWQ kernels on
    Blackwell (SM100/SM120); the legacy engine target (TensorRT-LLM <= 1.2.x) still builds them.
    On Blackwell, NVFP4 is the 4-bit format with native support.
    """

    code = "K304"
    name = "int4-unsupported-on-pytorch"
    fix_help = "use weights: nvfp4 (native 4-bit on Blackwell) or fp8, or the engine target (TensorRT-LLM <= 1.2.x)"


class RecipeUnsupported(_DenseRule):
    """A quantization recipe the pinned TensorRT-LLM does not run on this GPU, for a reason none of
    K301-K304 names: the recipe has no kernels on any GPU for this target (MXFP8 before 1.3), or it
    runs only in the expert layers of mixture-of-experts models (W4A16 MXFP4) and the model is
    dense or the setting covers non-expert modules. The format table lists where each recipe runs.
    """

    code = "K311"
    name = "recipe-unsupported"
    fix_help = "choose a recipe the format table lists for this target and GPU (`kiln explain K311`)"


class RecipeNotBuildable(_PrecisionCheck):
    """A recipe Kiln cannot build for the spec's target.

    On the llmapi target the checkpoint comes from ModelOpt (the pinned version's named configs)
    and must be one TensorRT-LLM's PyTorch backend reads; on the engine target it comes from
    TensorRT-LLM's quantize.py, whose --qformat and --kv_cache_dtype choices are fixed. The format
    table says which recipes each can make: for example quantize.py has no format for fp8_block,
    MXFP4, W4A8 NVFP4 or an NVFP4 KV cache, and ModelOpt 0.47 has no GPTQ configuration, so
    int4_gptq builds on neither target. Rather than fail in `kiln build`, the spec is refused here.
    """

    code = "K312"
    name = "recipe-not-buildable"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        table = load_format_table()
        target = ctx.ir.target
        how = "ModelOpt" if target == "llmapi" else "TensorRT-LLM's quantize.py"
        for name, rm in ctx.ir.models.items():
            if rm.formats is None:
                continue
            for use in weight_uses(rm):
                r = use.recipe
                if r is None or (target == "llmapi" and r.key == ("int8", "int8")):
                    continue  # K306, K308
                v = kiln_buildable(table, r, target)
                if v:
                    continue
                default = table.recipe(r.weights)
                path = blame(rm, use, default is not r and bool(kiln_buildable(table, default, target)))
                yield ctx.diag(self, path, f"model {name!r}: Kiln cannot build {r.label} {use.what} for the "
                                               f"{target} target: " + (v.note or f"{how} has no such recipe"),
                               help=self._help(table, r, target), notes=verdict_notes(table, v, "this build fact"))
            kv = rm.formats.kv
            if target == "engine" and kv.quantized and kv.engine_kv_cache_dtype is None:
                yield ctx.diag(self, quant_path(name, "kv_cache"),
                               f"model {name!r}: TensorRT-LLM's quantize.py has no --kv_cache_dtype for an {kv.name} "
                               "KV cache (it takes fp8 or int8), so the engine would silently keep a 16-bit cache",
                               help="use kv_cache: fp8, or the llmapi target")

    @staticmethod
    def _help(table: FormatTable, r: Recipe, target: str) -> str:
        other = "engine" if target == "llmapi" else "llmapi"
        if kiln_buildable(table, r, other):
            return f"use `target: {other}`, or another recipe"
        buildable = [x.label for x in table if x.quantized and kiln_buildable(table, x, target)
                     and x.weights == r.weights]
        if buildable:
            return "for these weights Kiln builds: " + ", ".join(buildable)
        return "choose another weight format"


class NvFp4KvCacheNeedsGate(_PrecisionCheck):
    """An NVFP4 KV cache without a quality gate.

    Attention is sensitive to outliers in keys and values; 4-bit E2M1 values with a scale per 16
    keep far less dynamic range than FP8, and the loss depends on the model and the data. Kiln
    only accepts an NVFP4 KV cache together with a `quality_gate` that measures the regression.
    """

    code = "K305"
    name = "nvfp4-kv-cache-needs-gate"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            q = m.quantization
            if q.kv_cache == "nvfp4" and q.quality_gate is None:
                yield ctx.diag(self, quant_path(name, "kv_cache"),
                               f"model {name!r} uses an nvfp4 KV cache without a quality gate: FP4 loses much of "
                               "the dynamic range attention needs, and the accuracy loss is model-specific",
                               help="add `quality_gate: {eval: <file>, max_regression_pct: <pct>}`, or use "
                                    "kv_cache: fp8")


class InvalidFormatCombination(_PrecisionCheck):
    """A weight format combined with an activation format that no quantization recipe implements.

    The valid pairs are the format table's recipes (TensorRT-LLM QuantAlgo in parentheses):

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

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        table = load_format_table()
        for name, m in ctx.models():
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
            if table.recipe(q.weights, a) is not None:
                continue
            shown = ", ".join(f"{v or 'bf16/fp16'} ({table.recipe(q.weights, v).quant_algo})"
                              for v in table.valid_activations(q.weights))
            yield ctx.diag(self, path, f"model {name!r} pairs {q.weights} weights with {a} activations, a "
                                       "combination no quantization recipe implements",
                           help=f"{q.weights} weights take activations: {shown}")


def calibration_reasons(rm: ResolvedModel) -> list[tuple[tuple, str]]:
    """(spec path, reason) for each part of the recipe that needs activation statistics."""
    f, name = rm.formats, rm.name
    out: list[tuple[tuple, str]] = []
    for use in weight_uses(rm):
        r = use.recipe
        if r is not None and r.calibration.calibrates:
            if use.override:
                out.append((use.path, f"override {rm.formats.overrides[use.path[4]].match!r}: {r.calibration.reason}"))
                continue
            # the activations are to blame when the weights' own default recipe would not calibrate
            default = load_format_table().recipe(r.weights)
            path = blame(rm, use, default is not r and not default.calibration.calibrates)
            out.append((path, r.calibration.reason))
    if f.kv.calibration.calibrates:
        out.append((quant_path(name, "kv_cache"), f"an {f.kv.name} KV cache: {f.kv.calibration.reason}"))
    return out


class CalibrationMissing(_PrecisionCheck):
    """A quantization recipe that needs activation statistics has no `calibration` data.

    ModelOpt calibrates (runs sample text through the model and records activation ranges) for the
    recipes the format table marks as calibrating: fp8 (static per-tensor activation scales), nvfp4
    (per-tensor global scales), any format with fp8 activations (W4A8), int8 SmoothQuant
    (smoothing factors), int4_awq (AWQ scale search), int4_gptq (GPTQ's layer-wise error
    minimisation) and an fp8, int8 or nvfp4 KV cache (key/value scales). Formats whose scales are
    computed from the weights or on the fly need none: fp8_block, fp8_rowwise, mxfp8, mxfp4 with
    bf16 or mxfp8 activations, and int8 weight-only.

    Without data from the serving domain the scales come from generic text (quantize.py defaults
    to cnn_dailymail), and the build would not be reproducible from the spec.
    """

    code = "K307"
    name = "calibration-missing"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, rm in ctx.ir.models.items():
            if rm.spec.quantization.calibration is not None or rm.formats is None:
                continue
            reasons = calibration_reasons(rm)
            if not reasons:
                continue
            path, first = reasons[0]
            yield ctx.diag(self, path, f"model {name!r} needs calibration data but has no `calibration`: {first}",
                           help="add `calibration: {data: <jsonl or text file from the serving domain>}` under "
                                "quantization", notes=tuple(r for _, r in reasons[1:]))


class SmoothQuantNeedsEngine(_PrecisionCheck):
    """INT8 SmoothQuant (int8 weights with int8 activations, W8A8) on the llmapi target.

    W8A8 SmoothQuant appears only in TensorRT-LLM's legacy engine precision table; the PyTorch
    backend's quantization matrix has no INT8 activation path. Use the engine target (TensorRT-LLM
    <= 1.2.x), int8 weight-only (activations: bf16), or fp8 on SM89+ GPUs.
    """

    code = "K308"
    name = "smoothquant-needs-engine"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "llmapi":
            return
        for name, rm in ctx.ir.models.items():
            q = rm.spec.quantization
            if rm.formats is not None and q.weights == "int8" and rm.formats.act_quant == "int8":
                path = quant_path(name, "activations" if q.activations is not None else "weights")
                yield ctx.diag(self, path, f"model {name!r} uses int8 SmoothQuant (W8A8), which only the legacy "
                                           "engine path supports; the llmapi target's PyTorch backend has no W8A8",
                               help="use `target: engine` (TensorRT-LLM <= 1.2.x), int8 weight-only "
                                    "(activations: bf16), or weights: fp8 on SM89+ GPUs")


class BlockSizeInvalid(_PrecisionCheck):
    """A `block_size` that the weight format cannot take.

    The allowed sizes are the format table's:

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

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        table = load_format_table()
        for name, rm in ctx.ir.models.items():
            f = rm.formats
            if f is None:
                continue
            q = rm.spec.quantization
            checks = [(quant_path(name, "block_size"), q.block_size, q.weights, f.act_quant, "")]
            for i, o in enumerate(q.overrides):
                fmt = o.weights or q.weights
                acts = f.act_quant if o.weights is None else table.default_activations(fmt) \
                    if fmt not in SIXTEEN_BIT else None
                checks.append((quant_path(name, "overrides", i, "block_size"), o.block_size, fmt, acts,
                               f" (override {o.match!r})"))
            for path, block, fmt, acts, where in checks:
                if block is None:
                    continue
                allowed = table.allowed_blocks(fmt, acts)
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


class PatternMatchesNothing(_PrecisionCheck):
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

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.capacity.modules import inventory

        for name, m in ctx.models():
            arch = ctx.arch(name)
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


class QuantizePatternsIgnored(_PrecisionCheck):
    """`quantization.exclude` or `overrides` where they have no effect: on the engine target, or on a
    model nothing of which is quantized.

    The engine target's checkpoint comes from TensorRT-LLM's examples/quantization/quantize.py
    (compiler/actions/engine.py), not from Kiln's ModelOpt step: its flags (data/trtllm_cli.json)
    take one --qformat for the whole model and no module patterns. It keeps `lm_head` unquantized
    (without --quantize_lm_head) and quantizes every other linear layer, so an exclusion other than
    the default `[lm_head]` and every override would be dropped without a word. Use the llmapi
    target, whose ModelOpt step applies both.

    A model with 16-bit weights and KV cache is not quantized at all: an exclusion or a 16-bit
    override then keeps 16-bit what already is. Nor does an override that quantizes modules make it
    quantized: Kiln's quantize step runs for a model whose own `weights` or `kv_cache` is quantized
    (compiler/actions/quantize.py), so such an override would leave the model at 16 bits.
    """

    code = "K313"
    name = "quantize-patterns-ignored"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, rm in ctx.ir.models.items():
            if rm.formats is None:
                continue
            q = rm.spec.quantization
            if not rm.formats.quantized:
                why, fix = f"nothing of model {name!r} is quantized", "or quantize the model"
            elif ctx.target == "engine":
                why = ("on the engine target TensorRT-LLM's quantize.py takes no module patterns (it keeps lm_head "
                       "unquantized and quantizes every other linear layer)")
                fix = "or use the llmapi target, whose ModelOpt step applies it"
            else:
                continue
            if "exclude" in q.model_fields_set and (list(q.exclude) != ["lm_head"] or not rm.formats.quantized):
                yield ctx.diag(self, quant_path(name, "exclude"),
                               f"quantization.exclude of model {name!r} has no effect: {why}",
                               help=f"remove `exclude`, {fix}")
            if q.overrides and not rm.formats.quantized and any(o.weights not in (None, *SIXTEEN_BIT)
                                                                  for o in q.overrides):
                yield ctx.diag(self, quant_path(name, "overrides"),
                               f"quantization.overrides of model {name!r} have no effect: Kiln quantizes a model "
                               "whose own `weights` or `kv_cache` is quantized, and an override alone does not make "
                               "it so (the model would be served at 16 bits)",
                               help="set `weights` to the format most modules take, and override the modules that "
                                    "stay 16-bit")
            elif q.overrides:
                yield ctx.diag(self, quant_path(name, "overrides"),
                               f"quantization.overrides of model {name!r} have no effect: {why}",
                               help=f"remove `overrides`, {fix}")


class SixteenBitWeightsNotDtype(_PrecisionCheck):
    """`quantization.weights` names the other 16-bit format than `dtype`.

    bf16 and fp16 weights are not a quantization: they leave the weights unquantized, and an
    unquantized model is built and served at `dtype` (default bf16). `weights: fp16` with the default
    dtype would keep BF16 weights without a word; the model's 16-bit format is `dtype`.
    """

    code = "K315"
    name = "sixteen-bit-weights-not-dtype"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, rm in ctx.ir.models.items():
            m = rm.spec
            if "weights" in m.quantization.model_fields_set and m.quantization.weights in SIXTEEN_BIT \
                    and m.quantization.weights != m.dtype:
                yield ctx.diag(self, quant_path(name, "weights"),
                               f"quantization.weights: {m.quantization.weights} of model {name!r} has no effect: "
                               f"16-bit weights are not quantized, so the model keeps its dtype ({m.dtype})",
                               help=f"set `dtype: {m.quantization.weights}` (and remove `weights`) for "
                                    f"{m.quantization.weights.upper()} weights")


class DtypeFollowsCheckpoint(_PrecisionCheck):
    """`dtype` on an unquantized model of the llmapi target, where the checkpoint's dtype wins.

    With nothing to quantize, the llmapi target serves the model's own checkpoint. TensorRT-LLM's
    PyTorch backend builds the model at the checkpoint's `torch_dtype` (config.json):
    tensorrt_llm/_torch/pyexecutor/model_loader.py (ModelLoader._load_and_validate_config, read at
    NVIDIA/TensorRT-LLM commit 004b733e) passes no dtype to the model config: only the KV-cache and
    Mamba cache dtypes are applied; LlmArgs.dtype is read by the TensorRT backend's conversion
    (llmapi/llm_utils.py ModelLoader). So `dtype` changes nothing served. It does
    take effect where Kiln quantizes (ModelOpt loads the model at it) and on the engine target
    (quantize.py --dtype).
    """

    code = "K314"
    name = "dtype-follows-checkpoint"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "llmapi":
            return
        for name, rm in ctx.ir.models.items():
            if "dtype" not in rm.spec.model_fields_set or rm.formats is None or rm.formats.quantized:
                continue
            yield ctx.diag(self, ("models", name, "dtype"),
                           f"dtype of model {name!r} has no effect: nothing is quantized, and the llmapi target's "
                           "PyTorch backend serves the checkpoint at its own torch_dtype (config.json)",
                           help="remove `dtype`, or quantize the model (Kiln's ModelOpt step loads it at `dtype`)")
