"""Linear-module inventory of a ModelArch, named the Hugging Face (Llama) way.

Each group is one module shape repeated over a set of layers (and experts); concrete names such as
``model.layers.3.mlp.experts.17.down_proj`` are generated on demand so that quantization globs
(``*mlp.gate``, ``*experts*``, ``model.layers.0.*``) match exactly what a checkpoint would show.

One naming scheme is used for every model (Mixtral's ``block_sparse_moe.experts.{e}.w1`` and
gpt-oss's fused ``experts.gate_up_proj`` are spelled Llama/DeepSeek style) so that one set of
globs means the same thing everywhere.

Parameter totals reproduce the computed counts in models.md exactly for Llama, Mixtral, Qwen3-32B/235B
and DeepSeek-V3 (MTP module excluded, as there). Residuals, all deliberate: biases (gpt-oss
attention and expert biases, StarCoder2, GPT-J), attention sinks, Qwen3 q/k norms, DeepSeek's
router score-correction bias: each < 0.06%. DeBERTa's relative-position embeddings and LayerNorm
biases are not modelled either (-0.4%; encoder-only, outside the planner's main use).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Iterator

from compiler.catalog.types import ModelArch

# Kinds. Only "linear" modules are quantized by default; routers and lm_head are linear layers that
# quantization recipes conventionally leave in high precision (ModelOpt excludes them).
EMBEDDING, NORM, LINEAR, ROUTER, LM_HEAD = "embedding", "norm", "linear", "router", "lm_head"


@dataclass(frozen=True)
class ModuleGroup:
    pattern: str  # name template: {i} = layer index, {e} = expert index
    kind: str
    params_each: int  # parameters of one concrete module
    layers: tuple[int, ...] = ()  # layer indices the group repeats over; () = outside the layers
    experts: int = 0  # routed experts per layer; 0 = not an expert module
    shard: str = "tp"  # "tp": split over TP ranks; "replicate"; "kv": split by KV head
    heads: int = 0  # KV heads, for shard == "kv"

    @property
    def is_linear(self) -> bool:
        return self.kind in (LINEAR, ROUTER, LM_HEAD)

    @property
    def quantizable(self) -> bool:
        """Quantized by default when a weight format is set."""
        return self.kind == LINEAR

    @property
    def is_expert(self) -> bool:
        return self.experts > 0

    @property
    def count(self) -> int:
        return max(1, len(self.layers)) * max(1, self.experts)

    @property
    def params(self) -> int:
        return self.params_each * self.count

    def names_in_layer(self, layer: int | None) -> Iterator[str]:
        if not self.experts:
            yield self.pattern.format(i=layer)
            return
        for e in range(self.experts):
            yield self.pattern.format(i=layer, e=e)

    def names(self) -> Iterator[str]:
        for layer in self.layers or (None,):
            yield from self.names_in_layer(layer)

    def matches(self, pattern: str) -> bool:
        """True when the glob matches at least one concrete module of this group."""
        if not any(c.isdigit() or c in "?[" for c in pattern):
            # Concrete names differ only in their layer and expert numbers. A glob with no digit, `?`
            # or `[` can only take digits into a `*`, of any length, so one name decides for all
            # (a large MoE has ~10^5 expert modules to walk otherwise).
            return fnmatchcase(next(self.names()), pattern)
        return any(fnmatchcase(n, pattern) for n in self.names())

    def params_per_gpu(self, tp: int) -> float:
        """Parameters of one concrete module held by each TP rank."""
        if self.shard == "replicate" or tp <= 1:
            return float(self.params_each)
        if self.shard == "kv":
            # KV heads split across ranks; past tp == kv_heads each rank keeps a whole head.
            return self.params_each * -(-self.heads // tp) / self.heads
        return self.params_each / tp


def _attention(arch: ModelArch, layers: tuple[int, ...]) -> list[ModuleGroup]:
    h, p = arch.hidden, "model.layers.{i}.self_attn."
    m = arch.mla
    if m is None:
        q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
        return [
            ModuleGroup(p + "q_proj", LINEAR, h * q, layers),
            ModuleGroup(p + "k_proj", LINEAR, h * kv, layers, shard="kv", heads=arch.kv_heads),
            ModuleGroup(p + "v_proj", LINEAR, h * kv, layers, shard="kv", heads=arch.kv_heads),
            ModuleGroup(p + "o_proj", LINEAR, q * h, layers),
        ]
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    groups = []
    if m.q_lora_rank:
        # The down-projections feed every head, so TP ranks replicate them (vLLM/TRT-LLM do).
        groups += [
            ModuleGroup(p + "q_a_proj", LINEAR, h * m.q_lora_rank, layers, shard="replicate"),
            ModuleGroup(p + "q_a_layernorm", NORM, m.q_lora_rank, layers, shard="replicate"),
            ModuleGroup(p + "q_b_proj", LINEAR, m.q_lora_rank * arch.heads * qk_head, layers),
        ]
    else:
        groups.append(ModuleGroup(p + "q_proj", LINEAR, h * arch.heads * qk_head, layers))
    kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
    kv_b = m.kv_lora_rank * arch.heads * (m.qk_nope_head_dim + m.v_head_dim)
    groups += [
        ModuleGroup(p + "kv_a_proj_with_mqa", LINEAR, kv_a, layers, shard="replicate"),
        ModuleGroup(p + "kv_a_layernorm", NORM, m.kv_lora_rank, layers, shard="replicate"),
        ModuleGroup(p + "kv_b_proj", LINEAR, kv_b, layers),
        ModuleGroup(p + "o_proj", LINEAR, arch.heads * m.v_head_dim * h, layers),
    ]
    return groups


def _mlp(prefix: str, hidden: int, width: int, gated: bool, layers, experts: int = 0) -> list[ModuleGroup]:
    names = ("gate_proj", "up_proj", "down_proj") if gated else ("up_proj", "down_proj")
    return [ModuleGroup(prefix + n, LINEAR, hidden * width, layers, experts) for n in names]


def inventory(arch: ModelArch) -> tuple[ModuleGroup, ...]:
    """Every parameter group of the model, norms and embeddings included."""
    h, all_layers = arch.hidden, tuple(range(arch.layers))
    dense = all_layers[: arch.dense_layers] if arch.is_moe else all_layers
    moe = all_layers[arch.dense_layers :] if arch.is_moe else ()

    groups = [ModuleGroup("model.embed_tokens", EMBEDDING, arch.vocab * h)]
    groups += [
        ModuleGroup("model.layers.{i}.input_layernorm", NORM, h, all_layers, shard="replicate"),
        ModuleGroup("model.layers.{i}.post_attention_layernorm", NORM, h, all_layers, shard="replicate"),
    ]
    groups += _attention(arch, all_layers)
    if dense:
        groups += _mlp("model.layers.{i}.mlp.", h, arch.intermediate, arch.gated_mlp, dense)
    if moe:
        e = arch.experts or 0
        width = arch.moe_intermediate or arch.intermediate
        # Routers are tiny and every rank needs all logits, so they stay whole on each rank.
        groups.append(ModuleGroup("model.layers.{i}.mlp.gate", ROUTER, e * h, moe, shard="replicate"))
        groups += _mlp("model.layers.{i}.mlp.experts.{e}.", h, width, arch.gated_mlp, moe, e)
        if arch.shared_experts:
            shared = width * arch.shared_experts  # DeepSeek fuses shared experts into one wider MLP
            groups += _mlp("model.layers.{i}.mlp.shared_experts.", h, shared, arch.gated_mlp, moe)
    groups.append(ModuleGroup("model.norm", NORM, h, shard="replicate"))
    if not arch.tied_embeddings and not arch.encoder_only:
        groups.append(ModuleGroup("lm_head", LM_HEAD, h * arch.vocab))
    return tuple(groups)


def total_params(arch: ModelArch) -> int:
    return sum(g.params for g in inventory(arch))
