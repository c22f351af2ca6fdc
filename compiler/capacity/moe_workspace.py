"""The memory an MoE layer takes while TensorRT-LLM profiles the forward pass that sizes its KV cache.

The PyTorch backend sizes the KV cache from the peak of one profiling pass (tensorrt_llm/_torch/
pyexecutor/_util.py, KvCacheCreator: _create_dummy_context_requests fills max_num_tokens with
prompts and, under attention DP, gives every rank its own copy; configure_kv_cache_capacity then
takes free_gpu_memory_fraction of `total - peak`, _cal_max_memory). That pass runs each MoE layer
on every token its ranks hold, and with attention DP the layer gathers all ranks' tokens: the MoE
module's token budget is max_num_tokens x dp_size unless moe_config.max_num_tokens says less
(modules/fused_moe/fused_moe_cutlass.py, CutlassFusedMoE.__init__: "The maximum number of tokens in
MoE are multiplied by DP size when attention DP is enabled"; beyond it the layer runs in chunks).

What one call of the CUTLASS MoE runner asks for is ported from cpp/tensorrt_llm/kernels/
cutlass_kernels/moe_gemm/moe_kernels.cu, CutlassMoeFCRunner::getWorkspaceDeviceBufferSizes (the
1.0-1.2 line: fp8 block scaling, FP4 activation scales, min-latency mode), for the default path (no
LoRA, no AWQ smoothing, not min-latency): k x rows expanded rows; the GEMM inputs and outputs
overlap (permuted input, FC1 result and FC2 result share one buffer, the gated FC1 output and the
FC2 result the other); the routing's index arrays beside them. The GEMM tactic workspaces and the
TMA descriptors (a few MiB) are left out. Versions read: the two stored copies of _util.py agree on
the profiling pass and _cal_max_memory (a 1.1-era copy and a 2026 one), and fused_moe_cutlass.py's
default MoE token budget is the same in every stored copy; the 1.2.x tag itself was not readable
here (the snapshot is over the fetch limit), so 1.2 is inferred from the copies on both sides.

Pure arithmetic on the architecture.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.catalog.types import ModelArch

#: Bytes of one activation element the runner's input type T takes, by the weights' format
#: (moe_kernels.cu: dtype_size = 0.5 with FP4 activations, sizeof(T) otherwise; FP8 per-tensor
#: quantizes activations to FP8, FP8 block scaling takes BF16 in and quantizes per block inside).
ACTIVATION_BYTES = {"fp8": 1.0, "fp8_rowwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}
#: The unfused GEMM output type (UnfusedGemmOutputType): BF16 for every path Kiln builds.
GEMM_OUTPUT_BYTES = 2.0
#: Routing index arrays of k x rows entries, 4 B each: unpermuted and permuted source ids and
#: selected experts (4), and the permuted final scales (1).
INDEX_ARRAYS = 5
HIDDEN_BYTES = 2  # the hidden states between layers, BF16


@dataclass(frozen=True)
class MoeWorkspace:
    rows: int  # tokens through one MoE call of the profiling pass (all ranks' under attention DP)
    workspace_bytes: float  # the runner's workspace for those rows
    gathered_bytes: float  # attention DP: all ranks' hidden states in and out, and their router logits

    @property
    def total(self) -> float:
        return self.workspace_bytes + self.gathered_bytes


def moe_rows(max_num_tokens: int, tp: int, attention_dp: bool, moe_max_num_tokens: int | None = None) -> int:
    """Tokens one MoE call takes in the profiling pass: max_num_tokens x dp_size under attention DP
    (every rank's pass is max_num_tokens), at most moe_max_num_tokens when set (the layer chunks)."""
    rows = max_num_tokens * (tp if attention_dp else 1)
    return min(rows, moe_max_num_tokens) if moe_max_num_tokens else rows


def runner_workspace(arch: ModelArch, rows: int, weights_fmt: str, moe_tp: int = 1) -> float:
    """CutlassMoeFCRunner::getWorkspaceDeviceBufferSizes for `rows` tokens, summed (its
    calculateTotalWorkspaceSize aligns each buffer; the alignment is left out)."""
    if not arch.is_moe or rows <= 0:
        return 0.0
    k = min(arch.experts_per_token or 1, arch.experts)
    inter = (arch.moe_intermediate or arch.intermediate) / max(1, moe_tp)
    expanded = k * rows
    permuted_elems = expanded * arch.hidden
    interbuf_elems = expanded * inter
    dtype = ACTIVATION_BYTES.get(weights_fmt, 2.0)
    quantized = weights_fmt in ACTIVATION_BYTES  # mayHaveDifferentGEMMOutputType: FP8/FP4 activations
    glu_elems = 2 * interbuf_elems if arch.gated_mlp else (interbuf_elems if quantized else 0)
    permuted = permuted_elems * dtype
    glu = glu_elems * GEMM_OUTPUT_BYTES
    fc1 = interbuf_elems * dtype
    fc2 = expanded * arch.hidden * GEMM_OUTPUT_BYTES
    if weights_fmt == "fp8_block":
        # use_fp8_block_scaling: inputs = max(permuted, FC1 result, FC2 output), outputs = the gated FC1 output
        inputs = max(permuted_elems * 2.0, interbuf_elems * 2.0, permuted_elems * GEMM_OUTPUT_BYTES)
        outputs = (2 if arch.gated_mlp else 1) * interbuf_elems * GEMM_OUTPUT_BYTES
    else:
        inputs = max(permuted, fc2, fc1 if glu_elems else 0.0)
        outputs = max(glu, fc2, fc1) if glu_elems else fc1
    softmax = rows * arch.experts * 4 if (arch.experts & (arch.experts - 1) or arch.experts > 256) else 0
    return inputs + outputs + INDEX_ARRAYS * expanded * 4 + softmax


def moe_workspace(arch: ModelArch, *, max_num_tokens: int, weights_fmt: str, tp: int = 1, ep: int = 1,
                  attention_dp: bool = False, moe_max_num_tokens: int | None = None) -> MoeWorkspace:
    """What the largest MoE call of the profiling pass holds on one GPU. moe_tp = tp / ep (the
    experts' FFN width is split moe_tp ways, EP splits the experts, which the workspace does not
    see: it is sized for every expanded row). Under attention DP the gathered hidden states (in and
    out, BF16) and the router logits (FP32) of all ranks' tokens are held as well."""
    rows = moe_rows(max_num_tokens, tp, attention_dp, moe_max_num_tokens)
    moe_tp = max(1, tp // max(1, ep))
    ws = runner_workspace(arch, rows, weights_fmt, moe_tp)
    gathered = rows * (2 * arch.hidden * HIDDEN_BYTES + arch.experts * 4) if attention_dp and tp > 1 and arch.is_moe \
        else 0.0
    return MoeWorkspace(rows, ws, gathered)
