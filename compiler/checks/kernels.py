"""K6xx: kernel backends, limits and runtime options against the model and the serving target.

TensorRT-LLM replaces or ignores several of these settings silently (an unknown attention backend
becomes TRTLLM, PyTorch-only knobs do nothing on engines), so the compiler says so up front.
"""

from __future__ import annotations

from typing import Iterable

from compiler import runtimes as serving_runtimes
from compiler.catalog import disaggregated as disagg_facts
from compiler.catalog.formats import load_format_table
from compiler.diagnostics import Diagnostic, Severity

from compiler.ir.disaggregated import served

from .base import Check, CheckContext
from .precision import expert_module_patterns_hit, sm_list, served_pairs, verdict_notes


def _mpath(name: str, *rest) -> tuple:
    return ("models", name) + rest


class _KernelCheck(Check):
    """The common base of the K6xx rules (no `code`: not a rule itself): the family's place in the
    order checks run and report in, said once."""

    order = 60


class MoeBackendOnDenseModel(_KernelCheck):
    """`kernels.moe` is set on a model without experts.

    The MoE backend (MoeConfig.backend) only selects the kernels of expert layers; on a dense
    model it is ignored. Remove it, or check that `architecture` names the model you meant.
    """

    code = "K601"
    name = "moe-backend-on-dense-model"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target == "engine":
            return  # on engines the knob is refused altogether (K604)
        for name, m in ctx.models():
            arch = ctx.arch(name)
            if m.kernels.moe is None or arch is None or arch.is_moe:
                continue
            yield ctx.diag(self, _mpath(name, "kernels", "moe"),
                           f"model {name!r} ({arch.name}) has no experts, so `kernels.moe: {m.kernels.moe}` "
                           "would be ignored", help="remove `moe` from kernels")


def fp8_fmha_applies(rm) -> bool:
    """Whether trtllm-build keeps FP8 context FMHA for the model's recipe (the format table's
    engine.fp8_context_fmha: FP8, W4A8 AWQ and NVFP4)."""
    r = rm.formats.recipe if rm.formats is not None else None
    return r is not None and r.engine is not None and r.engine.fp8_context_fmha


class Fp8ContextFmhaMisused(_KernelCheck):
    """`kernels.fp8_context_fmha` where it cannot apply.

    FP8 context-phase fused attention is a `trtllm-build` feature (`--use_fp8_context_fmha`) that
    only applies to FP8, W4A8 AWQ and NVFP4 checkpoints (tensorrt_llm/builder.py; the format
    table's engine rows); for any other checkpoint the flag is ignored.

    On the llmapi target there is no such option at all: the PyTorch backend has no LLM-API field
    for it, and whether context attention runs in FP8 follows the checkpoint's KV-cache format
    (`quantization.kv_cache: fp8`). Remove the key there.
    """

    code = "K602"
    name = "fp8-context-fmha-misused"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            flag = m.kernels.fp8_context_fmha
            if flag is None:
                continue
            path = _mpath(name, "kernels", "fp8_context_fmha")
            if ctx.target == "llmapi":
                yield ctx.diag(self, path, f"model {name!r}: fp8_context_fmha is an engine-build flag "
                                           "(trtllm-build --use_fp8_context_fmha) with no LLM-API field, so the "
                                           "llmapi target cannot apply it",
                               help="remove it; on the llmapi target FP8 context attention follows the KV-cache "
                                    "format (quantization.kv_cache: fp8)")
            elif flag and not fp8_fmha_applies(ctx.ir.models[name]):
                q = m.quantization
                recipe = q.weights if q.activations is None else f"{q.weights} weights with {q.activations} activations"
                yield ctx.diag(self, path, f"model {name!r}: fp8_context_fmha only applies to fp8, W4A8 AWQ and "
                                           f"nvfp4 checkpoints, not to {recipe}; it would be ignored",
                               help="remove it, or quantize the weights to fp8 or nvfp4")


class CudaGraphSizesInvalid(_KernelCheck):
    """`runtime.cuda_graph_batch_sizes` that cannot be used.

    CUDA graphs are captured per batch size, each costing GPU memory and start-up time; a size
    above `limits.max_batch_size` is never scheduled. CudaGraphConfig is a PyTorch-backend option
    (TorchLlmArgs): the engine target has no such setting (engines use `cuda_graph_mode` at
    runtime instead), so the list is refused there.
    """

    code = "K603"
    name = "cuda-graph-sizes-invalid"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        seen: set[tuple] = set()  # a value both roles of a disaggregated model share: once
        for name, model in ctx.models():
            for v in served(name, model):
                m = v.spec
                sizes = m.runtime.cuda_graph_batch_sizes
                if sizes is None:
                    continue
                path = v.where("runtime", "cuda_graph_batch_sizes")
                if ctx.target == "engine":
                    if path not in seen:
                        seen.add(path)
                        yield ctx.diag(self, path, f"model {name!r}: cuda_graph_batch_sizes is a PyTorch-backend "
                                                   "option (CudaGraphConfig) that the engine target cannot apply",
                                       key=True, help="remove it, or use `target: llmapi`")
                    continue
                limit = m.limits.max_batch_size
                for i, s in enumerate(sizes):
                    if s > limit and path + (i,) not in seen:
                        seen.add(path + (i,))
                        yield ctx.diag(self, path + (i,), f"{v.label}: CUDA graph batch size {s} is above "
                                                          f"limits.max_batch_size ({limit}); a batch that large is "
                                                          "never scheduled, so the graph only costs memory",
                                       help=f"drop sizes above {limit}, or raise limits.max_batch_size")


class PytorchOnlyKernel(_KernelCheck):
    """A PyTorch-backend kernel choice on the engine target.

    `kernels.attention` (TorchLlmArgs.attn_backend) and `kernels.moe` (MoeConfig.backend) select
    kernels of the PyTorch backend. Engines bake their kernels in at build time (the attention
    plugin); on the engine target only the default `attention: trtllm` is meaningful and `moe`
    must be left unset.
    """

    code = "K604"
    name = "pytorch-only-kernel"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "engine":
            return
        for name, m in ctx.models():
            k = m.kernels
            if k.attention != "trtllm":
                yield ctx.diag(self, _mpath(name, "kernels", "attention"),
                               f"model {name!r}: attention backend {k.attention!r} exists only in the PyTorch "
                               "backend; the engine target uses the TensorRT-LLM attention plugin",
                               help="remove `attention` (or set trtllm), or use `target: llmapi`")
            if k.moe is not None:
                yield ctx.diag(self, _mpath(name, "kernels", "moe"),
                               f"model {name!r}: the MoE backend ({k.moe!r}) is a PyTorch-backend option; the "
                               "engine target uses the MoE plugin chosen at build time",
                               help="remove `moe`, or use `target: llmapi`")


# the roles whose servers take generation-only requests, exempt from K605
GENERATION_ONLY = frozenset(disagg_facts.fact("generation_only_token_budget")["roles"])


class PromptExceedsTokenBudget(_KernelCheck):
    """`limits.max_num_tokens` is smaller than `limits.max_input_len` and chunked prefill is off.

    A prompt's context phase is processed in one forward pass, which holds at most max_num_tokens
    tokens. Without chunked prefill a prompt longer than that can never be scheduled.
    Raise max_num_tokens or enable `runtime.chunked_prefill`, which splits long prompts into
    chunks of max_num_tokens.

    A disaggregated model's decode servers are exempt: they receive generation-only requests (the
    prompt's KV cache comes from a prefill server), which TensorRT-LLM's own check skips
    (catalog/data/disaggregated.json `generation_only_token_budget`).
    """

    code = "K605"
    name = "prompt-exceeds-token-budget"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        seen: set[tuple] = set()
        for name, model in ctx.models():
            for v in served(name, model):
                if v.role in GENERATION_ONLY:
                    continue
                m = v.spec
                lim = m.limits
                if lim.max_num_tokens >= lim.max_input_len or m.runtime.chunked_prefill:
                    continue
                field = "max_num_tokens" if "max_num_tokens" in lim.model_fields_set else "max_input_len"
                default = "" if field == "max_num_tokens" else " (the default)"
                path = v.where("limits", field)
                if path in seen:
                    continue
                seen.add(path)
                yield ctx.diag(self, path,
                               f"{v.label}: max_num_tokens {lim.max_num_tokens}{default} is below max_input_len "
                               f"{lim.max_input_len} and chunked prefill is off, so a full-length prompt can never "
                               "be scheduled",
                               help=f"set max_num_tokens >= {lim.max_input_len}, or `runtime: {{chunked_prefill: "
                                    "true}`")


class BatchExceedsTokenBudget(_KernelCheck):
    """`limits.max_batch_size` is larger than `limits.max_num_tokens`.

    Every scheduled sequence contributes at least one token to a forward pass, so no more than
    max_num_tokens sequences can ever run together; the larger batch limit is unreachable (and
    sizes buffers for nothing). TensorRT-LLM only warns about it.
    """

    code = "K606"
    name = "batch-exceeds-token-budget"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        seen: set[tuple] = set()
        for name, model in ctx.models():
            for v in served(name, model):
                lim = v.spec.limits
                path = v.where("limits", "max_batch_size")
                if lim.max_batch_size > lim.max_num_tokens and path not in seen:
                    seen.add(path)
                    yield ctx.diag(self, path,
                                   f"{v.label}: max_batch_size {lim.max_batch_size} is above max_num_tokens "
                                   f"{lim.max_num_tokens}; at most {lim.max_num_tokens} sequences fit in one forward "
                                   "pass", help=f"lower max_batch_size to {lim.max_num_tokens} or raise max_num_tokens")


class MultipleInstances(_KernelCheck):
    """`serving.instances` above 1.

    Each Triton model instance of TensorRT-LLM loads its own copy of the weights and claims its own
    KV cache on the same GPU(s): `kv_cache_memory_fraction` of the memory free when that instance
    starts (free_gpu_memory_fraction on the llmapi target, kv_cache_free_gpu_mem_fraction on the
    engine target). The first instance's claim leaves the next too little to load its weights
    (triton-inference-server/tensorrtllm_backend#274; its docs/llmapi.md, "Multiple Instances on
    the Same GPU", says to lower the fraction "so all instances fit"), and every instance admits
    a full `max_batch_size`, so the admitted concurrency doubles. What each instance may claim
    depends on the weights' size and on the order the instances load in, which Kiln does not
    know, so it refuses rather than write two full claims. In-flight batching already serves many
    requests concurrently from one instance; scale out with more GPUs, MIG instances or units.
    """

    code = "K607"
    name = "multiple-instances"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            n = m.serving.instances
            # only where the runtime runs instances (elsewhere K812 refuses the setting)
            if n > 1 and serving_runtimes.get(m.serving.runtime).honours("instances", ctx.target):
                yield ctx.diag(self, _mpath(name, "serving", "instances"),
                               f"model {name!r}: {n} Triton instances per serving unit would each load the weights "
                               f"and claim kv_cache_memory_fraction {m.runtime.kv_cache_memory_fraction} of the "
                               "same GPU(s), and each admit max_batch_size requests (tensorrtllm_backend#274)",
                               help="keep instances: 1 (in-flight batching serves concurrent requests); add GPUs, "
                                    "MIG instances or serving units to scale out")


class StreamTextOnEngine(_KernelCheck):
    """`serving.stream_text` on the engine target.

    `stream_text` chooses what a streamed response of the llmapi target's Triton model holds: the
    whole text so far (`cumulative`, as TensorRT-LLM's own LLM-API model streams it) or what the
    response adds (`delta`). The engine target's ensemble and BLS stream what each response adds,
    as tensorrtllm_backend's own models do, and have no such choice: the setting would be ignored.
    Remove it, or use `target: llmapi`.
    """

    code = "K612"
    name = "stream-text-on-engine"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "engine":
            return
        for name, m in sorted(ctx.models()):
            if "stream_text" in m.serving.model_fields_set:
                yield ctx.diag(self, _mpath(name, "serving", "stream_text"),
                               f"model {name!r}: serving.stream_text is an llmapi-target setting; the engine "
                               "target's ensemble and BLS always stream what each response adds", key=True,
                               help="remove stream_text, or use `target: llmapi`")


class FlashinferBackend(_KernelCheck):
    """A FlashInfer attention backend (`flashinfer`, `flashinfer_star_attention`).

    TensorRT-LLM uses these backends only when the `flashinfer` Python package is installed in the
    serving image; otherwise it falls back to the TRTLLM backend without an error, and the
    deployment runs with kernels other than the ones the spec names. Make sure the image ships
    flashinfer, or use the default `trtllm`.
    """

    code = "K608"
    name = "flashinfer-backend"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target == "engine":
            return  # refused there (K604)
        for name, m in ctx.models():
            a = m.kernels.attention
            if a in ("flashinfer", "flashinfer_star_attention"):
                yield ctx.diag(self, _mpath(name, "kernels", "attention"),
                               f"model {name!r}: attention backend {a!r} needs the flashinfer package in the "
                               "serving image; without it TensorRT-LLM silently falls back to trtllm",
                               help="make sure the image installs flashinfer, or use attention: trtllm")


def _lengths(value) -> list[int]:
    return [value] if isinstance(value, int) else [b.tokens for b in value]


class WorkloadPromptTooLong(_KernelCheck):
    """The workload has prompts longer than `limits.max_input_len`.

    TensorRT-LLM refuses a request whose prompt is longer than max_input_len, so the traffic the
    spec describes would partly fail. Raise max_input_len (and max_seq_len), or correct the
    workload.
    """

    code = "K609"
    name = "workload-prompt-too-long"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            if m.workload is None:
                continue
            longest = max(_lengths(m.workload.input_tokens))
            if longest > m.limits.max_input_len:
                yield ctx.diag(self, _mpath(name, "workload", "input_tokens"),
                               f"model {name!r}: the workload has prompts of {longest} tokens, longer than "
                               f"limits.max_input_len {m.limits.max_input_len}; such requests are refused",
                               help=f"raise limits.max_input_len to at least {longest}")


class WorkloadLongerThanSequence(_KernelCheck):
    """The workload's prompt plus output is longer than `limits.max_seq_len`.

    Generation stops at max_seq_len, so the longest requests of the described traffic would be cut
    short; the capacity plan caps them at max_seq_len too.
    """

    code = "K610"
    name = "workload-longer-than-sequence"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            w = m.workload
            if w is None:
                continue
            longest = max(_lengths(w.input_tokens)) + max(_lengths(w.output_tokens))
            if longest > m.limits.max_seq_len and max(_lengths(w.input_tokens)) <= m.limits.max_input_len:
                yield ctx.diag(self, _mpath(name, "workload", "output_tokens"),
                               f"model {name!r}: the workload's longest requests need {longest} tokens, more than "
                               f"limits.max_seq_len {m.limits.max_seq_len}; their output is cut short",
                               help=f"raise limits.max_seq_len to {longest}, or shorten the workload")


class SequenceLongerThanContext(_KernelCheck):
    """`limits.max_seq_len` is longer than the model's context (its `max_position_embeddings`).

    Positions past the context the model was trained for (with its RoPE scaling, which the
    context length already includes) are outside what it has learned: output there degrades, and
    the KV cache is sized for sequences the model should not serve. Lower max_seq_len to the
    model's context, or serve a long-context variant of the model. (Only a max_seq_len the spec
    states is checked.)
    """

    code = "K614"
    name = "sequence-longer-than-context"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            arch = ctx.arch(name)
            context = arch.max_position if arch is not None else None
            stated = "max_seq_len" in m.limits.model_fields_set  # the default (2048) is not the team's choice
            if context and stated and m.limits.max_seq_len > context:
                yield ctx.diag(self, _mpath(name, "limits", "max_seq_len"),
                               f"model {name!r}: limits.max_seq_len {m.limits.max_seq_len:,} is longer than its "
                               f"context of {context:,} tokens (max_position_embeddings)",
                               help=f"set limits.max_seq_len to at most {context}")


class MoeBackendUnsupported(_KernelCheck):
    """The MoE backend does not run the recipe of the model's expert layers on this GPU.

    TensorRT-LLM's PyTorch backend runs routed experts with one of several fused MoE backends
    (`kernels.moe`, MoeConfig.backend; CUTLASS by default), and each implements its own set of
    quantization recipes per GPU generation: INT4 AWQ weight-only (W4A16) experts have no fused
    backend at all, MXFP4 experts with 16-bit activations (GPT-OSS) run on Hopper with TRITON or
    CUTLASS and on Blackwell with TRTLLM, FP8 block scales use DEEPGEMM or TRTLLM on Blackwell.
    Some models constrain it further: GPT-OSS's SwiGLU (alpha, beta, clamp limit, expert biases)
    is only accepted by CUTLASS, TRITON and TRTLLM, and NVFP4 GPT-OSS experts run with TRTLLM
    only. A backend that lacks a recipe falls back or fails when the server starts; the format
    table (formats.json, `moe`) lists who runs what, with sources.
    """

    code = "K611"
    name = "moe-backend-unsupported"
    order = 61

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "llmapi":
            return  # engines bake the MoE plugin in at build time
        table = load_format_table()
        for p in served_pairs(ctx):
            rm, arch = p.model, p.model.arch
            if arch is None or not arch.is_moe:
                continue
            sm = p.gpu.sm_version
            chosen = rm.spec.kernels.moe
            backend = (chosen or table.default_moe_backend).upper()
            activation = getattr(arch, "moe_activation", None)
            uses = [(("models", p.name, "quantization", "weights"), rm.formats.recipe, "its experts")]
            for o in rm.formats.overrides:
                if o.recipe is not None and rm.spec.quantization.overrides[o.index].weights is not None \
                        and expert_module_patterns_hit(rm, o.match):
                    uses.append((("models", p.name, "quantization", "overrides", o.index, "weights"), o.recipe,
                                 f"experts matching {o.match!r}"))
            for path, recipe, what in uses:
                if recipe is None:
                    continue  # K306
                v = table.moe_support(recipe, backend, sm, activation)
                if v:
                    continue
                others = [b for b in table.moe_backends_for(recipe, sm, activation) if b != "VANILLA"]
                act = f" with {arch.name}'s {activation} activation" if activation and activation != "swiglu" else ""
                where = ("models", p.name, "kernels", "moe") if chosen else path
                cell = recipe.moe[backend]
                runs = f"; {backend} runs it on {sm_list(cell.sms)}" if cell.sms and not cell.allows(sm) else ""
                help = (f"set `kernels: {{moe: {others[0].lower()}}}`" + (
                        f" (also: {', '.join(o.lower() for o in others[1:])})" if others[1:] else "")
                        if others else "no fused MoE backend runs this recipe here: choose another weight format "
                                       "for the experts (the format table's moe rows list who runs what)")
                yield ctx.diag(self, where,
                               f"model {p.name!r}: the {backend} MoE backend"
                               f"{' (the default)' if not chosen else ''} does not run {recipe.label} for {what}"
                               f"{act} on {p.where}{runs}" + (f" ({v.note})" if v.note else ""),
                               help=help, notes=p.notes() + verdict_notes(table, v, "this MoE support fact"))


class BatcherSettingOnLlmapi(_KernelCheck):
    """A serving setting the model's runtime honours on another target only (a warning).

    `serving.max_queue_delay_us` is the delay of Triton's dynamic batcher, which the engine
    target's models have. The llmapi target's Triton model has none: it is decoupled with
    `max_batch_size: 0`, every request reaches it at once, and TensorRT-LLM's executor batches
    requests in flight, so there is no batching delay to wait and the setting has no effect. (Its
    queue settings, `max_queue_size` and `queue_timeout_ms`, do: the model applies them itself.)
    Remove it, or build the engine target. What each runtime ignores on which target is in its
    data file (compiler/runtimes/data, `ignores_on_target`, with the source).
    """

    code = "K613"
    name = "setting-without-effect-on-target"
    severity = Severity.WARNING
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in sorted(ctx.models()):
            rt = serving_runtimes.get(m.serving.runtime)
            for ignored in rt.ignored_on_target(ctx.target):
                if ignored.setting in m.serving.model_fields_set:
                    yield ctx.diag(self, ("models", name, "serving", ignored.setting),
                                   f"serving.{ignored.setting} of model {name!r} has no effect with {rt.name} on "
                                   f"the {ctx.target} target: {ignored.why}", key=True,
                                   help=f"remove `{ignored.setting}`")
