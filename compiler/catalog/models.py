"""Model architectures: the packaged catalog (``data/models.json``) and Hugging Face config.json dicts."""

from __future__ import annotations

import dataclasses
import difflib
import json
from functools import lru_cache
from typing import Any, Mapping

from compiler import resources

from .gpus import describe_source
from .named import NamedCatalog
from .types import MlaDims, ModelArch

__all__ = [
    "ConfigError",
    "ModelCatalog",
    "arch_from_hf_config",
    "estimate_params",
    "kv_elems_per_token",
    "load_model_catalog",
]


class ConfigError(ValueError):
    """A config.json that cannot describe a model; ``key`` names the missing or invalid key."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(f"{key}: {message}")
        self.message = message
        self.key = key


# ---------------------------------------------------------------------------------------------- catalog

def _arch(name: str, d: Mapping[str, Any]) -> ModelArch:
    mla = MlaDims(**d["mla"]) if d.get("mla") else None
    return ModelArch(
        name=name, hf_architecture=d.get("hf_architecture"), layers=d["layers"], hidden=d["hidden"],
        heads=d["heads"], kv_heads=d["kv_heads"], head_dim=d["head_dim"], intermediate=d["intermediate"],
        vocab=d["vocab"], max_position=d["max_position"], moe_intermediate=d.get("moe_intermediate"),
        experts=d.get("experts"), experts_per_token=d.get("experts_per_token"),
        shared_experts=d.get("shared_experts", 0), dense_layers=d.get("dense_layers", 0),
        tied_embeddings=d.get("tied_embeddings", False), gated_mlp=d.get("gated_mlp", True), mla=mla,
        sliding_window=d.get("sliding_window"), sliding_window_layers=d.get("sliding_window_layers", 0),
        encoder_only=d.get("encoder_only", False), params_total=d.get("params_total"),
        params_active=d.get("params_active"), moe_activation=d.get("moe_activation"),
        status=dict(d.get("status", {})), sources=tuple(d.get("sources", ())),
    )


class ModelCatalog(NamedCatalog[ModelArch]):
    what = "model"

    def __init__(self, models: Mapping[str, ModelArch], sources: Mapping[str, Mapping[str, Any]] | None = None,
                 notes: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self._models = dict(models)
        self._lower = {k.lower(): k for k in self._models}
        self._sources = dict(sources or {})
        self._notes = dict(notes or {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelCatalog":
        models = {k: _arch(k, v) for k, v in data["models"].items()}
        notes = {k: tuple(v.get("notes", ())) for k, v in data["models"].items()}
        return cls(models, data.get("sources", {}), notes)

    def _entries(self) -> Mapping[str, ModelArch]:
        return self._models

    def get(self, name: str) -> ModelArch | None:
        if not isinstance(name, str):
            return None
        key = name if name in self._models else self._lower.get(name.strip().lower())
        return self._models.get(key) if key else None

    def suggest(self, name: str, n: int = 3) -> list[str]:
        if not isinstance(name, str) or not name.strip():
            return []
        hits = difflib.get_close_matches(name.strip().lower(), list(self._lower), n=n, cutoff=0.6)
        return [self._lower[h] for h in hits]

    def notes(self, name: str) -> tuple[str, ...]:
        arch = self.get(name)
        return self._notes.get(arch.name, ()) if arch else ()

    def source(self, key: str) -> str:
        """`url (description)` for a source key; KeyError if unknown."""
        return describe_source(self._sources[key])


@lru_cache(maxsize=1)
def load_model_catalog() -> ModelCatalog:
    text = resources.read_data("catalog", "data", "models.json")
    return ModelCatalog.from_dict(json.loads(text))


# ---------------------------------------------------------------------------------------------- formulas

def kv_elems_per_token(arch: ModelArch) -> int:
    """KV-cache elements per token over all layers, full-attention upper bound (no sliding-window cap).

    GQA/MHA: 2 * layers * kv_heads * head_dim. MLA: layers * (kv_lora_rank + qk_rope_head_dim), one shared
    latent per layer (DeepSeek-V2 paper, Table 1). Encoder-only models keep no KV cache: 0.
    """
    if arch.encoder_only:
        return 0
    if arch.mla:
        return arch.layers * (arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim)
    return 2 * arch.layers * arch.kv_heads * arch.head_dim


def estimate_params(arch: ModelArch) -> tuple[int, int]:
    """(total, active) parameters from the dimensions; biases and per-head norms are ignored.

    embed = vocab*hidden, doubled for an untied lm_head (not for encoder-only models)
    attn  = hidden*heads*hd + 2*hidden*kv_heads*hd + heads*hd*hidden                      (GQA/MHA)
          = [hidden*q_lora + q_lora + q_lora*heads*hd | hidden*heads*hd]
            + hidden*(kv_lora+rope) + kv_lora + kv_lora*heads*(nope+v) + heads*v*hidden  (MLA, hd = nope+rope)
    mlp(w) = m*hidden*w, m = 3 for gated (SwiGLU) else 2
    dense layer = attn + mlp(intermediate) + 2*hidden
    MoE layer   = attn + (E + shared)*mlp(moe_w) + hidden*E + 2*hidden, with E = experts (active: top-k)
    total = embed + dense_layers*dense + (layers - dense_layers)*MoE + hidden
    Reproduces Llama-3.1-8B's 8,030,261,248 exactly.
    """
    h, hd = arch.hidden, arch.head_dim
    if arch.mla:
        m = arch.mla
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * arch.heads * hd) if m.q_lora_rank \
            else h * arch.heads * hd
        attn = (q + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
                + m.kv_lora_rank * arch.heads * (m.qk_nope_head_dim + m.v_head_dim) + arch.heads * m.v_head_dim * h)
    else:
        attn = 2 * h * arch.heads * hd + 2 * h * arch.kv_heads * hd
    per = 3 if arch.gated_mlp else 2
    embed = arch.vocab * h * (1 if arch.tied_embeddings or arch.encoder_only else 2)
    dense = attn + per * h * arch.intermediate + 2 * h
    if not arch.is_moe:
        total = embed + arch.layers * dense + h
        return total, total
    w = arch.moe_intermediate or arch.intermediate
    moe_layers = arch.layers - arch.dense_layers

    def moe(e: int) -> int:
        return attn + (e + arch.shared_experts) * per * h * w + h * (arch.experts or 0) + 2 * h

    base = embed + arch.dense_layers * dense + h
    return base + moe_layers * moe(arch.experts or 0), base + moe_layers * moe(arch.experts_per_token or 0)


# ---------------------------------------------------------------------------------------------- config.json

_NON_GATED = {"starcoder2", "gptj", "gpt2", "gpt_bigcode", "gpt_neox", "opt", "bloom", "falcon", "phi",
              "bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "electra"}
_ENCODERS = {"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "electra"}
_QWEN = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}


# Upper bounds of config.json's integers: far past any published model (405B Llama: 126 layers,
# hidden 16,384, 128 heads; DeepSeek-V3: 256 experts; Llama 4 Scout: a 10M-token context), so that
# a typo or a hostile file (1e308 heads, 10^6 layers) is an error, not an overflow or a plan that
# walks every layer for minutes. Keys not named here are bounded by _MAX_OTHER.
_MAX = {"num_hidden_layers": 4096, "n_layer": 4096, "num_layers": 4096, "hidden_size": 1 << 18, "n_embd": 1 << 18,
        "d_model": 1 << 18, "num_attention_heads": 1 << 12, "n_head": 1 << 12, "num_key_value_heads": 1 << 12,
        "num_kv_heads": 1 << 12, "head_dim": 1 << 14, "vocab_size": 1 << 24, "max_position_embeddings": 1 << 28,
        "n_positions": 1 << 28, "n_ctx": 1 << 28, "initial_context_length": 1 << 28, "num_local_experts": 1 << 14,
        "n_routed_experts": 1 << 14, "num_experts": 1 << 14, "num_parameters": 1 << 50}
_MAX_OTHER = 1 << 24


def _int(cfg: Mapping[str, Any], *keys: str, default: Any = ..., minimum: int = 1) -> Any:
    """First present key among ``keys`` as an int in [minimum, its bound] (None counts as absent)."""
    for k in keys:
        v = cfg.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise ConfigError(f"expected an integer, got {v!r}", k)
        if v < minimum:
            raise ConfigError(f"must be >= {minimum}, got {v}", k)
        if v > _MAX.get(k, _MAX_OTHER):
            raise ConfigError(f"must be <= {_MAX.get(k, _MAX_OTHER):,}, got {v:.4g}", k)
        return v
    if default is ...:
        raise ConfigError("missing" + (f" (also tried {', '.join(keys[1:])})" if len(keys) > 1 else ""), keys[0])
    return default


def _sliding(cfg: Mapping[str, Any], mtype: str, layers: int) -> tuple[int | None, int]:
    window = _int(cfg, "sliding_window", default=None)
    if window is None or cfg.get("use_sliding_window") is False:
        return None, 0
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ConfigError(f"expected a list of {layers} layer types", "layer_types")
        n = sum(1 for t in types if t == "sliding_attention")
        return (window, n) if n else (None, 0)
    if mtype == "gpt_oss":  # alternating, starting with a sliding layer
        return window, (layers + 1) // 2
    if mtype in _QWEN:  # the first max_window_layers layers use full attention
        full = _int(cfg, "max_window_layers", default=0, minimum=0)
        return (window, max(layers - full, 0)) if layers > full else (None, 0)
    return window, layers


def arch_from_hf_config(config: Mapping[str, Any], name: str) -> ModelArch:
    """Read a Hugging Face config.json dict (Llama, Mistral/Mixtral, Qwen2/3(-MoE), DeepSeek-V3, gpt-oss,
    StarCoder2, GPT-J, DeBERTa). ``params_total``/``params_active`` come from ``estimate_params`` unless
    the config states ``num_parameters``; computed counts carry status "inferred".
    """
    if not isinstance(config, Mapping):
        raise ConfigError("config must be a JSON object", "<root>")
    mtype = config.get("model_type") or ""
    if not isinstance(mtype, str):
        raise ConfigError(f"expected a string, got {mtype!r}", "model_type")
    archs = config.get("architectures")
    hf_arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    layers = _int(config, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(config, "hidden_size", "n_embd", "d_model")
    heads = _int(config, "num_attention_heads", "n_head")
    if config.get("multi_query") is True:
        kv_heads = 1
    else:
        kv_heads = _int(config, "num_key_value_heads", "num_kv_heads", default=heads)
    if heads % kv_heads:
        raise ConfigError(f"{heads} attention heads are not a multiple of {kv_heads} KV heads",
                          "num_key_value_heads")
    intermediate = _int(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
    vocab = _int(config, "vocab_size")
    max_pos = _int(config, "max_position_embeddings", "n_positions", "n_ctx", default=None)
    if max_pos is None:  # gpt-oss original/config.json
        base = _int(config, "initial_context_length", default=None)
        factor = config.get("rope_scaling_factor", 1)
        if base is None or not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor < 1:
            raise ConfigError("missing", "max_position_embeddings")
        if not base * factor <= _MAX["max_position_embeddings"]:  # (also NaN)
            raise ConfigError(f"initial_context_length x rope_scaling_factor must be <= "
                              f"{_MAX['max_position_embeddings']:,}", "rope_scaling_factor")
        max_pos = int(base * factor)

    mla = None
    if "kv_lora_rank" in config:
        mla = MlaDims(
            kv_lora_rank=_int(config, "kv_lora_rank"), qk_rope_head_dim=_int(config, "qk_rope_head_dim"),
            q_lora_rank=_int(config, "q_lora_rank", default=None), qk_nope_head_dim=_int(config, "qk_nope_head_dim"),
            v_head_dim=_int(config, "v_head_dim"))
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim  # per-head Q/K width; HF's head_dim is the rope part
    else:
        head_dim = _int(config, "head_dim", default=None)
        if head_dim is None:
            if hidden % heads:
                raise ConfigError(f"hidden size {hidden} is not divisible by {heads} heads; set head_dim",
                                  "num_attention_heads")
            head_dim = hidden // heads

    experts = _int(config, "num_local_experts", "n_routed_experts", "num_experts", default=0, minimum=0) or None
    top_k = shared = dense_layers = 0
    moe_w = None
    if experts:
        top_k = _int(config, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
        if top_k > experts:
            raise ConfigError(f"{top_k} experts per token exceed {experts} experts", "num_experts_per_tok")
        moe_w = _int(config, "moe_intermediate_size", default=None)
        if moe_w == intermediate:
            moe_w = None
        shared = _int(config, "n_shared_experts", default=0, minimum=0)
        shared_w = _int(config, "shared_expert_intermediate_size", default=0, minimum=0)
        if shared_w:  # Qwen2-MoE: one wide shared expert, counted in units of the routed width
            shared = max(shared_w // (moe_w or intermediate), 1)
        dense_layers = _int(config, "first_k_dense_replace", default=0, minimum=0)
        only = config.get("mlp_only_layers") or []
        if not isinstance(only, list):
            raise ConfigError("expected a list of layer indices", "mlp_only_layers")
        step = _int(config, "decoder_sparse_step", default=1)
        dense_layers = max(dense_layers, len(only), layers - layers // step)
        if dense_layers > layers:
            raise ConfigError(f"{dense_layers} dense layers exceed {layers} layers", "first_k_dense_replace")

    window, window_layers = _sliding(config, mtype, layers)
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ConfigError(f"expected true/false, got {tied!r}", "tie_word_embeddings")

    arch = ModelArch(
        name=name, hf_architecture=hf_arch, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=intermediate, vocab=vocab, max_position=max_pos,
        moe_intermediate=moe_w, experts=experts, experts_per_token=top_k or None, shared_experts=shared,
        dense_layers=dense_layers, tied_embeddings=tied, gated_mlp=mtype not in _NON_GATED, mla=mla,
        sliding_window=window, sliding_window_layers=window_layers, encoder_only=mtype in _ENCODERS,
        moe_activation="swiglu_gptoss" if experts and mtype == "gpt_oss" else None,
        sources=("config.json",),
    )
    stated = _int(config, "num_parameters", default=None)
    if stated is not None:
        return dataclasses.replace(arch, params_total=stated, params_active=stated if not experts else None)
    total, active = estimate_params(arch)
    return dataclasses.replace(arch, params_total=total, params_active=active,
                               status={"params_total": "inferred", "params_active": "inferred"})
