"""The MoE runner's workspace in the profiling pass that sizes TensorRT-LLM's KV cache, on hand-computed
cases (compiler/capacity/moe_workspace.py, a port of CutlassMoeFCRunner::getWorkspaceDeviceBufferSizes
and of the attention-DP MoE token budget).

DeepSeek-V3: hidden 7,168, 256 experts, top-8, expert FFN 2,048 (gated). Mixtral 8x7B: hidden 4,096,
8 experts, top-2, FFN 14,336 (gated).
"""

from __future__ import annotations

import pytest

from compiler.capacity.memory import GiB, gpu_memory_bytes, unit_capacity
from compiler.capacity.moe_workspace import moe_rows, moe_workspace, runner_workspace
from compiler.catalog.gpus import load_gpu_catalog
from compiler.catalog.models import load_model_catalog


@pytest.fixture(scope="module")
def models():
    return load_model_catalog()


def test_attention_dp_sizes_the_moe_for_every_ranks_tokens(models) -> None:
    ds = models["deepseek-v3"]
    assert moe_rows(8192, 8, True) == 65_536  # max_num_tokens x dp_size
    assert moe_rows(8192, 8, False) == 8192
    assert moe_rows(8192, 8, True, moe_max_num_tokens=16_384) == 16_384  # the layer runs in chunks
    m = moe_workspace(ds, max_num_tokens=8192, weights_fmt="fp8_block", tp=8, ep=8, attention_dp=True)
    # 65,536 rows x top-8 = 524,288 expanded rows. FP8 block scaling: inputs max(permuted BF16, FC1 result,
    # FC2 output) = 524,288 x 7,168 x 2; outputs the gated FC1 output 2 x 524,288 x 2,048 x 2 (moe_tp 1);
    # five index arrays of 524,288 x 4 B; 256 experts is a power of two (no softmax buffer)
    ws = 524_288 * 7168 * 2 + 2 * 524_288 * 2048 * 2 + 5 * 524_288 * 4
    assert m.workspace_bytes == ws == 11_821_645_824
    # gathered: every rank's hidden states in and out (BF16) and their router logits (FP32)
    assert m.gathered_bytes == 65_536 * (2 * 7168 * 2 + 256 * 4) == 1_946_157_056
    # without attention DP: one rank's 8,192 tokens, the FFN split 8 ways (tp 8, ep 1)
    alone = moe_workspace(ds, max_num_tokens=8192, weights_fmt="fp8_block", tp=8, ep=1)
    assert alone.workspace_bytes == 65_536 * 7168 * 2 + 2 * 65_536 * 256 * 2 + 5 * 65_536 * 4
    assert alone.gathered_bytes == 0


def test_per_tensor_fp8_overlaps_the_gemm_buffers(models) -> None:
    mixtral = models["mixtral-8x7b"]
    # 8,192 rows x top-2 = 16,384 expanded; FFN 14,336 / tp 2 = 7,168; FP8 activations (1 B), BF16 GEMM outputs
    permuted, fc2 = 16_384 * 4096 * 1, 16_384 * 4096 * 2
    fc1, glu = 16_384 * 7168 * 1, 2 * 16_384 * 7168 * 2
    assert runner_workspace(mixtral, 8192, "fp8", moe_tp=2) == max(permuted, fc2, fc1) + max(glu, fc2, fc1) \
        + 5 * 16_384 * 4 == 604_307_456
    # BF16 activations: the FC1 result (16,384 x 7,168 x 2) is then the largest input; a dense model has none
    assert runner_workspace(mixtral, 8192, "bf16", moe_tp=2) == 16_384 * 7168 * 2 + glu + 5 * 16_384 * 4 \
        == 704_970_752
    assert runner_workspace(models["llama-3.1-8b"], 8192, "fp8") == 0


def test_the_kv_budget_per_rank_is_what_the_profiled_peak_leaves(models) -> None:
    """DeepSeek on 8 x H200 with attention DP: the pool is the fraction of memory less the weights and
    the profiled peak, which now holds 12.8 GiB of MoE workspace for all eight ranks' tokens."""
    ds, h200 = models["deepseek-v3"], load_gpu_catalog()["H200-SXM-141GB"]
    kw = dict(weights_fmt="fp8_block", kv_fmt="fp8", tp=8, max_seq_len=2048, max_batch_size=4096,
              max_num_tokens=8192, kv_cache_memory_fraction=0.9)
    adp = unit_capacity(ds, gpu_memory_bytes(h200), attention_dp=True, ep=8, **kw)
    terms = {t.name: t.bytes for t in adp.reserve}
    assert terms["moe-workspace"] == 11_821_645_824 + 1_946_157_056
    assert adp.kv_pool_bytes == pytest.approx((gpu_memory_bytes(h200) - adp.weight_bytes - sum(terms.values())) * 0.9)
    assert terms["moe-workspace"] / GiB == pytest.approx(12.82, abs=0.01)
    # each rank's pool in blocks of 32 tokens of 35,136 B (MLA: 576 x 61 layers x 1 B), 64 blocks a sequence
    per_rank = int(adp.kv_pool_bytes // (35_136 * 32)) // 64
    assert adp.max_sequences == 8 * per_rank
    tp = unit_capacity(ds, gpu_memory_bytes(h200), **kw)
    assert {t.name: t.bytes for t in tp.reserve}["moe-workspace"] < terms["moe-workspace"] / 10
