"""MoE and attention-DP arithmetic of the estimate (compiler/capacity/estimate.py) on hand-computed
cases: the experts' grouped GEMMs in whole tiles, the exchange around MoE layers under attention DP,
prompts packed per rank, and the estimate still under its ceiling."""

from __future__ import annotations

import pytest

from compiler.capacity.estimate import (MOE_TILE_TOKENS, Shape, cohort_work, exchange_terms, expert_gemm_flops,
                                        point)
from compiler.catalog.gpus import load_gpu_catalog
from compiler.catalog.models import load_model_catalog

# Mixtral-8x7B: 32 layers, hidden 4,096, expert width 14,336, gated: 2 x 3 x 4096 x 14336 x 32 FLOPs per
# token per expert it is routed to
MIXTRAL_PER_TOKEN_EXPERT = 11_274_289_152


@pytest.fixture(scope="module")
def models():
    return load_model_catalog()


def test_a_few_tokens_per_expert_cost_whole_tiles(models) -> None:
    mixtral = models["mixtral-8x7b"]
    assert MOE_TILE_TOKENS == 128
    # 8 tokens, top-2 of 8: 8 x (1 - 0.75^8) = 7.19910 experts hit, 2.22 tokens each -> one tile each
    real, tiled = expert_gemm_flops(mixtral, 8, 1)
    assert real == pytest.approx(MIXTRAL_PER_TOKEN_EXPERT * 16)
    assert tiled == pytest.approx(MIXTRAL_PER_TOKEN_EXPERT * 8 * (1 - 0.75 ** 8) * 128, rel=1e-9)
    # 4,096 tokens: every expert hit, 1,024 tokens each = 8 whole tiles: nothing lost
    real, tiled = expert_gemm_flops(mixtral, 4096, 3)
    assert tiled == pytest.approx(real) == pytest.approx(MIXTRAL_PER_TOKEN_EXPERT * 4096 * 2 * 3, rel=1e-6)
    # 600 tokens: 150 each -> 2 tiles (256 token slots) per expert
    real, tiled = expert_gemm_flops(mixtral, 600, 1)
    assert tiled / real == pytest.approx(256 / 150, rel=1e-6)
    assert expert_gemm_flops(models["llama-3.1-8b"], 1000, 10) == (0.0, 0.0)


def test_attention_dp_exchanges_around_moe_layers_only(models) -> None:
    ds = models["deepseek-v3"]
    h200 = load_gpu_catalog()["H200-SXM-141GB"]
    moe_layers = ds.layers - ds.dense_layers
    assert (ds.layers, ds.dense_layers, ds.hidden) == (61, 3, 7168)
    ring = 2 * 7 / 8 * 1000 * 7168 * 2  # 25,088,000 bytes per exchange
    adp = Shape(arch=ds, gpu=h200, weights_fmt="fp8", kv_fmt="fp8", tp=8, attention_dp=True)
    assert exchange_terms(adp, 1000, 10) == (pytest.approx(ring * moe_layers), 2 * moe_layers * 10)
    tp = Shape(arch=ds, gpu=h200, weights_fmt="fp8", kv_fmt="fp8", tp=8)
    assert exchange_terms(tp, 1000, 10) == (pytest.approx(ring * 2 * 61), 2 * 61 * 10)
    assert adp.ranks == 8 and tp.ranks == 1


def test_attention_dp_packs_prompts_per_rank(models) -> None:
    ds = models["deepseek-v3"]
    h200 = load_gpu_catalog()["H200-SXM-141GB"]
    adp = Shape(arch=ds, gpu=h200, weights_fmt="fp8", kv_fmt="fp8", tp=8, attention_dp=True, max_num_tokens=8192)
    tp = Shape(arch=ds, gpu=h200, weights_fmt="fp8", kv_fmt="fp8", tp=8, max_num_tokens=8192)
    # 1,024 requests of 1,000 in / 100 out: 128 per rank x 1,100 = 140,800 tokens per rank -> 17.19 passes,
    # under the 100 decode steps; one scheduler for all 1,024 would need 137.5
    assert cohort_work(adp, 1024, 1000, 100, 1050).steps == 100
    assert cohort_work(tp, 1024, 1000, 100, 1050).steps == pytest.approx(1024 * 1100 / 8192)


def test_moe_estimates_stay_under_the_ceiling(models) -> None:
    gpus = load_gpu_catalog()
    coef = {"memory": 1.0, "compute": 1.0, "experts": 0.0, "link": 0.0, "calls": 0.0, "steps": 0.0, "requests": 0.0, "layers": 0.0, "vector": 0.0}
    for key, gpu, fmt, tp, adp in (("deepseek-v3", "H200-SXM-141GB", "fp8", 8, True),
                                   ("gpt-oss-120b", "B200-180GB", "mxfp4", 1, False),
                                   ("qwen3-235b-a22b", "H100-SXM5-80GB", "fp8", 8, False)):
        s = Shape(arch=models[key], gpu=gpus[gpu], weights_fmt=fmt, kv_fmt="fp8", tp=tp, attention_dp=adp)
        for batch in (1, 64, 1024):
            p = point(s, coef, batch, 1000, 1000, 1500)
            assert 0 < p.output_tokens_per_s <= p.ceiling_tokens_per_s * (1 + 1e-9), (key, batch)


def test_attention_dp_is_a_mode_the_rows_do_not_hold(models) -> None:
    from compiler.capacity.estimate_unit import Traffic, coefficients_for, interval_distance

    ds = models["deepseek-v3"]
    b200 = load_gpu_catalog()["B200-180GB"]
    coef = coefficients_for("Blackwell", "nvfp4", "1.0")
    traffic = Traffic(1024, 1024, 1536, "t")
    adp = Shape(arch=ds, gpu=b200, weights_fmt="nvfp4", kv_fmt="fp8", tp=8, attention_dp=True)
    tp = Shape(arch=ds, gpu=b200, weights_fmt="nvfp4", kv_fmt="fp8", tp=8)
    r_adp, d_adp = interval_distance(adp, 256, traffic, coef)
    r_tp, d_tp = interval_distance(tp, 256, traffic, coef)
    # DeepSeek's family is unseen (1) either way; attention DP is one step more
    assert any("family deepseek" in r for r in r_tp) and d_adp == d_tp + 1.0
    assert any("attention data parallelism" in r for r in r_adp)
