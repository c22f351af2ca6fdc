"""Capacity figures per serving unit, shared by the memory checks and `kiln plan`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.catalog.types import WEAK_STATUSES, GpuSpec, ModelArch

from .admission import GUARANTEED_NO_EVICT, MAX_UTILIZATION, admitted
from .memory import UnitCapacity, gpu_memory_bytes, mig_bandwidth_tbps, unit_capacity
from .roofline import DecodeCeiling, cost_per_million_tokens, decode_ceiling, mig_gpu_share
from .workload import TrafficShape

GiB = float(1 << 30)
#: Assumed bandwidth left to one MIG instance while its neighbours are busy (a planning assumption).
SHARED_GPU_DERATE = 0.9
#: Architecture facts the sizing reads (parameter totals are recomputed from the dimensions).
_SIZING_FACTS = frozenset({"layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "moe_intermediate",
                           "vocab", "experts", "experts_per_token", "tied_embeddings", "sliding_window", "mla"})


@dataclass(frozen=True)
class Sizing:
    """What the figures of one unit depend on besides the hardware and the architecture; the
    analysis (compiler/ir) builds it from the model's effective formats and spec."""

    weights_fmt: str  # storage format of the quantized linears (the dtype when not quantized)
    kv_fmt: str  # storage format of the KV cache
    exclude: tuple[str, ...]
    overrides: tuple[tuple[str, str | None, int | None], ...]  # (glob, format or None = unquantized, block)
    block_size: int | None
    tp: int
    pp: int
    attention_dp: bool
    max_seq_len: int
    max_batch_size: int
    max_num_tokens: int
    kv_cache_memory_fraction: float
    tokens_per_block: int
    reserves_whole_request: bool  # GUARANTEED_NO_EVICT: a request's whole length is reserved at admission
    workload: TrafficShape | None = None
    transfer_buffer_tokens: int = 0  # a disaggregated server's KV-transfer buffer (max_tokens_in_buffer)
    ep: int = 1  # expert parallelism (moe_tp = tp / ep: how the experts' FFN width is split)

    @property
    def quant(self) -> dict:
        return {"weights_fmt": self.weights_fmt, "kv_fmt": self.kv_fmt, "exclude": self.exclude,
                "overrides": self.overrides, "block_size": self.block_size}


@dataclass(frozen=True)
class UnitFigures:
    unit_id: str
    host: str
    model: str
    gpu: str
    slice: str  # "3g.90gb", "1 GPU" or "tp4 x pp1 (4 GPUs)"
    gpus: int  # physical GPUs (1 for a MIG instance)
    capacity: UnitCapacity
    decode: DecodeCeiling | None  # at batch 1 and at the reachable batch
    cost_per_mtok: float | None  # at the reachable batch, when a price is given
    weak_facts: tuple[str, ...]  # facts this rests on that are inferred or unverified
    assumptions: tuple[str, ...] = ()  # what the decode figure and the reserve assume
    # sequences the KV pool holds at once for the workload (at max_seq_len without one): the most
    # concurrency memory allows, which bounds `kiln tune`'s search and is compared with its result
    concurrency_bound: int = 0
    estimate: dict | None = None  # estimate_unit.figures_estimate: throughput, TTFT, TPOT with intervals


def unit_figures(unit, sizing: Sizing, arch: ModelArch, gpu: GpuSpec, price_per_gpu_hour: float | None) -> UnitFigures:
    profile = unit.mig.profile if unit.mig is not None else None
    tp, pp = (1, 1) if profile is not None else (sizing.tp, sizing.pp)
    adp = sizing.attention_dp and tp > 1
    q = sizing.quant
    cap = unit_capacity(arch, gpu_memory_bytes(gpu, profile), tp=tp, pp=pp, max_seq_len=sizing.max_seq_len,
                        max_batch_size=sizing.max_batch_size, max_num_tokens=sizing.max_num_tokens,
                        kv_cache_memory_fraction=sizing.kv_cache_memory_fraction,
                        tokens_per_block=sizing.tokens_per_block, attention_dp=adp,
                        transfer_buffer_tokens=sizing.transfer_buffer_tokens, ep=sizing.ep if profile is None else 1,
                        **q)
    if profile is not None:
        bw = mig_bandwidth_tbps(gpu, profile)
        derate = SHARED_GPU_DERATE if unit.instances_on_gpu > 1 else 1.0
        share = mig_gpu_share(gpu, profile)
        slice_name, gpus = profile.name, 1
    else:
        bw, derate, share = gpu.bandwidth_tbps, 1.0, float(len(unit.gpu_indexes))
        gpus = len(unit.gpu_indexes)
        slice_name = "1 GPU" if gpus == 1 else f"tp{tp} x pp{pp} ({gpus} GPUs)" + (" attention-DP" if adp else "")
    decode = None
    cost = None
    ranks = tp if adp else 1
    w = sizing.workload
    if w is None:
        context = float(sizing.max_seq_len)
        concurrent = cap.max_sequences
        assumptions = [f"decode: every sequence at max_seq_len {sizing.max_seq_len:,} (no workload in the spec)"]
    else:
        context = min(w.decode_context, float(sizing.max_seq_len))
        concurrent = admitted_sequences(cap, sizing, w)
        assumptions = [f"decode: mean context {context:,.0f} tokens per sequence for {w.describe()}"]
    batch = max(1, min(ranks * sizing.max_batch_size, concurrent))
    if cap.fits and not arch.encoder_only:
        decode = decode_ceiling(arch, bandwidth_tbps=bw, batch=batch, context_len=math.ceil(context), tp=tp, pp=pp,
                                derate=derate, attention_dp=adp, **q)
        if price_per_gpu_hour is not None and decode.tokens_per_s_at_batch > 0:
            cost = cost_per_million_tokens(price_per_gpu_hour, share, decode.tokens_per_s_at_batch)
    if cap.reserve:
        assumptions.append("reserve: " + " + ".join(f"{t.name} {size(t.bytes)} ({t.derivation})" for t in cap.reserve))
    assumptions.append(f"KV pool: {sizing.kv_cache_memory_fraction:g} of memory - weights - reserve, in blocks of "
                       f"{sizing.tokens_per_block} tokens" + (f", one pool per attention-DP rank ({ranks})" if adp else ""))
    weak = []
    if profile is not None and profile.memory_mib is None:
        weak.append(f"{profile.name} memory (estimated from its memory slices)")
    for fact in ("bandwidth_tbps", "memory_mib"):
        if gpu.status_of(fact) in WEAK_STATUSES:
            weak.append(f"{gpu.name} {fact} ({gpu.status_of(fact)})")
    arch_weak = sorted(k for k, v in arch.status.items() if v in WEAK_STATUSES and k in _SIZING_FACTS)
    if arch_weak:
        weak.append(f"{arch.name} {', '.join(arch_weak)} ({arch.status[arch_weak[0]]})")
    return UnitFigures(unit.id, unit.host, unit.model, gpu.name, slice_name, gpus, cap, decode, cost, tuple(weak),
                       tuple(assumptions), concurrency_bound=concurrent if cap.fits else 0)


def admitted_sequences(cap, sizing: Sizing, w) -> int:
    """Requests the scheduler keeps in flight for the workload, memory alone limiting them (the
    capacity scheduler's admission, admission.py; max_batch_size is applied by the caller)."""
    if cap.kv_bytes_per_token == 0:
        return cap.max_sequences
    policy = GUARANTEED_NO_EVICT if sizing.reserves_whole_request else MAX_UTILIZATION
    held_output = w.held_tokens(sizing.reserves_whole_request) - w.mean_input
    return admitted(policy, blocks_per_rank=cap.blocks_in_pool, tokens_per_block=cap.tokens_per_block,
                    mean_input=w.mean_input, held_output=held_output, max_num_requests=1 << 30, ranks=cap.ranks,
                    window=float(sizing.max_seq_len)).total


def size(x: float) -> str:
    """Bytes for people: MiB below a GiB, else GiB."""
    return f"{x / (1 << 20):,.0f} MiB" if abs(x) < GiB else gib(x)


def gib(x: float) -> str:
    return f"{x / GiB:,.1f} GiB" if math.isfinite(x) else "n/a"


def gib_apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` in GiB with as many decimals as it takes to tell them apart (up to 3, then MiB,
    then bytes): a message comparing "0.5 GiB" with "0.5 GiB" says nothing."""
    if not (math.isfinite(a) and math.isfinite(b)) or a == b:
        return gib(a), gib(b)
    for places in (1, 2, 3):
        pa, pb = f"{a / GiB:,.{places}f} GiB", f"{b / GiB:,.{places}f} GiB"
        if pa != pb:
            return pa, pb
    pa, pb = f"{a / (1 << 20):,.1f} MiB", f"{b / (1 << 20):,.1f} MiB"
    return (pa, pb) if pa != pb else (f"{a:,.0f} bytes", f"{b:,.0f} bytes")
