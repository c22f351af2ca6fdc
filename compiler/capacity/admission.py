"""How many requests TensorRT-LLM's capacity scheduler keeps in flight at once, in steady state.

A port of the scheduler's admission test, TensorRT-LLM v1.2.0 (the PyTorch executor binds the C++
scheduler: tensorrt_llm/_torch/pyexecutor/scheduler.py, BindCapacityScheduler, with max_num_requests
the engine's max_num_sequences = max_batch_size x micro-batches):

- GUARANTEED_NO_EVICT (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp,
  GuaranteedNoEvictScheduler::impl): running requests keep the blocks they need to completion
  (NoEvictScheduledBlocksManager); a new request is admitted only while the free blocks less that
  reservation cover its KVCacheManager::getRemainingBlocksToCompletion (kvCacheManager.cpp), which
  for a request with nothing allocated is ceil(min(prompt + max_new_tokens, window) / tokens_per_block).
  So the pool holds floor(blocks / that) requests; and no more than max_num_requests.
- MAX_UTILIZATION (MaxUtilizationScheduler::operator(), trySchedulingRequestMaxUtilization): a
  request is admitted while the blocks for its next step fit (getNeededBlocksOneStep), and the last
  started one is paused when they do not: the pool fills with what running requests hold now, on
  average their prompt, half their output (weighted by how long each runs) and half a block.
- Attention DP: every rank has its own KV cache manager and scheduler; the request queue admits up
  to tp x max_num_active_requests in all (tensorrt_llm/_torch/pyexecutor/executor_request_queue.py,
  _fetch_new_requests), so the unit admits ranks x the per-rank figure.

Pure arithmetic; the pool's size in blocks comes from memory.unit_capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GUARANTEED_NO_EVICT = "guaranteed_no_evict"
MAX_UTILIZATION = "max_utilization"


def blocks_to_completion(prompt: float, max_new_tokens: float, tokens_per_block: int,
                         window: float | None = None) -> int:
    """KVCacheManager::getRemainingBlocksToCompletion of a request not yet started (no sink tokens,
    beam width 1): its whole length, bounded by the attention window, in whole blocks."""
    tokens = prompt + max_new_tokens
    if window is not None:
        tokens = min(tokens, window)
    return max(1, math.ceil(tokens / tokens_per_block))


@dataclass(frozen=True)
class Admission:
    policy: str
    ranks: int  # attention-DP ranks, each with its own pool and scheduler (1 without attention DP)
    blocks_per_rank: int
    blocks_per_request: float  # what one admitted request holds, as the policy counts it
    per_rank: int  # requests one rank keeps in flight
    limited_by: str  # "KV blocks" or "max_batch_size"

    @property
    def total(self) -> int:
        return self.ranks * self.per_rank


def admitted(policy: str, *, blocks_per_rank: int, tokens_per_block: int, mean_input: float,
             held_output: float, max_num_requests: int, ranks: int = 1, window: float | None = None) -> Admission:
    """Requests in flight per rank and in all. `held_output`: the output tokens a request reserves
    (GUARANTEED_NO_EVICT: its max_new_tokens, E[O^2]/E[O] over a distribution, as requests that run
    longer are in flight longer) or, under MAX_UTILIZATION, the output it holds on average while
    running (E[O^2] / (2 E[O]))."""
    if blocks_per_rank < 0 or tokens_per_block < 1 or max_num_requests < 0 or ranks < 1:
        raise ValueError("blocks_per_rank >= 0, tokens_per_block >= 1, max_num_requests >= 0, ranks >= 1")
    if policy == GUARANTEED_NO_EVICT:
        per = float(blocks_to_completion(mean_input, held_output, tokens_per_block, window))
    elif policy == MAX_UTILIZATION:
        tokens = mean_input + held_output
        if window is not None:
            tokens = min(tokens, window)
        per = tokens / tokens_per_block + 0.5  # the block being filled is half full on average
    else:
        raise ValueError(f"unknown capacity scheduler policy {policy!r}")
    by_blocks = int(blocks_per_rank // per)
    if by_blocks >= max_num_requests:
        return Admission(policy, ranks, blocks_per_rank, per, max_num_requests, "max_batch_size")
    return Admission(policy, ranks, blocks_per_rank, per, by_blocks, "KV blocks")
