"""K7xx: tensor, pipeline and expert parallelism against the model's shape and the GPUs that serve it.

The constraints are TensorRT-LLM's Mapping (tensorrt_llm/mapping.py): world size = tp * pp,
tp = moe_tp * moe_ep, attention heads split evenly over tp, experts over ep.
"""

from __future__ import annotations

from typing import Iterable

from compiler.catalog.types import WEAK_STATUSES, ModelArch
from compiler.diagnostics import Diagnostic, Severity

from .base import Check, CheckContext, once_per_entry, weak_fact_note


def _ppath(name: str, field: str) -> tuple:
    return ("models", name, "parallelism", field)


def _arch_models(ctx: CheckContext):
    """(name, model spec, arch) for every model whose architecture resolved."""
    for name, m in ctx.models():
        arch = ctx.arch(name)
        if arch is not None:
            yield name, m, arch


def _tps(name: str, m) -> list[tuple[int, tuple]]:
    """The tp of the model's servers and where the spec says it: the model's, and under
    disaggregated serving each role's too."""
    out = [(m.parallelism.tp, _ppath(name, "tp"))]
    d = m.serving.disaggregated
    if d is not None:
        out += [(d.role(r).parallelism.tp, ("models", name, "serving", "disaggregated", r, "parallelism", "tp"))
                for r in ("prefill", "decode")]
    return out


def _note(arch: ModelArch, fact: str) -> tuple[str, ...]:
    status = arch.status_of(fact)
    if status in WEAK_STATUSES:
        return (weak_fact_note(f"the {fact} of {arch.name}", status),)
    return ()


def _label(name: str, arch: ModelArch) -> str:
    """`'chat' (llama-3.1-8b)`, or just `'chat'` when the architecture came from its own config.json."""
    return f"{name!r}" if arch.name == name else f"{name!r} ({arch.name})"


def _divisors(n: int, upto: int = 64) -> str:
    return ", ".join(str(d) for d in range(1, min(n, upto) + 1) if n % d == 0)


class _ParallelismCheck(Check):
    """The common base of the K7xx rules (no `code`: not a rule itself): the family's place in the
    order checks run and report in, said once."""

    order = 70


class GpuCountMismatch(_ParallelismCheck):
    """A whole-GPU assignment lists a number of GPUs different from the model's tp * pp.

    The GPUs of one `gpus` entry form one serving unit: TensorRT-LLM runs tp * pp ranks, one per
    GPU (world_size must equal tp * pp * cp). Extra GPUs would sit idle; too few cannot start.
    For several replicas, write one entry per replica.
    """

    code = "K701"
    name = "gpu-count-mismatch"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host in ctx.hosts():
            for a_idx, a in enumerate(host.gpus):
                m = ctx.model(a.serves) if a.serves is not None else None
                if m is None:
                    continue
                par = m.parallelism_of(a.role)
                tp, pp = par.tp, par.pp
                n = len(a.indexes)
                if n != tp * pp:
                    yield ctx.diag(self, ("hosts", hname, "gpus", a_idx, "index"),
                                   f"this entry gives model {a.serves!r} {n} GPU{'s' * (n != 1)}, but its parallelism "
                                   f"needs tp*pp = {tp}*{pp} = {tp * pp}",
                                   help=f"list {tp * pp} GPU index{'es' * (tp * pp != 1)}, or change "
                                        f"models.{a.serves}.parallelism; write one entry per replica")


class HeadsNotDivisible(_ParallelismCheck):
    """The model's attention heads are not divisible by tp.

    Tensor parallelism gives each rank heads / tp query heads; an uneven split is not supported.
    (KV heads may be fewer than tp: TensorRT-LLM then replicates them across ranks.)
    """

    code = "K702"
    name = "heads-not-divisible"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, arch in _arch_models(ctx):
            for tp, path in _tps(name, m):
                if not arch.heads % tp:
                    continue
                yield ctx.diag(self, path,
                               f"model {_label(name, arch)} has {arch.heads} attention heads, which tp={tp} "
                               "cannot split evenly",
                               help=f"use a tp that divides {arch.heads}: {_divisors(arch.heads)}",
                               notes=_note(arch, "heads"))


class ExpertParallelInvalid(_ParallelismCheck):
    """Expert parallelism on a dense model, or an ep that does not divide tp * pp.

    `ep` (moe_expert_parallel_size) distributes the experts of MoE layers over GPUs; a model without
    experts has nothing to distribute. The expert-parallel groups are carved out of the model's
    GPUs, so ep must divide the number of GPUs, tp * pp (and TensorRT-LLM further needs it to
    divide tp itself: K707).
    """

    code = "K703"
    name = "expert-parallel-invalid"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            par = m.parallelism
            if par.ep == 1:
                continue
            arch = ctx.arch(name)
            if arch is not None and not arch.is_moe:
                yield ctx.diag(self, _ppath(name, "ep"),
                               f"model {_label(name, arch)} has no experts, so ep={par.ep} has nothing to "
                               "distribute", help="remove `ep` (expert parallelism is for MoE models)")
            elif (par.tp * par.pp) % par.ep:
                yield ctx.diag(self, _ppath(name, "ep"),
                               f"model {name!r}: ep={par.ep} does not divide the model's {par.tp * par.pp} GPUs "
                               f"(tp*pp = {par.tp}*{par.pp})",
                               help=f"use an ep that divides tp: {_divisors(par.tp)}")


class ExpertsNotDivisible(_ParallelismCheck):
    """The model's routed experts are not divisible by ep.

    Each expert-parallel rank holds experts / ep experts (Mapping.ep_experts); an uneven split
    leaves experts without a rank.
    """

    code = "K704"
    name = "experts-not-divisible"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, arch in _arch_models(ctx):
            ep = m.parallelism.ep
            if not arch.is_moe or ep == 1 or not arch.experts or arch.experts % ep == 0:
                continue
            yield ctx.diag(self, _ppath(name, "ep"),
                           f"model {_label(name, arch)} has {arch.experts} experts, which ep={ep} cannot split "
                           "evenly", help=f"use an ep that divides {arch.experts}", notes=_note(arch, "experts"))


class LayersNotDivisible(_ParallelismCheck):
    """The model's layers are not divisible by pp.

    TensorRT-LLM splits layers over pipeline stages as evenly as it can (the first stages get one
    extra layer), so uneven stages work, but the slowest stage sets the pace of the pipeline and
    the GPUs of the other stages wait on it.
    """

    code = "K705"
    name = "layers-not-divisible"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, arch in _arch_models(ctx):
            pp = m.parallelism.pp
            if pp == 1 or arch.layers % pp == 0 or pp > arch.layers:
                continue  # more stages than layers is an error (K708)
            yield ctx.diag(self, _ppath(name, "pp"),
                           f"model {_label(name, arch)} has {arch.layers} layers, which pp={pp} splits unevenly "
                           f"({arch.layers // pp}-{arch.layers // pp + 1} per stage); the largest stage sets the pace",
                           help=f"use a pp that divides {arch.layers}: {_divisors(arch.layers)}",
                           notes=_note(arch, "layers"))


class ParallelOnMig(_ParallelismCheck):
    """A model (or a disaggregated role of one) with tp * pp > 1 is served on a MIG instance.

    A MIG instance is one slice of one GPU, and MIG devices have no peer-to-peer access or NVLink
    (`nvidia-smi mig -lgip` shows P2P: No for every profile); a CUDA process also sees only one MIG
    device. Tensor or pipeline parallelism across MIG instances is therefore impossible. Serve the
    model with tp = pp = 1 on a larger profile, or on whole GPUs.
    """

    code = "K706"
    name = "parallel-on-mig"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for unit in once_per_entry(ctx.ir.units):
            m = ctx.model(unit.model)
            if unit.mig is None or m is None:
                continue
            par = m.parallelism_of(unit.role)
            tp, pp = par.tp, par.pp
            if tp * pp > 1:
                # a disaggregated role's servers take the role's parallelism
                where = (f"models.{unit.model}.serving.disaggregated.{unit.role}.parallelism"
                         if par is not m.parallelism else f"models.{unit.model}.parallelism")
                what = f"the {unit.role} role of model {unit.model!r}" if par is not m.parallelism \
                    else f"model {unit.model!r}"
                yield ctx.diag(self, unit.path + ("serves",),
                               f"{what} needs tp*pp = {tp * pp} GPUs, but a MIG instance is one slice "
                               "of one GPU, and MIG instances have no P2P or NVLink to split a model across",
                               help=f"set {where} to tp: 1, pp: 1 and use a larger profile, "
                                    "or serve it on whole GPUs")


class ExpertParallelNotInTp(_ParallelismCheck):
    """ep divides tp * pp but not tp.

    TensorRT-LLM forms expert-parallel groups inside each pipeline stage: its Mapping requires
    tp = moe_tp * moe_ep (tensorrt_llm/mapping.py raises "tp_size must equal to moe_tp_size *
    moe_ep_size * moe_cluster_size" otherwise). With pp > 1, ep must therefore divide tp, not only
    tp * pp.
    """

    code = "K707"
    name = "expert-parallel-not-in-tp"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            par = m.parallelism
            if par.ep == 1 or (par.tp * par.pp) % par.ep or par.tp % par.ep == 0:
                continue  # dense models and other ep faults are K703's
            arch = ctx.arch(name)
            if arch is not None and not arch.is_moe:
                continue
            yield ctx.diag(self, _ppath(name, "ep"),
                           f"model {name!r}: ep={par.ep} does not divide tp={par.tp}; TensorRT-LLM builds expert "
                           "groups within each pipeline stage (tp = moe_tp * ep)",
                           help=f"use an ep that divides tp: {_divisors(par.tp)}")


class MoreStagesThanLayers(_ParallelismCheck):
    """pp is larger than the model's number of layers.

    Every pipeline stage needs at least one layer; TensorRT-LLM's Mapping.pp_layers asserts
    "pp size cannot be larger than num_hidden_layers". Use fewer stages (or tensor parallelism).
    """

    code = "K708"
    name = "more-stages-than-layers"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, arch in _arch_models(ctx):
            pp = m.parallelism.pp
            if pp > arch.layers:
                yield ctx.diag(self, _ppath(name, "pp"),
                               f"model {_label(name, arch)} has {arch.layers} layers, fewer than its pp={pp} pipeline "
                               "stages; a stage without layers cannot run",
                               help=f"use pp <= {arch.layers} (a divisor: {_divisors(arch.layers)}), or tensor "
                                    "parallelism", notes=_note(arch, "layers"))


class AttentionDpInvalid(_ParallelismCheck):
    """`parallelism.attention_dp` where TensorRT-LLM cannot apply it as Kiln sizes it.

    Attention data parallelism (LLM-API `enable_attention_dp`) turns the tp ranks of a unit into
    tp attention ranks, each with whole attention weights and a KV cache of its own requests,
    while the routed experts stay split over the ranks (TensorRT-LLM 1.2: mapping.py `dp_size`,
    DeepSeek-V3's `_compute_mlp_tp_size`). It is a PyTorch-backend option (llmapi target only);
    with tp = 1 there is nothing to split; and it is built for mixture-of-experts models, whose
    expert layers keep the ranks busy together (a dense model would hold tp full copies).
    """

    code = "K709"
    name = "attention-dp-invalid"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            par = m.parallelism
            if not par.attention_dp:
                continue
            path = _ppath(name, "attention_dp")
            arch = ctx.arch(name)
            if ctx.target == "engine":
                yield ctx.diag(self, path, f"model {name!r}: attention_dp is a PyTorch-backend option "
                                           "(enable_attention_dp) that the engine target cannot apply",
                               help="remove it, or use `target: llmapi`")
            elif par.tp == 1:
                yield ctx.diag(self, path, f"model {name!r}: attention_dp with tp=1 has nothing to split; "
                                           "it needs tp > 1 (the attention ranks)",
                               help="set parallelism.tp to the GPUs of the unit, or remove attention_dp")
            elif arch is not None and not arch.is_moe:
                yield ctx.diag(self, path, f"model {_label(name, arch)} has no experts: under attention_dp each "
                                           f"of the {par.tp} ranks would hold the whole model",
                               help="use tensor parallelism alone for dense models (remove attention_dp)")
