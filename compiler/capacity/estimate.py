"""Performance estimate of a serving unit: output tokens/s, TTFT and TPOT, from a step model whose
efficiency coefficients are fitted to published measurements (estimate_fit.py, data in
data/estimate_coefficients.json).

The roofline (roofline.py) is the ceiling: it charges a decode step only the bytes it must stream.
The estimate charges the same bytes and adds what the roofline leaves out, each term as seconds at the
GPU's peak, so that one coefficient per term turns it into time:

    time = c_memory * memory_s + c_compute * compute_s + c_experts * experts_s + c_link * link_s
           + c_calls * calls + c_step * steps + c_requests * requests + c_layers * layers
           + c_vector * vector_s

- memory_s: per decode step the weights touched (MoE: the experts the batch's tokens hit) plus the
  KV cache at each step's context, over HBM bandwidth: exactly the roofline's step, so with
  c_memory >= 1 the estimate never exceeds the ceiling. Steps beyond the decode steps (prefill that
  does not fit beside the decode tokens in max_num_tokens) stream the weights once more each.
- compute_s: 2 x active parameters per token over the tensor-core peak of the weights' precision,
  plus attention (4 x layers x heads x head_dim per token of context; causal prefill half of a
  square) over the peak of the KV cache's precision (attention_peak_flops);
  MoE: the routed experts' grouped GEMMs in whole tiles: a pass of T tokens routed top-k over E
  experts gives each hit expert m = T k / h tokens (h the distinct experts hit), computed in whole
  tiles of MOE_TILE_TOKENS, so few tokens per expert cost whole tiles (expert_gemm_flops).
- experts_s (MoE): those tiled expert FLOPs again, for what grouped GEMMs lose beyond a dense
  GEMM's efficiency (c_experts >= 0: never faster than a dense GEMM; zero for dense models).
- link_s: tensor-parallel all-reduces (two per layer per step, a ring moving 2 (tp-1)/tp of the
  hidden-state bytes; attention DP with MoE: a gather and a reduce-scatter of all ranks' tokens
  around each MoE layer, nothing for attention; exchange_terms) over one direction of the GPU's
  interconnect; `calls` counts them, for the latency each one costs.
- steps: per-iteration overhead (launches, synchronisation); requests: per request per iteration
  (the executor's scheduling, sampling and response work for each request in flight on a rank), so
  the per-pass cost at a small batch is not the one fitted at full load; layers: per layer per
  pass (each kernel's launch, ramp and tail, absolute time that no peak shortens).
- vector: the work off the tensor cores (norms and residual adds on every rank's replicated hidden
  states, activations, quantizing activations for FP8/FP4 GEMMs, RoPE), tokens x layers x hidden per
  rank, over SMs x clock (sm_count): it scales with the SMs, not with the tensor-core peak.

Why those three do not scale with the peaks: fitted on Hopper FP8 alone and priced at Blackwell
FP4's peaks, a step model whose every term scaled with the peaks overestimated Blackwell by 35%
(the leave-one-generation-out fold): the GEMMs run 4.5x faster there, the SMs 1.1x. Attention is
priced at the KV cache's precision (an NVFP4 checkpoint's attention runs FP8 FMHA), not the weights'.

A cohort of B requests in flight, each I prompt and O output tokens, takes max(O, B (I + O) /
max_num_tokens) steps: the scheduler packs prefill chunks beside the B decode tokens of a step up
to max_num_tokens, so prefill adds steps only when it does not fit. Output tokens/s at saturation is
B O / time; TPOT is the time per step; TTFT the prefill of one prompt in max_num_tokens chunks
beside the running batch.

The batch B the scheduler reaches is its admission (admission.py, a port of TensorRT-LLM's capacity
scheduler: GUARANTEED_NO_EVICT reserves each request to completion, MAX_UTILIZATION what it holds
now), per attention-DP rank and capped by max_batch_size per rank (`concurrency_bound`). Under
attention DP, max_num_tokens is a rank's: prompts are packed per rank.
All functions are pure; nothing here reads files (estimate_data.py does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from compiler.capacity.memory import Override
from compiler.capacity.roofline import decode_ceiling, expected_experts_hit
from compiler.catalog.models import estimate_params
from compiler.catalog.types import GpuSpec, ModelArch

FEATURES = ("memory", "compute", "experts", "link", "calls", "steps", "requests", "layers", "vector")
#: Coefficients with a floor: a term cannot run faster than its peak (c >= 1), which keeps the
#: estimate at or under the roofline (memory) and under the tensor-core peak (compute).
FLOORS = {"memory": 1.0, "compute": 1.0, "experts": 0.0, "link": 0.0, "calls": 0.0, "steps": 0.0, "requests": 0.0,
          "layers": 0.0, "vector": 0.0}
#: Tokens per M tile of the grouped GEMMs that run the experts: an expert that receives m tokens
#: computes ceil(m / tile) whole tiles (CUTLASS grouped GEMM tiles of TensorRT-LLM's MoE runner,
#: cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm: CTA shapes 128 x N on Hopper and Blackwell).
MOE_TILE_TOKENS = 128
ACTIVATION_BYTES = 2  # hidden states move between ranks in BF16


#: Dense BF16 tensor-core FLOPs per SM per clock by compute capability major (NVIDIA's architecture
#: whitepapers: A100 1,024 FP16 FMA/clock/SM; Ada's SM half that; H100 twice A100 clock for clock;
#: Blackwell twice Hopper): how an SM count the catalog lacks follows from the BF16 peak.
BF16_FLOPS_PER_SM_CLOCK = {8: 2048, 9: 4096, 10: 8192, 12: 2048}
#: Ada (8.9) runs half GA100's rate per SM (the L40S: 142 SMs x 1,024 x 2.52 GHz = 366 TFLOPS, dense 362)
ADA_BF16_FLOPS_PER_SM_CLOCK = 1024


def sm_count(gpu: GpuSpec) -> float:
    """The GPU's SMs, or where the catalog does not give them (GB200, GB300: 'UNVERIFIED'), its BF16
    peak over the generation's BF16 FLOPs per SM per clock at its top graphics clock."""
    if gpu.sms:
        return float(gpu.sms)
    major, minor = gpu.compute_capability
    per = ADA_BF16_FLOPS_PER_SM_CLOCK if (major, minor) == (8, 9) else BF16_FLOPS_PER_SM_CLOCK.get(major, 4096)
    return (gpu.tflops.get("bf16") or 1.0) * 1e12 / (per * gpu.graphics_mhz[1] * 1e6)


def compute_precision(weights_fmt: str) -> str:
    """The tensor-core peak a format's matmuls run at (gpu.tflops key): FP8 and FP4 formats run at
    their own rate; weight-only formats (INT4 AWQ/GPTQ, INT8 weight-only) dequantize to BF16."""
    if weights_fmt in ("fp8", "fp8_block", "fp8_rowwise", "mxfp8"):
        return "fp8"
    if weights_fmt in ("nvfp4", "mxfp4"):
        return "fp4"
    return "bf16"


@dataclass(frozen=True)
class Shape:
    """What one estimate is asked about (one serving unit, one traffic shape)."""

    arch: ModelArch
    gpu: GpuSpec
    weights_fmt: str
    kv_fmt: str
    tp: int = 1
    pp: int = 1
    attention_dp: bool = False
    exclude: tuple[str, ...] = ()
    overrides: tuple[Override, ...] = ()
    block_size: int | None = None
    bandwidth_tbps: float | None = None  # per GPU (a MIG instance's share); None: the GPU's
    derate: float = 1.0
    max_num_tokens: int = 8192
    compute_share: float = 1.0  # a MIG instance's share of the SMs

    @property
    def link_gbps(self) -> float:
        """One direction of one GPU's interconnect, GB/s: NVLink, else PCIe of the GPU's generation."""
        return self.gpu.link_gbps

    @property
    def ranks(self) -> int:
        """Attention-DP ranks, each with its own requests (1 without attention DP)."""
        return self.tp if self.attention_dp else 1

    @property
    def peak_flops(self) -> float:
        prec = compute_precision(self.weights_fmt)
        if self.weights_fmt == "mxfp4":
            # TensorRT-LLM runs MXFP4 experts with MXFP8 activations where the GPU has FP4 tensor
            # cores (W4A8, the FP8 rate) and dequantizes them to BF16 elsewhere (W4A16): its GPT-OSS
            # deployment guide (docs/source/deployment-guide, gpt-oss), 1.0 to 1.2
            prec = "fp8" if self.gpu.tflops.get("fp4") else "bf16"
        tf = self.gpu.tflops.get(prec) or self.gpu.tflops.get("bf16") or 1.0
        return tf * 1e12 * self.compute_share

    @property
    def vector_rate(self) -> float:
        """SM-cycles per second (SMs x the top graphics clock): what the work off the tensor cores
        runs at (norms, residual adds, activations, quantizing activations, RoPE, sampling). It
        grows far less from one generation to the next than the tensor-core peaks (H100 SXM -> B200:
        1.1x, against 2.3x at FP8 and 4.5x from Hopper FP8 to Blackwell FP4)."""
        return sm_count(self.gpu) * self.gpu.graphics_mhz[1] * 1e6 * self.compute_share

    @property
    def attention_peak_flops(self) -> float:
        """The tensor-core peak attention runs at: the KV cache's precision, never the weights'
        (an NVFP4 checkpoint's attention reads an FP8 KV cache and runs FP8 FMHA; a BF16 KV, BF16)."""
        prec = "fp8" if self.kv_fmt.startswith("fp8") and self.gpu.tflops.get("fp8") else "bf16"
        tf = self.gpu.tflops.get(prec) or self.gpu.tflops.get("bf16") or 1.0
        return tf * 1e12 * self.compute_share


@dataclass(frozen=True)
class Work:
    """Seconds at peak (and counts) per feature for a cohort of `batch` requests, and its steps."""

    terms: Mapping[str, float]
    batch: int
    output_tokens: float  # batch x mean output tokens
    steps: float
    ceiling_s: float  # the roofline's time for the same cohort (its decode steps)

    def time(self, coefficients: Mapping[str, float]) -> float:
        return sum(coefficients[k] * self.terms[k] for k in FEATURES)


def _active_params(arch: ModelArch) -> float:
    """Parameters one token multiplies through: active parameters less the embedding gather."""
    _, active = estimate_params(arch)
    return max(0.0, active - arch.vocab * arch.hidden)


def _attention_flops_per_context_token(arch: ModelArch) -> float:
    """Attention FLOPs one query token spends per token of context (QK^T and PV)."""
    if arch.mla is not None:
        dims = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        return 4.0 * arch.layers * arch.heads * dims
    return 4.0 * arch.layers * arch.heads * arch.head_dim


def expert_gemm_flops(arch: ModelArch, tokens_per_pass: float, passes: float) -> tuple[float, float]:
    """(FLOPs the routed experts' GEMMs need, FLOPs their whole tiles compute) over `passes` forward
    passes of `tokens_per_pass` tokens each (all ranks' tokens: the experts see every rank's).

    Each token goes to top_k of E experts; a pass of T tokens hits h = expected_experts_hit(E, k, T)
    experts with m = T k / h tokens each, and each hit expert computes ceil(m / tile) tiles."""
    if not arch.is_moe or tokens_per_pass <= 0 or passes <= 0:
        return 0.0, 0.0
    k = min(arch.experts_per_token or 1, arch.experts)
    width = arch.moe_intermediate or arch.intermediate
    per_token = 2.0 * (3 if arch.gated_mlp else 2) * arch.hidden * width * (arch.layers - arch.dense_layers)
    hit = expected_experts_hit(arch.experts, k, tokens_per_pass)
    m = tokens_per_pass * k / hit
    tiled = hit * MOE_TILE_TOKENS * math.ceil(m / MOE_TILE_TOKENS - 1e-9)
    return per_token * tokens_per_pass * k * passes, per_token * tiled * passes


def exchange_terms(s: Shape, tokens: float, steps: float) -> tuple[float, float]:
    """(bytes one GPU moves over its link, collective calls) for `tokens` tokens in `steps` passes.

    Tensor parallelism: two all-reduces per layer (attention and MLP), a ring moving 2 (tp-1)/tp of
    the hidden states. Attention DP with MoE: attention is local; around each MoE layer the ranks
    gather every rank's tokens and reduce-scatter the experts' outputs back, again 2 (tp-1)/tp of
    all ranks' hidden states (TensorRT-LLM's attention-DP MoE without all-to-all; an all-to-all
    moves less, so this is the dearer case); dense layers of an attention-DP unit move nothing."""
    if s.tp <= 1:
        return 0.0, 0.0
    ring = 2 * (s.tp - 1) / s.tp * tokens * s.arch.hidden * ACTIVATION_BYTES
    if s.attention_dp and s.arch.is_moe:
        per_pass = (s.arch.layers - s.arch.dense_layers) / s.pp
        return ring * per_pass, 2 * per_pass * steps
    reduces = 2 * s.arch.layers / s.pp
    return ring * reduces, reduces * steps


def cohort_steps(batch: int, mean_input: float, mean_output: float, max_num_tokens: int) -> float:
    """Forward passes for `batch` requests: their decode steps, or more when their prompts do not fit
    beside the decode tokens within max_num_tokens per pass."""
    return max(mean_output, batch * (mean_input + mean_output) / max(1, max_num_tokens))


def cohort_work(s: Shape, batch: int, mean_input: float, mean_output: float, decode_context: float) -> Work:
    """The terms of serving `batch` requests at once, each `mean_input` prompt and `mean_output`
    generated tokens, decode steps reading `decode_context` tokens of KV per sequence on average."""
    if batch < 1 or mean_output <= 0 or mean_input < 0:
        raise ValueError("batch >= 1, mean_output > 0 and mean_input >= 0 required")
    bw = (s.bandwidth_tbps if s.bandwidth_tbps is not None else s.gpu.bandwidth_tbps)
    ceiling = decode_ceiling(s.arch, weights_fmt=s.weights_fmt, bandwidth_tbps=bw, batch=batch,
                             context_len=math.ceil(decode_context), kv_fmt=s.kv_fmt, exclude=s.exclude,
                             overrides=s.overrides, block_size=s.block_size, tp=s.tp, pp=s.pp, derate=s.derate,
                             attention_dp=s.attention_dp)
    step_s = ceiling.step_ms / 1e3
    # max_num_tokens is per rank: under attention DP each rank packs its own requests' prompts
    steps = cohort_steps(math.ceil(batch / s.ranks), mean_input, mean_output, s.max_num_tokens)
    # extra passes (prefill that did not fit beside the decode tokens) stream the weights again
    extra = steps - mean_output
    weights_s = ceiling.weight_bytes_touched / (bw * 1e12 * s.derate)
    memory = mean_output * step_s + extra * weights_s
    gpus = s.tp * s.pp
    tokens = batch * (mean_input + mean_output)
    attn = _attention_flops_per_context_token(s.arch)
    flops = 2.0 * _active_params(s.arch) * tokens
    attn_flops = (attn * batch * mean_output * decode_context  # decode: each step reads its context
                  + attn * batch * mean_input * mean_input / 2)  # causal prefill
    real, tiled = expert_gemm_flops(s.arch, tokens / steps, steps)
    moved, calls = exchange_terms(s, tokens, steps)
    return Work(terms={"memory": memory, "compute": ((flops - real + tiled) / s.peak_flops
                                                     + attn_flops / s.attention_peak_flops) / gpus,
                       "experts": tiled / gpus / s.peak_flops,
                       "link": moved / (s.link_gbps * 1e9), "calls": calls, "steps": steps,
                       "requests": steps * math.ceil(batch / s.ranks), "layers": steps * s.arch.layers / s.pp,
                       "vector": tokens * s.arch.layers * s.arch.hidden / (s.ranks * s.pp) / s.vector_rate},
                batch=batch, output_tokens=batch * mean_output, steps=steps, ceiling_s=mean_output * step_s)


def prefill_work(s: Shape, prompt: float, running: int, decode_context: float,
                 prompt_len: float | None = None) -> Work:
    """The terms of `prompt` prompt tokens' prefill (prompts of `prompt_len` tokens each, one prompt
    by default), in max_num_tokens chunks each shared with a decode step of `running` other
    sequences (which the chunks wait for): time to first token without queueing."""
    budget = max(1, s.max_num_tokens - math.ceil(running / s.ranks))
    chunks = max(1, math.ceil(prompt / budget))
    bw = (s.bandwidth_tbps if s.bandwidth_tbps is not None else s.gpu.bandwidth_tbps)
    ceiling = decode_ceiling(s.arch, weights_fmt=s.weights_fmt, bandwidth_tbps=bw, batch=max(1, running),
                             context_len=math.ceil(decode_context) if running else 0, kv_fmt=s.kv_fmt,
                             exclude=s.exclude, overrides=s.overrides, block_size=s.block_size, tp=s.tp, pp=s.pp,
                             derate=s.derate, attention_dp=s.attention_dp)
    gpus = s.tp * s.pp
    attn = _attention_flops_per_context_token(s.arch)
    tokens = prompt + running * chunks
    each = prompt if prompt_len is None else prompt_len
    flops = 2.0 * _active_params(s.arch) * tokens
    attn_flops = attn * (prompt * each / 2 + running * chunks * decode_context)
    moved, calls = exchange_terms(s, tokens, chunks)
    real, tiled = expert_gemm_flops(s.arch, tokens / chunks, chunks)
    terms = {"memory": chunks * ceiling.step_ms / 1e3,
             "compute": ((flops - real + tiled) / s.peak_flops + attn_flops / s.attention_peak_flops) / gpus,
             "experts": tiled / gpus / s.peak_flops, "link": moved / (s.link_gbps * 1e9),
             "calls": calls, "steps": float(chunks), "requests": float(chunks) * (1 + math.ceil(running / s.ranks)),
             "layers": float(chunks) * s.arch.layers / s.pp,
             "vector": tokens * s.arch.layers * s.arch.hidden / (s.ranks * s.pp) / s.vector_rate}
    return Work(terms=terms, batch=1, output_tokens=1.0, steps=float(chunks), ceiling_s=0.0)


# --- figures -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """The model's figures at one concurrency (p50: the model has no tail)."""

    concurrency: int
    output_tokens_per_s: float
    ttft_ms: float
    tpot_ms: float
    ceiling_tokens_per_s: float  # the roofline at the same batch and context


def point(s: Shape, coefficients: Mapping[str, float], concurrency: int, mean_input: float, mean_output: float,
          decode_context: float) -> Point:
    w = cohort_work(s, concurrency, mean_input, mean_output, decode_context)
    t = w.time(coefficients)
    ttft = prefill_work(s, mean_input, concurrency - 1, decode_context).time(coefficients)
    return Point(concurrency=concurrency, output_tokens_per_s=w.output_tokens / t, ttft_ms=ttft * 1e3,
                 tpot_ms=t / w.steps * 1e3, ceiling_tokens_per_s=w.output_tokens / w.ceiling_s)


def concurrency_points(limit: int) -> list[int]:
    """Powers of two up to `limit`, and `limit` itself."""
    out, c = [], 1
    while c < limit:
        out.append(c)
        c *= 2
    out.append(max(1, limit))
    return out
