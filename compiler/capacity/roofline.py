"""Decode-throughput ceiling of a serving unit and the cost it implies.

Memory-bandwidth roofline (models.md s5, derived, not measured): a decode step cannot be faster
than streaming the weights it touches plus the KV cache it reads, over the HBM bandwidth of the
GPUs that share the work. Compute, communication and kernel efficiency are ignored, so real
throughput is lower; the figure is an upper bound for "can this deployment meet its target".

Assumptions:
- `derate` scales bandwidth (1.0 for a whole GPU; a caller may pass e.g. 0.9 when other MIG
  instances on the same GPU are busy). It is a planning assumption, not a measured figure.
- Pipeline parallelism is credited with perfect overlap: min(pp, batch) micro-batches in flight,
  so a step takes as long as one micro-batch's pass through all stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from compiler.capacity.memory import Override, WeightBreakdown, kv_bytes_per_token, weight_bytes
from compiler.catalog.types import GpuSpec, MigProfile, ModelArch


@dataclass(frozen=True)
class DecodeCeiling:
    tokens_per_s_batch1: float
    tokens_per_s_at_batch: float
    batch: int
    step_ms: float  # at `batch`
    step_ms_batch1: float
    weight_bytes_touched: float  # per GPU per step (per micro-batch pass under PP) at `batch`
    kv_bytes_read: float  # per GPU, same pass


def expected_experts_hit(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts one layer touches for `tokens` tokens routed uniformly, top_k each."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    k = min(top_k, experts)
    return experts * (1 - (1 - k / experts) ** tokens)


def weights_touched(arch: ModelArch, w: WeightBreakdown, tokens: float) -> float:
    """Weight bytes one GPU streams for a forward pass over `tokens` decode tokens."""
    touched = w.total_bytes
    if not arch.tied_embeddings:
        touched -= w.embedding_bytes  # rows are gathered; a tied table is still read by lm_head
    if arch.is_moe and w.expert_bytes:
        hit = expected_experts_hit(arch.experts, arch.experts_per_token or 1, tokens)
        touched -= w.expert_bytes * (1 - hit / arch.experts)
    return touched


def decode_ceiling(
    arch: ModelArch,
    *,
    weights_fmt: str,
    bandwidth_tbps: float,
    batch: int = 1,
    context_len: int = 0,
    kv_fmt: str = "auto",
    exclude: Sequence[str] = (),
    overrides: Sequence[Override] = (),
    block_size: int | None = None,
    unquantized_fmt: str = "bf16",
    tp: int = 1,
    pp: int = 1,
    derate: float = 1.0,
    attention_dp: bool = False,
) -> DecodeCeiling:
    """Tokens/s ceiling of a tp x pp unit; `bandwidth_tbps` is per GPU (or per MIG instance) in
    TB/s (1e12 B/s) and `context_len` the average tokens already in each sequence's context.

    Under attention DP the `batch` sequences are spread over the tp ranks; each rank streams its
    own full copy of the non-expert weights and the KV of its own sequences, and the experts it
    holds for the tokens of all ranks."""
    if batch < 1 or context_len < 0 or bandwidth_tbps <= 0 or derate <= 0:
        raise ValueError("batch >= 1, context_len >= 0, bandwidth_tbps > 0 and derate > 0 required")
    ranks = tp if attention_dp else 1
    # Per TP rank over the whole depth: stages hand off in turn, so the chain streams all of it.
    w = weight_bytes(
        arch, weights_fmt, exclude=exclude, overrides=overrides, block_size=block_size,
        unquantized_fmt=unquantized_fmt, tp=tp, pp=1, attention_dp=attention_dp,
    )
    kv_tp = 1 if attention_dp else tp
    kv_seq = kv_bytes_per_token(arch, kv_fmt, tp=kv_tp, seq_len=context_len) * context_len if context_len else 0.0
    bw = bandwidth_tbps * 1e12 * derate

    def step_s(b: int) -> tuple[float, float, float]:
        per_rank = math.ceil(b / ranks)
        micro = math.ceil(per_rank / min(pp, per_rank))
        wt, kv = weights_touched(arch, w, min(b, micro * ranks)), micro * kv_seq
        return (wt + kv) / bw, wt, kv

    t1, _, _ = step_s(1)
    tb, wt, kv = step_s(batch)
    return DecodeCeiling(
        tokens_per_s_batch1=1 / t1,
        tokens_per_s_at_batch=batch / tb,
        batch=batch,
        step_ms=tb * 1e3,
        step_ms_batch1=t1 * 1e3,
        weight_bytes_touched=wt,
        kv_bytes_read=kv,
    )


def mig_gpu_share(gpu: GpuSpec, profile: MigProfile) -> float:
    """Share of the GPU's price an instance carries: its compute slices out of 7."""
    return profile.compute_slices / (gpu.mig.compute_slices or 7)


def cost_per_million_tokens(price_per_gpu_hour: float, gpu_share: float, tokens_per_s: float) -> float:
    """Price of one million output tokens; `gpu_share` is GPUs in the unit (or a MIG fraction)."""
    if tokens_per_s <= 0:
        return math.inf
    return price_per_gpu_hour * gpu_share / 3600 / tokens_per_s * 1e6
