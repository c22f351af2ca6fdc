"""TTFT and TPOT at a percentile, from the step model (estimate.py), for a closed loop of
`concurrency` requests in flight (as AIPerf and `kiln tune` drive a unit).

In steady state a cohort of c requests takes `steps` passes, so on each attention-DP rank the
other requests start lambda = (c_rank - 1) / steps prompts per pass. Arrivals are counted as Poisson, so at the
percentile's z a pass carries lambda + z sqrt(lambda) prompts besides a request's own.

- TTFT: the pass already running when the request arrives (a uniform share of a mean pass: its
  percentile's quantile of it; none when the request is alone), then its prompt's pass(es) with the
  other prompts that start with it, beside the c - 1 decoding sequences, in max_num_tokens chunks
  (estimate.prefill_work). Queueing for admission is none: the curve stops at what the scheduler
  admits (admission.py).
- TPOT: the mean pass (cohort time / steps), plus the percentile's share of the spread a request's
  O - 1 passes average over: one more prompt in a pass costs `marginal`, and prompts per pass vary
  by sqrt(lambda), so a request's mean varies by sqrt(lambda) x marginal / sqrt(O - 1).

p50 and p99 come from the same passes; only the percentile's z and quantile differ.
"""

from __future__ import annotations

import math
from typing import Mapping

from compiler.capacity.estimate import Point, Shape, cohort_work, prefill_work

#: Standard normal quantiles and uniform quantiles of the percentiles an sla names.
Z = {"p50": 0.0, "p90": 1.2816, "p95": 1.6449, "p99": 2.3263}
QUANTILE = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def latency_point(s: Shape, coefficients: Mapping[str, float], concurrency: int, mean_input: float,
                  mean_output: float, decode_context: float, percentile: str = "p50") -> Point:
    """Throughput, and TTFT and TPOT at `percentile`, with `concurrency` requests in flight."""
    c = concurrency
    w = cohort_work(s, c, mean_input, mean_output, decode_context)
    t = w.time(coefficients)
    mean_pass = t / w.steps
    lam = (math.ceil(c / s.ranks) - 1) / w.steps  # the other requests on its rank start once a cohort
    z = Z[percentile]
    others = max(0.0, lam + z * math.sqrt(lam))
    wait = QUANTILE[percentile] * mean_pass * (c - 1) / c
    prompt = max(1.0, mean_input)
    own = prefill_work(s, prompt * (1 + others), c - 1, decode_context, prompt_len=prompt).time(coefficients)
    one = prefill_work(s, prompt, c - 1, decode_context).time(coefficients)
    two = prefill_work(s, 2 * prompt, c - 1, decode_context, prompt_len=prompt).time(coefficients)
    spread = math.sqrt(lam) * max(0.0, two - one) / math.sqrt(max(1.0, mean_output - 1))
    return Point(concurrency=c, output_tokens_per_s=w.output_tokens / t, ttft_ms=(wait + own) * 1e3,
                 tpot_ms=(mean_pass + z * spread) * 1e3, ceiling_tokens_per_s=w.output_tokens / w.ceiling_s)


def largest_meeting(s: Shape, coefficients: Mapping[str, float], limit: int, mean_input: float, mean_output: float,
                    decode_context: float, sla: Mapping) -> Point | None:
    """The point at the largest concurrency up to `limit` whose TTFT and TPOT at the sla's percentile
    meet its targets (None: not even one request does). Both grow with concurrency, so a bisection."""
    pct = sla.get("percentile") or "p99"

    def at(c: int) -> Point:
        return latency_point(s, coefficients, c, mean_input, mean_output, decode_context, pct)

    def meets(p: Point) -> bool:
        return ((sla.get("ttft_ms") is None or p.ttft_ms <= sla["ttft_ms"])
                and (sla.get("tpot_ms") is None or p.tpot_ms <= sla["tpot_ms"]))

    best = at(1)
    if not meets(best):
        return None
    top = at(limit)
    if meets(top):
        return top
    lo, hi = 1, limit  # lo meets, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = at(mid)
        if meets(p):
            lo, best = mid, p
        else:
            hi = mid
    return best
