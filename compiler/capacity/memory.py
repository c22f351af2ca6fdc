"""Per-GPU memory of a serving unit: weights, KV cache per token, KV pool and sequence capacity.

Formulas are models.md section 2 and 5. All functions are pure; bytes are floats because block
scales and TP shards are fractional on average.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fnmatch import translate
from typing import Mapping, Sequence

from compiler.capacity.formats import bytes_per_param, kv_bytes_per_element, weight_format
from compiler.capacity.modules import EMBEDDING, LM_HEAD, ModuleGroup, inventory
from compiler.catalog.types import GpuSpec, MigProfile, ModelArch

MiB = 1 << 20
GiB = 1 << 30

#: TensorRT-LLM pages the KV cache in blocks of this many tokens (its default tokens_per_block).
TOKENS_PER_BLOCK = 32

# Reserve estimate (an estimate, not a measurement): live activations at the largest forward pass are
# taken as ACTIVATION_WIDTHS hidden-wide BF16 tensors per token of max_num_tokens, plus a CUDA context
# and workspace allowance of 1/64 of device memory clamped to [256 MiB, 1 GiB] (1 GiB on any full
# data-center GPU, less on small MIG instances).
ACTIVATION_WIDTHS = 8
CONTEXT_MIN, CONTEXT_MAX = 256 * MiB, 1 * GiB

Override = tuple[str, str | None, int | None]  # (glob, format or None = unquantized, block or None)


@dataclass(frozen=True)
class WeightBreakdown:
    """Weight bytes held by one GPU of the unit (the largest pipeline stage)."""

    total_bytes: float
    by_group: Mapping[str, float]  # group name template -> bytes
    by_format: Mapping[str, float]  # storage format -> bytes
    unquantized_bytes: float  # excluded, overridden to None, or not quantizable
    expert_bytes: float  # routed experts (for the MoE roofline)
    embedding_bytes: float  # input embedding table (gathered, not streamed, at decode)
    params: float  # parameters on this GPU
    stage: int  # index of the largest stage
    stage_bytes: tuple[float, ...]  # per-GPU bytes of every stage


@dataclass
class _Acc:
    total: float = 0.0
    params: float = 0.0
    unquantized: float = 0.0
    expert: float = 0.0
    embedding: float = 0.0
    by_group: dict[str, float] = field(default_factory=dict)
    by_format: dict[str, float] = field(default_factory=dict)


def stage_layers(layers: int, pp: int) -> list[range]:
    """Layer ranges per pipeline stage; the first `layers % pp` stages take one extra layer."""
    if pp < 1 or pp > max(layers, 1):
        raise ValueError(f"pp={pp} must be between 1 and the layer count ({layers})")
    base, extra = divmod(layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def _resolver(weights_fmt, exclude, overrides, block_size, unquantized_fmt):
    """Returns f(group, name) -> (format, block, unquantized?). Exclusion beats any override."""
    ex = [re.compile(translate(p)) for p in exclude]
    ov = [(re.compile(translate(p)), f, b) for p, f, b in reversed(list(overrides))]
    for _, f, _ in ov:
        if f is not None:
            weight_format(f)  # fail early on unknown names

    def resolve(group: ModuleGroup, name: str):
        if not group.is_linear:
            return unquantized_fmt, None, True
        if any(r.fullmatch(name) for r in ex):
            return unquantized_fmt, None, True
        for r, f, b in ov:  # reversed, so the first hit is the last matching override
            if r.fullmatch(name):
                return (unquantized_fmt, None, True) if f is None else (f, b, False)
        if group.quantizable:
            return weights_fmt, block_size, False
        return unquantized_fmt, None, True

    return resolve


def weight_bytes(arch: ModelArch, weights_fmt: str, *, exclude: Sequence[str] = (),
                 overrides: Sequence[Override] = (), block_size: int | None = None, unquantized_fmt: str = "bf16",
                 tp: int = 1, pp: int = 1, attention_dp: bool = False) -> WeightBreakdown:
    """Memoised front of `_weight_bytes` (the planner asks the same question for every replica,
    and a large MoE has ~10^5 expert modules to walk)."""
    key = (repr(arch), weights_fmt, tuple(exclude), tuple(tuple(o) for o in overrides), block_size,
           unquantized_fmt, tp, pp, attention_dp)
    hit = _WEIGHT_CACHE.get(key)
    if hit is None:
        hit = _weight_bytes(arch, weights_fmt, exclude=exclude, overrides=overrides, block_size=block_size,
                            unquantized_fmt=unquantized_fmt, tp=tp, pp=pp, attention_dp=attention_dp)
        if len(_WEIGHT_CACHE) > 256:
            _WEIGHT_CACHE.clear()
        _WEIGHT_CACHE[key] = hit
    return hit


_WEIGHT_CACHE: dict[tuple, "WeightBreakdown"] = {}


def _weight_bytes(arch: ModelArch, weights_fmt: str, *, exclude: Sequence[str], overrides: Sequence[Override],
                  block_size: int | None, unquantized_fmt: str, tp: int, pp: int,
                  attention_dp: bool) -> WeightBreakdown:
    """Weight bytes per GPU of a tp x pp unit (the defaults are the memoised front's, `weight_bytes`).

    Quantizable linears take `weights_fmt` (with `block_size`); routers, lm_head, embeddings and
    norms stay at `unquantized_fmt`. `overrides` = (glob, format or None, block or None) in order,
    last match wins; a None block means the format's default. `exclude` globs win over overrides.
    Embeddings sit on the first stage, the final norm and lm_head on the last.

    With `attention_dp` every rank holds whole copies of everything but the routed experts
    (attention, dense and shared MLPs, embedding, lm_head), which stay split over the tp ranks
    (TensorRT-LLM 1.2: Attention and the DeepSeek MLPs take tp_size 1 under attention DP).
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    weight_format(weights_fmt)
    weight_format(unquantized_fmt)
    stages = stage_layers(arch.layers, pp)
    stage_of = {i: s for s, r in enumerate(stages) for i in r}
    resolve = _resolver(weights_fmt, exclude, overrides, block_size, unquantized_fmt)
    bpp_cache: dict[tuple[str, int | None], float] = {}
    acc = [_Acc() for _ in stages]

    def add(a: _Acc, group: ModuleGroup, name: str, params: float) -> None:
        fmt, block, unq = resolve(group, name)
        key = (fmt, block)
        if key not in bpp_cache:
            bpp_cache[key] = bytes_per_param(fmt, block)
        b = params * bpp_cache[key]
        a.total += b
        a.params += params
        a.by_group[group.pattern] = a.by_group.get(group.pattern, 0.0) + b
        a.by_format[fmt] = a.by_format.get(fmt, 0.0) + b
        a.unquantized += b if unq else 0.0
        a.expert += b if group.is_expert else 0.0
        a.embedding += b if group.kind == EMBEDDING else 0.0

    groups = inventory(arch)
    for g in groups:
        per_gpu = g.params_per_gpu(tp if g.is_expert or not attention_dp else 1)
        if g.layers:
            for i in g.layers:
                for name in g.names_in_layer(i):
                    add(acc[stage_of[i]], g, name, per_gpu)
        else:
            stage = 0 if g.kind == EMBEDDING else len(stages) - 1
            add(acc[stage], g, g.pattern, per_gpu)
    if arch.tied_embeddings and not arch.encoder_only and pp > 1:
        # A tied lm_head shares the table on one GPU; the last stage needs its own copy.
        table = next(g for g in groups if g.kind == EMBEDDING)
        copy = ModuleGroup("lm_head", LM_HEAD, table.params_each)
        add(acc[-1], copy, "lm_head", copy.params_per_gpu(1 if attention_dp else tp))

    s = max(range(len(acc)), key=lambda k: acc[k].total)
    a = acc[s]
    return WeightBreakdown(
        total_bytes=a.total,
        by_group=a.by_group,
        by_format=a.by_format,
        unquantized_bytes=a.unquantized,
        expert_bytes=a.expert,
        embedding_bytes=a.embedding,
        params=a.params,
        stage=s,
        stage_bytes=tuple(x.total for x in acc),
    )


def kv_bytes_per_token(
    arch: ModelArch, kv_fmt: str, *, tp: int = 1, pp: int = 1, seq_len: int | None = None
) -> float:
    """KV-cache bytes per token on one GPU (the stage with the most layers).

    With `seq_len`, sliding-window layers are charged min(seq_len, window) / seq_len of a full
    layer (the average over a sequence of that length); without it every layer is full (the upper
    bound models.md tabulates). Under PP the window layers are assumed spread evenly over stages.
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if seq_len is not None and seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    elem = kv_bytes_per_element(kv_fmt)
    if arch.encoder_only or arch.layers == 0:
        return 0.0
    if arch.mla is not None:
        # One latent + RoPE key shared by all heads; every TP rank keeps the whole latent.
        per_layer = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
    else:
        per_layer = 2 * math.ceil(arch.kv_heads / tp) * arch.head_dim
    layers = float(arch.layers)
    windowed = min(arch.sliding_window_layers, arch.layers) if arch.sliding_window else 0
    if windowed and seq_len is not None:
        layers -= windowed * (1 - min(seq_len, arch.sliding_window) / seq_len)
    largest_stage = len(stage_layers(arch.layers, pp)[0])
    return layers * largest_stage / arch.layers * per_layer * elem


@dataclass(frozen=True)
class ReserveTerm:
    name: str
    bytes: float
    derivation: str  # how the figure is made, for the plan


def reserve_terms(arch: ModelArch, gpu_memory_bytes: float, max_num_tokens: int, *, weights_fmt: str = "bf16",
                  tp: int = 1, ep: int = 1, attention_dp: bool = False) -> tuple[ReserveTerm, ...]:
    """What TensorRT-LLM holds besides weights before it sizes the KV cache, per GPU. The pinned
    runtime (1.2, PyTorch backend) profiles one max_num_tokens forward pass (per attention-DP rank)
    and gives the KV cache free_gpu_memory_fraction of `total - (weights + peak activations + memory
    outside torch)` (_util.py KvCacheCreator.configure_kv_cache_capacity); the engine runtime gives
    it that fraction of what is free after the engine, its activation workspace (also sized by
    max_num_tokens) and its buffers are loaded. An MoE model's peak holds the MoE runner's workspace
    for all the tokens its layer takes in that pass (all ranks' under attention DP: moe_workspace.py,
    a port); the other run-time terms are estimated."""
    from compiler.capacity.moe_workspace import moe_workspace

    activations = max_num_tokens * arch.hidden * ACTIVATION_WIDTHS * 2
    context = min(CONTEXT_MAX, max(CONTEXT_MIN, gpu_memory_bytes / 64))
    terms = [
        ReserveTerm("activations", activations,
                    f"peak activations of a max_num_tokens pass: {max_num_tokens:,} tokens x hidden {arch.hidden:,} "
                    f"x {ACTIVATION_WIDTHS} x 2 B"),
        ReserveTerm("runtime", context,
                    "CUDA context, NCCL and library workspaces, CUDA graph pools: 1/64 of the memory, "
                    f"within {CONTEXT_MIN // MiB} MiB-{CONTEXT_MAX // GiB} GiB"),
    ]
    if arch.is_moe:
        moe = moe_workspace(arch, max_num_tokens=max_num_tokens, weights_fmt=weights_fmt, tp=tp, ep=ep,
                            attention_dp=attention_dp)
        whose = f"all {tp} attention-DP ranks' tokens, " if attention_dp and tp > 1 else ""
        terms.append(ReserveTerm(
            "moe-workspace", moe.total,
            f"the CUTLASS MoE runner's workspace for {moe.rows:,} tokens ({whose}top-{arch.experts_per_token} "
            f"of {arch.experts} experts)" + (", with the gathered hidden states and router logits"
                                             if moe.gathered_bytes else "")))
    return tuple(terms)


def reserve_estimate(arch: ModelArch, gpu_memory_bytes: float, max_num_tokens: int, **kw) -> float:
    """Activation + CUDA context/workspace allowance per GPU. An estimate; see reserve_terms."""
    return sum(t.bytes for t in reserve_terms(arch, gpu_memory_bytes, max_num_tokens, **kw))


def transfer_buffer_term(per_token: float, buffer_tokens: int, max_seq_len: int, tokens_per_block: int) -> ReserveTerm:
    """A disaggregated server's KV-transfer buffers, per GPU: a send and a receive buffer of
    max_tokens_in_buffer tokens (at most the sequence rounded up to a block) of its own KV cache,
    taken before the KV cache is sized (catalog/data/disaggregated.json transceiver.buffer_memory:
    CacheTransBufferManager::preAllocBufferSize)."""
    from compiler.catalog import disaggregated as facts

    count = facts.fact("transceiver", "buffer_memory")["buffers"]
    window = -(-max_seq_len // tokens_per_block) * tokens_per_block
    tokens = min(buffer_tokens, window)
    return ReserveTerm("kv-transfer", count * tokens * per_token,
                       f"{count} KV-transfer buffers (send, receive) of {tokens:,} tokens x {per_token:,.0f} B "
                       "of KV cache per token")


@dataclass(frozen=True)
class UnitCapacity:
    gpu_memory_bytes: float  # per GPU (or MIG instance)
    weight_bytes: float  # per GPU, largest stage
    reserve_bytes: float  # activations + workspace estimate
    headroom_bytes: float  # memory - weights - reserve; negative when it does not fit
    free_bytes: float  # max(0, headroom)
    kv_pool_bytes: float  # free * kv_cache_memory_fraction
    kv_bytes_per_token: float  # per GPU, averaged over max_seq_len
    tokens_in_pool: int
    blocks_in_pool: int
    blocks_per_sequence: int
    max_sequences: int  # concurrent sequences at max_seq_len (all attention-DP ranks together)
    fits: bool  # weights + reserve <= memory
    batch_reachable: bool  # max_batch_size sequences of max_seq_len fit in the pool (per rank under attention DP)
    weights: WeightBreakdown
    reserve: tuple[ReserveTerm, ...] = ()  # what the reserve is made of (empty when the caller gave it)
    tokens_per_block: int = TOKENS_PER_BLOCK
    ranks: int = 1  # attention-DP ranks, each with its own pool of this size and its own sequences


def unit_capacity(
    arch: ModelArch,
    gpu_memory_bytes: float,
    *,
    weights_fmt: str,
    kv_fmt: str = "auto",
    exclude: Sequence[str] = (),
    overrides: Sequence[Override] = (),
    block_size: int | None = None,
    tp: int = 1,
    pp: int = 1,
    max_seq_len: int,
    max_batch_size: int,
    max_num_tokens: int = 8192,
    kv_cache_memory_fraction: float = 0.9,
    activation_reserve_bytes: float | None = None,
    tokens_per_block: int = TOKENS_PER_BLOCK,
    attention_dp: bool = False,
    transfer_buffer_tokens: int = 0,
    ep: int = 1,
) -> UnitCapacity:
    """KV pool and sequence capacity of one GPU of a tp x pp unit.

    The pool is `kv_cache_memory_fraction` of the memory left after weights and the reserve, as
    TensorRT-LLM sizes it (reserve_terms). Sequences are counted in whole blocks of
    `tokens_per_block` tokens (KvCacheConfig.tokens_per_block). For a model with no KV cache
    (encoder-only) the pool does not limit anything: max_sequences = max_batch_size when the
    weights fit. Under attention DP each of the tp ranks keeps all KV heads of its own sequences
    (not a shard of everyone's), so the unit holds tp times the sequences of one pool.
    """
    if not 0.0 <= kv_cache_memory_fraction <= 1.0:
        raise ValueError(f"kv_cache_memory_fraction must be in [0, 1], got {kv_cache_memory_fraction}")
    if max_seq_len < 1 or max_batch_size < 0 or max_num_tokens < 0:
        raise ValueError("max_seq_len must be >= 1; max_batch_size and max_num_tokens >= 0")
    if tokens_per_block < 1:
        raise ValueError(f"tokens_per_block must be >= 1, got {tokens_per_block}")
    weights = weight_bytes(
        arch, weights_fmt, exclude=exclude, overrides=overrides, block_size=block_size, tp=tp, pp=pp,
        attention_dp=attention_dp,
    )
    mem = max(0.0, float(gpu_memory_bytes))
    per_token = kv_bytes_per_token(arch, kv_fmt, tp=1 if attention_dp else tp, pp=pp, seq_len=max_seq_len)
    terms: tuple[ReserveTerm, ...] = ()
    if activation_reserve_bytes is None:
        terms = reserve_terms(arch, mem, max_num_tokens, weights_fmt=weights_fmt, tp=tp, ep=ep,
                              attention_dp=attention_dp)
        reserve = sum(t.bytes for t in terms)
    else:
        reserve = float(activation_reserve_bytes)
    if transfer_buffer_tokens > 0 and per_token > 0:
        term = transfer_buffer_term(per_token, transfer_buffer_tokens, max_seq_len, tokens_per_block)
        terms += (term,)
        reserve += term.bytes
    headroom = mem - weights.total_bytes - reserve
    fits = headroom >= 0
    free = max(0.0, headroom)
    pool = free * kv_cache_memory_fraction
    ranks = tp if attention_dp else 1
    blocks_per_seq = math.ceil(max_seq_len / tokens_per_block)
    if per_token > 0:
        tokens = int(pool // per_token)
        blocks = int(pool // (per_token * tokens_per_block))
        max_seqs = ranks * (blocks // blocks_per_seq)
    else:
        tokens = blocks = 0
        max_seqs = ranks * max_batch_size if fits else 0
    return UnitCapacity(
        gpu_memory_bytes=mem,
        weight_bytes=weights.total_bytes,
        reserve_bytes=reserve,
        headroom_bytes=headroom,
        free_bytes=free,
        kv_pool_bytes=pool,
        kv_bytes_per_token=per_token,
        tokens_in_pool=tokens,
        blocks_in_pool=blocks,
        blocks_per_sequence=blocks_per_seq,
        max_sequences=max_seqs,
        fits=fits,
        batch_reachable=fits and max_seqs >= ranks * max_batch_size,
        weights=weights,
        reserve=terms,
        tokens_per_block=tokens_per_block,
        ranks=ranks,
    )


# --- MIG ------------------------------------------------------------------------------------------


def _memory_slices(gpu: GpuSpec) -> int:
    return gpu.mig.memory_slices or 8  # a memory slice is 1/8 of the GPU (gpu-catalog.md s1)


def mig_memory_bytes(gpu: GpuSpec, profile: MigProfile) -> float:
    """Usable memory of one instance: the driver's figure when the catalog has it, else the
    instance's share of memory slices (an upper bound: drivers report slightly less)."""
    if profile.memory_mib:
        return profile.memory_mib * MiB
    return profile.memory_slices / _memory_slices(gpu) * gpu.memory_mib * MiB


def mig_bandwidth_tbps(gpu: GpuSpec, profile: MigProfile) -> float:
    """Memory slices carry their controllers, so bandwidth scales with memory slices."""
    return gpu.bandwidth_tbps * profile.memory_slices / _memory_slices(gpu)


def gpu_memory_bytes(gpu: GpuSpec, profile: MigProfile | None = None) -> float:
    return float(gpu.memory_mib * MiB) if profile is None else mig_memory_bytes(gpu, profile)
