"""The capacity scheduler's admission (compiler/capacity/admission.py) on hand-computed cases, and the
plan's concurrency following from it (attention DP: each rank its own pool and its own limit)."""

from __future__ import annotations

import pytest

from compiler.capacity.admission import (GUARANTEED_NO_EVICT, MAX_UTILIZATION, admitted, blocks_to_completion)


def test_blocks_to_completion_is_the_whole_request_in_whole_blocks() -> None:
    assert blocks_to_completion(1000, 1000, 32) == 63  # 2,000 tokens / 32 = 62.5 -> 63
    assert blocks_to_completion(1024, 1024, 32) == 64
    assert blocks_to_completion(1000, 9000, 32, window=4096) == 128  # bounded by the attention window
    assert blocks_to_completion(0, 1, 32) == 1


def test_guaranteed_no_evict_reserves_each_request_to_completion() -> None:
    # 10,000 blocks of 32 tokens, requests of 1,000 in and 1,000 out: 63 blocks each -> 158 (10,000 / 63 = 158.7)
    a = admitted(GUARANTEED_NO_EVICT, blocks_per_rank=10_000, tokens_per_block=32, mean_input=1000,
                 held_output=1000, max_num_requests=256)
    assert (a.per_rank, a.total, a.limited_by, a.blocks_per_request) == (158, 158, "KV blocks", 63)
    capped = admitted(GUARANTEED_NO_EVICT, blocks_per_rank=10_000, tokens_per_block=32, mean_input=1000,
                      held_output=1000, max_num_requests=128)
    assert (capped.per_rank, capped.limited_by) == (128, "max_batch_size")


def test_max_utilization_fills_the_pool_with_what_requests_hold_now() -> None:
    # held now: 1,000 prompt + 500 output on average = 1,500 tokens = 46.875 blocks + half a block = 47.375
    a = admitted(MAX_UTILIZATION, blocks_per_rank=10_000, tokens_per_block=32, mean_input=1000,
                 held_output=500, max_num_requests=1024)
    assert a.blocks_per_request == pytest.approx(47.375)
    assert a.per_rank == 211  # 10,000 / 47.375 = 211.08


def test_attention_dp_ranks_each_admit_their_own() -> None:
    # 8 ranks, each its own 10,000-block pool and its own max_batch_size of 128: 8 x 128, not 8 x 158
    a = admitted(GUARANTEED_NO_EVICT, blocks_per_rank=10_000, tokens_per_block=32, mean_input=1000,
                 held_output=1000, max_num_requests=128, ranks=8)
    assert (a.per_rank, a.total) == (128, 1024)
    small = admitted(GUARANTEED_NO_EVICT, blocks_per_rank=1_000, tokens_per_block=32, mean_input=1000,
                     held_output=1000, max_num_requests=128, ranks=8)
    assert (small.per_rank, small.total, small.limited_by) == (15, 120, "KV blocks")  # 1,000 / 63 = 15.9


def test_unknown_policy_and_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        admitted("static_batch_of_one", blocks_per_rank=1, tokens_per_block=32, mean_input=1, held_output=1,
                 max_num_requests=1)
    with pytest.raises(ValueError):
        admitted(GUARANTEED_NO_EVICT, blocks_per_rank=1, tokens_per_block=0, mean_input=1, held_output=1,
                 max_num_requests=1)
