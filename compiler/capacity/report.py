"""Capacity figures per serving unit, shared by the memory checks and `kiln plan`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.catalog.types import WEAK_STATUSES, GpuSpec, ModelArch
from compiler.spec.models import UNQUANTIZED, Model

from .memory import UnitCapacity, gpu_memory_bytes, mig_bandwidth_tbps, unit_capacity
from .roofline import DecodeCeiling, cost_per_million_tokens, decode_ceiling, mig_gpu_share

GiB = float(1 << 30)
#: Assumed bandwidth left to one MIG instance while its neighbours are busy (a planning assumption).
SHARED_GPU_DERATE = 0.9
#: Architecture facts the sizing reads (parameter totals are recomputed from the dimensions).
_SIZING_FACTS = frozenset({"layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "moe_intermediate",
                           "vocab", "experts", "experts_per_token", "tied_embeddings", "sliding_window", "mla"})


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


def quant_args(model: Model) -> dict:
    """The quantization settings as the capacity functions take them."""
    q = model.quantization
    weights = q.weights if q.weights not in UNQUANTIZED else model.dtype
    overrides = tuple((o.match, (o.weights if o.weights not in UNQUANTIZED else None) if o.weights else weights,
                       o.block_size) for o in q.overrides)
    kv = q.kv_cache if q.kv_cache != "auto" else model.dtype
    return {"weights_fmt": weights, "kv_fmt": kv, "exclude": tuple(q.exclude), "overrides": overrides,
            "block_size": q.block_size}


def unit_figures(unit, model: Model, arch: ModelArch, gpu: GpuSpec, price_per_gpu_hour: float | None) -> UnitFigures:
    profile = unit.mig.profile if unit.mig is not None else None
    p = model.parallelism
    tp, pp = (1, 1) if profile is not None else (p.tp, p.pp)
    q = quant_args(model)
    lim = model.limits
    cap = unit_capacity(arch, gpu_memory_bytes(gpu, profile), tp=tp, pp=pp, max_seq_len=lim.max_seq_len,
                        max_batch_size=lim.max_batch_size, max_num_tokens=lim.max_num_tokens,
                        kv_cache_memory_fraction=model.runtime.kv_cache_memory_fraction, **q)
    if profile is not None:
        bw = mig_bandwidth_tbps(gpu, profile)
        derate = SHARED_GPU_DERATE if unit.instances_on_gpu > 1 else 1.0
        share = mig_gpu_share(gpu, profile)
        slice_name, gpus = profile.name, 1
    else:
        bw, derate, share = gpu.bandwidth_tbps, 1.0, float(len(unit.gpu_indexes))
        gpus = len(unit.gpu_indexes)
        slice_name = "1 GPU" if gpus == 1 else f"tp{tp} x pp{pp} ({gpus} GPUs)"
    decode = None
    cost = None
    batch = max(1, min(lim.max_batch_size, cap.max_sequences))
    if cap.fits and not arch.encoder_only:
        decode = decode_ceiling(arch, bandwidth_tbps=bw, batch=batch, context_len=lim.max_seq_len, tp=tp, pp=pp,
                                derate=derate, weights_fmt=q["weights_fmt"], kv_fmt=q["kv_fmt"],
                                exclude=q["exclude"], overrides=q["overrides"], block_size=q["block_size"])
        if price_per_gpu_hour is not None and decode.tokens_per_s_at_batch > 0:
            cost = cost_per_million_tokens(price_per_gpu_hour, share, decode.tokens_per_s_at_batch)
    weak = []
    if profile is not None and profile.memory_mib is None:
        weak.append(f"{profile.name} memory (estimated from its memory slices)")
    for fact in ("bandwidth_tbps", "memory_mib"):
        if gpu.status_of(fact) in WEAK_STATUSES:
            weak.append(f"{gpu.name} {fact} ({gpu.status_of(fact)})")
    arch_weak = sorted(k for k, v in arch.status.items() if v in WEAK_STATUSES and k in _SIZING_FACTS)
    if arch_weak:
        weak.append(f"{arch.name} {', '.join(arch_weak)} ({arch.status[arch_weak[0]]})")
    return UnitFigures(unit.id, unit.host, unit.model, gpu.name, slice_name, gpus, cap, decode, cost, tuple(weak))


def gib(x: float) -> str:
    return f"{x / GiB:,.1f} GiB" if math.isfinite(x) else "n/a"
