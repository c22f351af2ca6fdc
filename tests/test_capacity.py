"""Capacity planner: formats, module inventory, weight/KV memory, unit capacity, decode roofline.

Expected values are worked out here by hand from the published formulas (models.md s2 and s5),
not by calling the helpers under test.
"""

from __future__ import annotations

import math

import pytest

from compiler.capacity.formats import bytes_per_param, kv_bytes_per_element
from compiler.capacity.memory import (
    GiB,
    MiB,
    gpu_memory_bytes,
    kv_bytes_per_token,
    mig_bandwidth_tbps,
    mig_memory_bytes,
    unit_capacity,
    weight_bytes,
)
from compiler.capacity.modules import inventory, total_params
from compiler.capacity.roofline import (
    cost_per_million_tokens,
    decode_ceiling,
    expected_experts_hit,
    mig_gpu_share,
)
from compiler.catalog.types import GpuSpec, MigGeometry, MigProfile, MlaDims, ModelArch


def arch(name: str, **kw) -> ModelArch:
    return ModelArch(name=name, hf_architecture=None, **kw)


LLAMA_8B = arch("llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                intermediate=14336, vocab=128256, max_position=131072)
LLAMA_70B = arch("llama-3.1-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                 intermediate=28672, vocab=128256, max_position=131072)
MIXTRAL = arch("mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
               intermediate=14336, vocab=32000, max_position=32768, experts=8, experts_per_token=2)
QWEN3_235B = arch("qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128,
                  intermediate=12288, vocab=151936, max_position=40960, moe_intermediate=1536,
                  experts=128, experts_per_token=8)
DEEPSEEK_V3 = arch("deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=128,
                   intermediate=18432, vocab=129280, max_position=163840, moe_intermediate=2048,
                   experts=256, experts_per_token=8, shared_experts=1, dense_layers=3,
                   mla=MlaDims(kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=1536,
                               qk_nope_head_dim=128, v_head_dim=128))
GPT_OSS_120B = arch("gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64,
                    intermediate=2880, vocab=201088, max_position=131072, experts=128,
                    experts_per_token=4, sliding_window=128, sliding_window_layers=18)
DEBERTA = arch("deberta-v3-large", layers=24, hidden=1024, heads=16, kv_heads=16, head_dim=64,
               intermediate=4096, vocab=128100, max_position=512, gated_mlp=False, encoder_only=True)

# ---- hand-derived pieces (Llama-3.1-70B) ----------------------------------------------------------
H70, I70, V70 = 8192, 28672, 128256
EMB70 = V70 * H70  # 1,050,673,152 (embed_tokens; lm_head the same)
NORM70 = (2 * 80 + 1) * H70  # two norms per layer + final norm
ATTN70 = H70 * 64 * 128 * 2 + H70 * 8 * 128 * 2  # q, o + k, v
MLP70 = 3 * H70 * I70
LIN70 = 80 * (ATTN70 + MLP70)

# ---- Mixtral-8x7B --------------------------------------------------------------------------------
HMX = 4096
EMBMX = 32000 * HMX
NORMMX = (2 * 32 + 1) * HMX
ATTNMX = HMX * 4096 * 2 + HMX * 1024 * 2
EXPERTMX = 3 * HMX * 14336  # one expert
ROUTERMX = 8 * HMX  # per layer


# ---- formats -------------------------------------------------------------------------------------


def test_weight_format_bytes_per_param():
    assert bytes_per_param("bf16") == 2.0
    assert bytes_per_param("fp16") == 2.0
    assert bytes_per_param("fp8") == 1.0
    assert bytes_per_param("nvfp4") == 0.5625  # 4 bits + 1 B per 16
    assert bytes_per_param("mxfp8") == 1.03125  # 8 bits + 1 B per 32
    assert bytes_per_param("mxfp4") == 0.53125  # 4 bits + 1 B per 32
    assert bytes_per_param("int4_awq") == 0.5 + 2 / 128
    assert bytes_per_param("int4_gptq", 64) == 0.5 + 2 / 64
    assert bytes_per_param("fp8_block") == 1 + 4 / (128 * 128)
    assert bytes_per_param("nvfp4", 32) == 0.5 + 1 / 32
    assert bytes_per_param("int8") == 1.0
    assert bytes_per_param("fp8_rowwise", 8192) == 1 + 4 / 8192
    with pytest.raises(ValueError):
        bytes_per_param("fp6")


def test_kv_format_bytes():
    assert kv_bytes_per_element("auto") == 2.0
    assert kv_bytes_per_element("fp8") == 1.0
    assert kv_bytes_per_element("int8") == 1.0
    assert kv_bytes_per_element("nvfp4") == 0.5625
    with pytest.raises(ValueError):
        kv_bytes_per_element("fp4")


# ---- inventory -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, published",
    [(LLAMA_8B, 8.030e9), (LLAMA_70B, 70.554e9), (MIXTRAL, 46.703e9), (DEEPSEEK_V3, 671.03e9),
     (QWEN3_235B, 235.094e9), (GPT_OSS_120B, 116.829e9)],
)
def test_param_totals_match_models_md(model, published):
    assert total_params(model) == pytest.approx(published, rel=2e-3)


def test_param_totals_exact_for_llama():
    # models.md: computed 8,030,261,248 and 70,553,706,496
    assert total_params(LLAMA_8B) == 8_030_261_248
    assert total_params(LLAMA_70B) == 70_553_706_496 == 2 * EMB70 + NORM70 + LIN70


def test_deepseek_mla_inventory_by_hand():
    h = 7168
    attn = (h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h) + 1536 + 512
    dense_mlp = 3 * h * 18432
    moe = 256 * 3 * h * 2048 + 3 * h * 2048 + 256 * h  # routed + shared + router
    norms = 2 * h * 61 + h
    expected = 2 * 129280 * h + 61 * attn + 3 * dense_mlp + 58 * moe + norms
    assert total_params(DEEPSEEK_V3) == expected
    names = {g.pattern for g in inventory(DEEPSEEK_V3)}
    for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        assert f"model.layers.{{i}}.self_attn.{proj}" in names


def test_group_matches_globs():
    groups = {g.pattern: g for g in inventory(MIXTRAL)}
    router = groups["model.layers.{i}.mlp.gate"]
    expert_down = groups["model.layers.{i}.mlp.experts.{e}.down_proj"]
    assert router.matches("*mlp.gate") and not expert_down.matches("*mlp.gate")
    assert expert_down.matches("*experts*") and not router.matches("*experts*")
    assert expert_down.matches("model.layers.0.*")
    assert expert_down.matches("model.layers.31.mlp.experts.7.down_proj")
    assert not expert_down.matches("model.layers.32.*")
    assert groups["lm_head"].matches("lm_head")
    assert groups["model.layers.{i}.self_attn.q_proj"].matches("*.self_attn.*")
    assert expert_down.count == 32 * 8
    assert not groups["model.embed_tokens"].quantizable and not groups["lm_head"].quantizable
    dense = {g.pattern: g for g in inventory(LLAMA_70B)}
    assert not dense["model.layers.{i}.mlp.gate_proj"].matches("*mlp.gate")


# ---- weight bytes --------------------------------------------------------------------------------


def test_llama70b_weight_bytes_bf16_fp8_nvfp4():
    keep = 2 * (2 * EMB70 + NORM70)  # embeddings, lm_head, norms stay BF16
    assert weight_bytes(LLAMA_70B, "bf16").total_bytes == 2 * 70_553_706_496
    fp8 = weight_bytes(LLAMA_70B, "fp8")
    assert fp8.total_bytes == keep + LIN70
    assert fp8.unquantized_bytes == keep
    nv = weight_bytes(LLAMA_70B, "nvfp4")
    assert nv.total_bytes == pytest.approx(keep + LIN70 * 0.5625)
    assert nv.by_group["lm_head"] == 2 * EMB70
    assert nv.by_format["nvfp4"] == pytest.approx(LIN70 * 0.5625)


def test_mixtral_nvfp4_and_router_override():
    experts = 32 * 8 * EXPERTMX
    keep = 2 * (2 * EMBMX + NORMMX + 32 * ROUTERMX)
    nv = weight_bytes(MIXTRAL, "nvfp4")
    assert nv.total_bytes == pytest.approx(keep + 0.5625 * (32 * ATTNMX + experts))
    assert nv.expert_bytes == pytest.approx(0.5625 * experts)
    # "*" pulls every linear (lm_head and routers too) into FP8; "*mlp.gate" puts routers back.
    everything = weight_bytes(MIXTRAL, "nvfp4", overrides=[("*", "fp8", None)])
    assert everything.by_group["model.layers.{i}.mlp.gate"] == 32 * ROUTERMX
    routers_bf16 = weight_bytes(
        MIXTRAL, "nvfp4", overrides=[("*", "fp8", None), ("*mlp.gate", "bf16", None)]
    )
    assert routers_bf16.by_group["model.layers.{i}.mlp.gate"] == 2 * 32 * ROUTERMX
    assert routers_bf16.by_group["lm_head"] == EMBMX  # still FP8
    assert routers_bf16.expert_bytes == experts


def test_override_order_last_match_wins_and_exclude_wins():
    attn_then_all = weight_bytes(
        LLAMA_70B, "fp8", overrides=[("*.self_attn.*", "bf16", None), ("*", "nvfp4", None)]
    )
    all_then_attn = weight_bytes(
        LLAMA_70B, "fp8", overrides=[("*", "nvfp4", None), ("*.self_attn.*", "bf16", None)]
    )
    assert attn_then_all.by_group["model.layers.{i}.self_attn.q_proj"] == pytest.approx(
        80 * H70 * H70 * 0.5625
    )
    assert all_then_attn.by_group["model.layers.{i}.self_attn.q_proj"] == 80 * H70 * H70 * 2
    assert all_then_attn.by_group["lm_head"] == pytest.approx(EMB70 * 0.5625)
    # Excluded layer 0 stays BF16 even though an override names it; None means unquantized.
    w = weight_bytes(
        LLAMA_70B, "fp8", exclude=["model.layers.0.*"],
        overrides=[("model.layers.0.*", "nvfp4", None), ("model.layers.1.mlp.*", None, None)],
    )
    layer = ATTN70 + MLP70
    keep = 2 * (2 * EMB70 + NORM70)
    assert w.total_bytes == keep + 2 * layer + 2 * MLP70 + (layer - MLP70) + 78 * layer
    assert w.unquantized_bytes == keep + 2 * layer + 2 * MLP70


def test_block_size_override():
    w = weight_bytes(MIXTRAL, "fp8", overrides=[("*experts*", "int4_awq", 64)])
    assert w.expert_bytes == pytest.approx(32 * 8 * EXPERTMX * (0.5 + 2 / 64))
    g = weight_bytes(MIXTRAL, "int4_gptq", block_size=32)
    assert g.expert_bytes == pytest.approx(32 * 8 * EXPERTMX * (0.5 + 2 / 32))


def test_deepseek_fp8_weights():
    h = 7168
    lin_attn = h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h
    lin = 61 * lin_attn + 3 * 3 * h * 18432 + 58 * (257 * 3 * h * 2048)
    keep = 2 * (2 * 129280 * h + 61 * (2 * h + 1536 + 512) + h + 58 * 256 * h)
    assert weight_bytes(DEEPSEEK_V3, "fp8").total_bytes == keep + lin
    # NVFP4 with routers, lm_head, embeddings and norms BF16
    nv = weight_bytes(DEEPSEEK_V3, "nvfp4")
    assert nv.total_bytes == pytest.approx(keep + 0.5625 * lin)


def test_tp_shards_linears_and_replicates_norms():
    w = weight_bytes(LLAMA_70B, "bf16", tp=8)
    assert w.total_bytes == pytest.approx(2 * ((2 * EMB70 + LIN70) / 8 + NORM70))
    # tp=16 > kv_heads=8: each rank keeps one whole KV head of k_proj and v_proj.
    w16 = weight_bytes(LLAMA_70B, "bf16", tp=16)
    kv_rank = 2 * H70 * 1 * 128
    rest = 80 * (2 * H70 * H70 + MLP70) + 2 * EMB70
    assert w16.total_bytes == pytest.approx(2 * (rest / 16 + 80 * kv_rank + NORM70))


def test_pp_reports_largest_stage():
    layer = 2 * (ATTN70 + MLP70 + 2 * H70)  # BF16 bytes of one layer incl. its two norms
    # pp=3: 27/27/26 layers; embeddings on stage 0, lm_head + final norm on stage 2.
    w3 = weight_bytes(LLAMA_70B, "bf16", pp=3)
    s0, s2 = 2 * EMB70 + 27 * layer, 26 * layer + 2 * EMB70 + 2 * H70
    assert w3.stage_bytes == (s0, 27 * layer, s2)
    assert w3.stage == 0 and w3.total_bytes == s0
    # pp=2: 40/40; the last stage wins by the final norm.
    w2 = weight_bytes(LLAMA_70B, "bf16", pp=2)
    assert w2.stage == 1 and w2.total_bytes == 40 * layer + 2 * EMB70 + 2 * H70
    with pytest.raises(ValueError):
        weight_bytes(LLAMA_70B, "bf16", pp=81)


# ---- KV cache ------------------------------------------------------------------------------------


def test_kv_bytes_per_token_published_figures():
    assert kv_bytes_per_token(LLAMA_70B, "bf16") == 327_680 == 2 * 80 * 8 * 128 * 2
    assert kv_bytes_per_token(LLAMA_70B, "auto") == 327_680
    assert kv_bytes_per_token(LLAMA_70B, "fp8") == 163_840
    assert kv_bytes_per_token(LLAMA_70B, "nvfp4") == 163_840 * 0.5625
    assert kv_bytes_per_token(MIXTRAL, "bf16") == 131_072
    assert kv_bytes_per_token(QWEN3_235B, "bf16") == 192_512
    assert kv_bytes_per_token(DEEPSEEK_V3, "bf16") == 70_272 == 61 * (512 + 64) * 2
    assert kv_bytes_per_token(DEEPSEEK_V3, "fp8") == 35_136
    assert kv_bytes_per_token(GPT_OSS_120B, "bf16") == 73_728


def test_kv_tp_split_and_replication():
    assert kv_bytes_per_token(LLAMA_70B, "bf16", tp=8) == 40_960
    assert kv_bytes_per_token(LLAMA_70B, "bf16", tp=16) == 40_960  # heads replicated past 8
    assert kv_bytes_per_token(QWEN3_235B, "bf16", tp=8) == 94 * 2 * 1 * 128 * 2  # 4 heads, tp 8
    assert kv_bytes_per_token(LLAMA_70B, "bf16", tp=3) == 80 * 2 * 3 * 128 * 2  # ceil(8/3)
    assert kv_bytes_per_token(DEEPSEEK_V3, "bf16", tp=8) == 70_272  # MLA latent not split
    assert kv_bytes_per_token(LLAMA_70B, "bf16", pp=2) == 163_840
    assert kv_bytes_per_token(LLAMA_70B, "bf16", pp=3) == 27 * 2 * 8 * 128 * 2


def test_kv_sliding_window_average():
    full_layer = 2 * 8 * 64 * 2  # bytes per token per gpt-oss layer, BF16
    assert kv_bytes_per_token(GPT_OSS_120B, "bf16", seq_len=8192) == pytest.approx(
        18 * full_layer + 18 * full_layer * 128 / 8192
    )  # 37,440
    assert kv_bytes_per_token(GPT_OSS_120B, "bf16", seq_len=100) == 73_728  # shorter than window


def test_encoder_only_has_no_kv():
    assert kv_bytes_per_token(DEBERTA, "bf16") == 0
    cap = unit_capacity(DEBERTA, 16 * GiB, weights_fmt="bf16", max_seq_len=512, max_batch_size=32)
    assert cap.kv_bytes_per_token == 0 and cap.max_sequences == 32 and cap.batch_reachable


# ---- unit capacity -------------------------------------------------------------------------------


def test_llama70b_fp8_sequences_in_h200_budget():
    mem, reserve = 141_000_000_000, 2 * GiB
    weights = 2 * (2 * EMB70 + NORM70) + LIN70  # 72,656,371,712
    pool = 0.9 * (mem - weights - reserve)
    blocks = math.floor(pool / (163_840 * 32))
    expected = blocks // (8192 // 32)
    cap = unit_capacity(
        LLAMA_70B, mem, weights_fmt="fp8", kv_fmt="fp8", max_seq_len=8192, max_batch_size=64,
        kv_cache_memory_fraction=0.9, activation_reserve_bytes=reserve,
    )
    assert cap.weight_bytes == weights
    assert cap.kv_pool_bytes == pytest.approx(pool)
    assert cap.tokens_in_pool == math.floor(pool / 163_840)
    assert cap.max_sequences == expected == 44
    assert cap.fits and not cap.batch_reachable
    assert cap.headroom_bytes == mem - weights - reserve


def test_default_reserve_estimate_and_paging():
    mem = 141_000_000_000
    cap = unit_capacity(LLAMA_70B, mem, weights_fmt="fp8", kv_fmt="fp8", max_seq_len=1000,
                        max_batch_size=8, max_num_tokens=8192)
    assert cap.reserve_bytes == 8192 * H70 * 8 * 2 + 1 * GiB
    assert cap.blocks_per_sequence == 32  # 1000 tokens round up to 32 blocks of 32
    assert cap.max_sequences == cap.blocks_in_pool // 32


def test_deepseek_nvfp4_tp8_capacity():
    # 8 x 180 GB-class GPUs, BF16 KV (MLA latent replicated per rank), 32k context.
    mem, reserve = 180e9, 3 * GiB
    cap = unit_capacity(DEEPSEEK_V3, mem, weights_fmt="nvfp4", kv_fmt="bf16", tp=8,
                        max_seq_len=32768, max_batch_size=16, activation_reserve_bytes=reserve)
    h = 7168
    sharded_lin = 61 * (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * h) \
        + 3 * 3 * h * 18432 + 58 * 257 * 3 * h * 2048
    replicated_lin = 61 * (h * 1536 + h * 576)  # MLA down-projections, whole on every rank
    keep_sharded = 2 * 129280 * h * 2  # embeddings + lm_head, vocab-parallel
    keep_replicated = 2 * (61 * (2 * h + 1536 + 512) + h + 58 * 256 * h)  # norms + routers
    weights = 0.5625 * (sharded_lin / 8 + replicated_lin) + keep_sharded / 8 + keep_replicated
    assert cap.weight_bytes == pytest.approx(weights)
    blocks = math.floor(0.9 * (mem - weights - reserve) / (70_272 * 32))
    assert cap.max_sequences == blocks // 1024


def test_zero_free_memory_edge_cases():
    weights = 2 * (2 * EMB70 + NORM70) + LIN70
    exact = unit_capacity(LLAMA_70B, weights + GiB, weights_fmt="fp8", max_seq_len=4096,
                          max_batch_size=1, activation_reserve_bytes=GiB)
    assert exact.fits and exact.max_sequences == 0 and exact.tokens_in_pool == 0
    for mem in (weights, 0, -5):
        cap = unit_capacity(LLAMA_70B, mem, weights_fmt="fp8", max_seq_len=4096,
                            max_batch_size=1, activation_reserve_bytes=GiB)
        assert not cap.fits and cap.max_sequences == 0 and cap.kv_pool_bytes == 0
        assert cap.headroom_bytes < 0 and not cap.batch_reachable
    zero_fraction = unit_capacity(LLAMA_70B, 141e9, weights_fmt="fp8", max_seq_len=4096,
                                  max_batch_size=1, kv_cache_memory_fraction=0.0)
    assert zero_fraction.fits and zero_fraction.max_sequences == 0
    no_fit_encoder = unit_capacity(DEBERTA, 0, weights_fmt="bf16", max_seq_len=512, max_batch_size=4)
    assert not no_fit_encoder.fits and no_fit_encoder.max_sequences == 0


# ---- MIG -----------------------------------------------------------------------------------------


def _profile(name, pid, c, m, gb, mib=None):
    return MigProfile(name=name, id=pid, compute_slices=c, memory_slices=m, memory_gb=gb,
                      max_count=1, placements=(0,), placement_size=m, memory_mib=mib)


P_1G = _profile("1g.18gb", 19, 1, 1, 18, mib=16384)
P_3G = _profile("3g.71gb", 9, 3, 4, 71)
H200 = GpuSpec(
    name="H200-SXM-141GB", arch="Hopper", compute_capability=(9, 0), sms=132, memory_gb=141,
    memory_mib=143771, bandwidth_tbps=4.8, tflops={"bf16": 989.0, "fp8": 1979.0},
    graphics_mhz=(345, 1980), memory_mhz=(3201,), power_w=(200, 700), tdp_w=700,
    nvlink_gbps=900, pci_device_id="0x2335", min_driver=None,
    mig=MigGeometry(supported=True, max_instances=7, compute_slices=7, memory_slices=8,
                    profiles=(P_1G, P_3G)),
)


def test_mig_memory_bandwidth_and_price_share():
    assert mig_memory_bytes(H200, P_1G) == 16384 * MiB  # driver figure when known
    assert mig_memory_bytes(H200, P_3G) == 4 / 8 * 143771 * MiB  # else the slice share
    assert gpu_memory_bytes(H200) == 143771 * MiB
    assert gpu_memory_bytes(H200, P_1G) == 16384 * MiB
    assert mig_bandwidth_tbps(H200, P_1G) == pytest.approx(0.6)
    assert mig_bandwidth_tbps(H200, P_3G) == pytest.approx(2.4)
    assert mig_gpu_share(H200, P_1G) == pytest.approx(1 / 7)
    assert mig_gpu_share(H200, P_3G) == pytest.approx(3 / 7)


def test_llama8b_on_small_mig_instance():
    mem = 16384 * MiB
    cap = unit_capacity(LLAMA_8B, mem, weights_fmt="fp8", kv_fmt="fp8", max_seq_len=4096,
                        max_batch_size=4, max_num_tokens=2048)
    emb = 128256 * 4096
    weights = 2 * (2 * emb + (2 * 32 + 1) * 4096) + (8_030_261_248 - 2 * emb - 65 * 4096)
    reserve = 2048 * 4096 * 8 * 2 + mem / 64  # context allowance 1/64 of 16 GiB = 256 MiB
    assert cap.weight_bytes == weights and cap.reserve_bytes == reserve
    blocks = math.floor(0.9 * (mem - weights - reserve) / (65_536 * 32))
    assert cap.max_sequences == blocks // 128


# ---- roofline ------------------------------------------------------------------------------------


def test_llama70b_fp8_batch1_ceiling_on_h200():
    touched = LIN70 + 2 * (EMB70 + NORM70)  # FP8 linears, BF16 lm_head + norms; embeddings gathered
    c = decode_ceiling(LLAMA_70B, weights_fmt="fp8", bandwidth_tbps=4.8)
    assert c.tokens_per_s_batch1 == pytest.approx(4.8e12 / touched)  # ~68.0 tok/s
    assert c.tokens_per_s_batch1 == pytest.approx(68.03, abs=0.01)
    assert c.step_ms == pytest.approx(touched / 4.8e12 * 1e3)
    ctx = decode_ceiling(LLAMA_70B, weights_fmt="fp8", kv_fmt="fp8", bandwidth_tbps=4.8,
                         batch=16, context_len=4096)
    step = (touched + 16 * 4096 * 163_840) / 4.8e12
    assert ctx.tokens_per_s_at_batch == pytest.approx(16 / step)
    assert ctx.tokens_per_s_batch1 == pytest.approx(4.8e12 / (touched + 4096 * 163_840))
    derated = decode_ceiling(LLAMA_70B, weights_fmt="fp8", bandwidth_tbps=4.8, derate=0.9)
    assert derated.tokens_per_s_batch1 == pytest.approx(0.9 * 4.8e12 / touched)


def test_batch1_touched_params_match_models_md():
    # models.md decode_params_touched_b_batch1 (all BF16 -> bytes / 2)
    for model, billions in ((LLAMA_70B, 69.503), (MIXTRAL, 12.749), (DEEPSEEK_V3, 36.625)):
        c = decode_ceiling(model, weights_fmt="bf16", bandwidth_tbps=1.0)
        assert c.weight_bytes_touched / 2 == pytest.approx(billions * 1e9, rel=2e-3)


def test_moe_expected_experts_and_batch_ceiling():
    assert expected_experts_hit(8, 2, 1) == pytest.approx(2)
    assert expected_experts_hit(8, 2, 4) == pytest.approx(8 * (1 - 0.75**4))  # 5.46875
    assert expected_experts_hit(256, 8, 10_000) == pytest.approx(256)
    non_expert = 2 * (EMBMX + NORMMX + 32 * ROUTERMX) + 0.5625 * 32 * ATTNMX  # no input table
    expert_bytes = 0.5625 * 32 * 8 * EXPERTMX
    c = decode_ceiling(MIXTRAL, weights_fmt="nvfp4", bandwidth_tbps=4.8, batch=4)
    step4 = (non_expert + expert_bytes * 5.46875 / 8) / 4.8e12
    assert c.tokens_per_s_at_batch == pytest.approx(4 / step4)
    assert c.tokens_per_s_batch1 == pytest.approx(4.8e12 / (non_expert + expert_bytes * 2 / 8))


def test_tp_and_pp_ceilings():
    one = decode_ceiling(LLAMA_70B, weights_fmt="fp8", bandwidth_tbps=4.8)
    tp8 = decode_ceiling(LLAMA_70B, weights_fmt="fp8", bandwidth_tbps=4.8, tp=8)
    per_rank = (LIN70 + 2 * EMB70) / 8 + 2 * NORM70  # lm_head sharded, norms replicated
    assert tp8.tokens_per_s_batch1 == pytest.approx(4.8e12 / per_rank)
    pp2 = decode_ceiling(LLAMA_70B, weights_fmt="fp8", bandwidth_tbps=4.8, pp=2, batch=8)
    assert pp2.tokens_per_s_batch1 == pytest.approx(one.tokens_per_s_batch1)  # stages in series
    assert pp2.tokens_per_s_at_batch == pytest.approx(2 * 4 * one.tokens_per_s_batch1)


def test_cost_per_million_tokens():
    assert cost_per_million_tokens(3.6, 1, 1000) == pytest.approx(1.0)
    assert cost_per_million_tokens(3.6, 8, 1000) == pytest.approx(8.0)
    assert cost_per_million_tokens(3.5, 1 / 7, 100) == pytest.approx(3.5 / 7 / 3600 / 100 * 1e6)
    assert cost_per_million_tokens(3.6, 1, 0) == math.inf


def test_tied_embeddings():
    tiny = arch("tiny-tied", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16,
                intermediate=128, vocab=1000, max_position=512, tied_embeddings=True)
    layer = 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64
    assert total_params(tiny) == 1000 * 64 + 2 * layer + 64  # one shared table
    w = weight_bytes(tiny, "bf16", pp=2)
    # the last stage keeps its own copy of the table for the output projection
    assert w.stage_bytes == (2 * (1000 * 64 + layer), 2 * (layer + 64 + 1000 * 64))
    c = decode_ceiling(tiny, weights_fmt="bf16", bandwidth_tbps=1.0)
    assert c.weight_bytes_touched == 2 * total_params(tiny)  # the tied table is read by lm_head


# ---- the planner's figures hold (issue: decode bound, attention DP, the runtime's KV pool) ------------
def test_tokens_per_block_is_the_runtimes_page_size():
    """The pool is counted in KvCacheConfig.tokens_per_block pages, not a fixed 32."""
    mem = 141_000_000_000
    kw = dict(weights_fmt="fp8", kv_fmt="fp8", max_seq_len=1000, max_batch_size=8, max_num_tokens=8192)
    c32 = unit_capacity(LLAMA_70B, mem, **kw)
    c128 = unit_capacity(LLAMA_70B, mem, tokens_per_block=128, **kw)
    assert c128.kv_pool_bytes == c32.kv_pool_bytes
    per_token = 80 * 2 * 8 * 128 * 1  # fp8 KV, all 80 layers on one GPU
    assert c128.blocks_in_pool == math.floor(c128.kv_pool_bytes / (per_token * 128))
    assert c128.blocks_per_sequence == 8  # 1000 tokens -> 8 pages of 128 (1024 token slots)
    assert c128.max_sequences == c128.blocks_in_pool // 8
    assert c32.blocks_per_sequence == 32 and c32.max_sequences == c32.blocks_in_pool // 32


def test_reserve_is_made_of_named_terms():
    mem = 80 * GiB
    cap = unit_capacity(LLAMA_8B, mem, weights_fmt="bf16", max_seq_len=4096, max_batch_size=8, max_num_tokens=4096)
    terms = {t.name: t.bytes for t in cap.reserve}
    assert terms == {"activations": 4096 * 4096 * 8 * 2, "runtime": 1 * GiB}  # 80 GiB / 64 capped at 1 GiB
    assert cap.reserve_bytes == sum(terms.values())
    assert cap.kv_pool_bytes == pytest.approx(0.9 * (mem - cap.weight_bytes - cap.reserve_bytes))


def _figures(arch_, model_kw, gpu_, workload=None, unit_gpus=(0,)):
    from types import SimpleNamespace

    from compiler.capacity.report import Sizing, unit_figures

    sizing = Sizing(**{"weights_fmt": "fp8", "kv_fmt": "fp8", "exclude": ("lm_head",), "overrides": (),
                       "block_size": None, "tp": 1, "pp": 1, "attention_dp": False, "max_seq_len": 8192,
                       "max_batch_size": 64, "max_num_tokens": 8192, "kv_cache_memory_fraction": 0.9,
                       "tokens_per_block": 32, "reserves_whole_request": False, "workload": workload,
                       **model_kw})
    unit = SimpleNamespace(id="h/gpu0", host="h", model="m", gpu_indexes=tuple(unit_gpus), mig=None,
                           instances_on_gpu=1)
    return unit_figures(unit, sizing, arch_, gpu_, None)


def test_decode_bound_follows_the_workload_not_max_seq_len():
    """128 in / 4096 out on a max_seq_len of 8192: each decode step reads a mean context of
    128 + 4096/2 tokens, not 8192; the bound (bytes a step must stream over the bandwidth) is
    then above what the max_seq_len figure claimed, so that figure was no ceiling for this traffic."""
    from compiler.capacity.workload import traffic_shape

    gpu_ = H200
    plain = _figures(LLAMA_8B, {}, gpu_)
    shaped = _figures(LLAMA_8B, {}, gpu_, traffic_shape(128, 4096))
    context = 128 + 4096 * 4096 / (2 * 4096)
    assert context == 2176
    kv_token = 32 * 2 * 8 * 128  # fp8 KV of Llama-3.1-8B: 32 layers, 8 KV heads of 128
    # sequences held: tokens produced so far (MAX_UTILIZATION), in 32-token pages
    pages = math.ceil(context / 32)
    seqs = shaped.capacity.blocks_in_pool // pages
    batch = min(64, seqs)
    assert shaped.decode.batch == batch == 64
    touched = shaped.decode.weight_bytes_touched
    step = (touched + batch * context * kv_token) / (4.8e12)
    assert shaped.decode.tokens_per_s_at_batch == pytest.approx(batch / step)
    # the max_seq_len figure charges 8192 tokens a sequence: it is below the workload's bound
    assert plain.decode.tokens_per_s_at_batch < shaped.decode.tokens_per_s_at_batch
    assert any("mean context 2,176 tokens" in a for a in shaped.assumptions)
    assert any("max_seq_len 8,192 (no workload" in a for a in plain.assumptions)


def test_workload_distribution_uses_the_second_moment():
    from compiler.capacity.workload import traffic_shape

    w = traffic_shape([(100, 0.5), (300, 0.5)], [(10, 0.75), (1000, 0.25)])
    mean_out = 10 * 0.75 + 1000 * 0.25
    out_sq = 100 * 0.75 + 1_000_000 * 0.25
    assert w.mean_input == 200 and w.mean_output == mean_out
    assert w.decode_context == pytest.approx(200 + out_sq / (2 * mean_out))
    assert w.held_tokens(reserves_whole_request=True) == pytest.approx(200 + out_sq / mean_out)


def test_attention_dp_replicates_attention_and_splits_the_kv_by_request():
    """DeepSeek-V3 on 8 GPUs, tp=8 with attention DP: every rank holds whole attention, dense and
    shared-expert weights, embeddings and lm_head, and 1/8 of the routed experts; its KV cache
    holds the whole MLA latent of its own sequences, so the unit holds 8 pools' worth of sequences."""
    mem, reserve = 180e9, 3 * GiB
    kw = dict(weights_fmt="nvfp4", kv_fmt="bf16", tp=8, max_seq_len=32768, max_batch_size=16,
              activation_reserve_bytes=reserve)
    tp_only = unit_capacity(DEEPSEEK_V3, mem, **kw)
    adp = unit_capacity(DEEPSEEK_V3, mem, attention_dp=True, **kw)
    h = 7168
    attn = 61 * (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * h + h * 1536 + h * 576)
    dense_mlp = 3 * 3 * h * 18432
    shared = 58 * 3 * h * 2048
    experts = 58 * 256 * 3 * h * 2048
    embed_head = 2 * 129280 * h
    norms_routers = 61 * (2 * h + 1536 + 512) + h + 58 * 256 * h
    weights = 0.5625 * (attn + dense_mlp + shared + experts / 8) + 2 * (embed_head + norms_routers)
    assert adp.weight_bytes == pytest.approx(weights)
    assert adp.weight_bytes > tp_only.weight_bytes
    assert adp.kv_bytes_per_token == tp_only.kv_bytes_per_token == 61 * 576 * 2  # MLA latent is whole either way
    blocks = math.floor(0.9 * (mem - weights - reserve) / (61 * 576 * 2 * 32))
    assert adp.ranks == 8 and adp.max_sequences == 8 * (blocks // 1024)
    assert adp.batch_reachable == (adp.max_sequences >= 8 * 16)


def test_attention_dp_decode_spreads_sequences_over_the_ranks():
    adp = decode_ceiling(DEEPSEEK_V3, weights_fmt="nvfp4", bandwidth_tbps=8.0, batch=64, context_len=4096,
                         tp=8, attention_dp=True)
    tp_only = decode_ceiling(DEEPSEEK_V3, weights_fmt="nvfp4", bandwidth_tbps=8.0, batch=64, context_len=4096, tp=8)
    # each rank reads the latent of its 8 sequences only; under plain TP every rank reads all 64
    assert adp.kv_bytes_read == pytest.approx(8 * 4096 * 61 * 576 * 2)
    assert tp_only.kv_bytes_read == pytest.approx(64 * 4096 * 61 * 576 * 2)
    assert adp.tokens_per_s_at_batch > tp_only.tokens_per_s_at_batch


def test_glob_fast_path_agrees_with_every_name():
    """ModuleGroup.matches decides globs without digits, `?` or `[` on one name; the answer must be
    the one a walk over every concrete module gives."""
    from fnmatch import fnmatchcase

    patterns = ["*experts*", "*mlp.gate", "*down_proj", "model.layers.*.mlp.experts.*.up_proj", "lm_head",
                "*self_attn*", "*shared_experts*", "*.experts.*", "model.norm", "*gate*", "*q_a_proj"]
    for a in (QWEN3_235B, DEEPSEEK_V3, MIXTRAL):
        for g in inventory(a):
            for p in patterns:
                assert g.matches(p) == any(fnmatchcase(n, p) for n in g.names()), (a.name, g.pattern, p)
