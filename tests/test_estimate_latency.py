"""TTFT and TPOT at a percentile from the step model (compiler/capacity/estimate_latency.py), and the
headline at the sla: hand-computed arrivals per pass, p50 and p99 from the same passes, the largest
concurrency meeting the sla, saturation as the second figure."""

from __future__ import annotations

import math

import pytest

from compiler.capacity.estimate import Shape, cohort_work, concurrency_points, prefill_work
from compiler.capacity.estimate_latency import largest_meeting, latency_point
from compiler.capacity.estimate_unit import Traffic, coefficients_for, unit_estimate
from compiler.catalog.gpus import load_gpu_catalog
from compiler.catalog.models import load_model_catalog

COEF = {"memory": 1.1, "compute": 1.6, "experts": 0.0, "link": 1.8, "calls": 3e-5, "steps": 0.001, "requests": 4e-6, "layers": 0.0, "vector": 0.0}


@pytest.fixture(scope="module")
def shape() -> Shape:
    return Shape(arch=load_model_catalog()["llama-3.1-8b"], gpu=load_gpu_catalog()["H100-SXM5-80GB"],
                 weights_fmt="fp8", kv_fmt="fp8")


def test_one_request_alone_waits_for_nothing(shape) -> None:
    p = latency_point(shape, COEF, 1, 1000, 100, 1050, "p99")
    assert p.ttft_ms == pytest.approx(prefill_work(shape, 1000, 0, 1050).time(COEF) * 1e3)
    w = cohort_work(shape, 1, 1000, 100, 1050)
    # alone, no prompt shares its passes: p99 TPOT is the mean pass, the bandwidth time and the per-pass costs
    assert p.tpot_ms == pytest.approx(w.time(COEF) / w.steps * 1e3)


def test_p99_by_hand_at_64_in_flight(shape) -> None:
    # 64 requests of 1,000 in / 100 out: max(100, 64 x 1,100 / 8,192) = 100 passes; the 63 others start 0.63
    # prompts per pass; at p99 a pass carries 0.63 + 2.3263 x sqrt(0.63) = 2.476 prompts besides a request's own
    w = cohort_work(shape, 64, 1000, 100, 1050)
    assert w.steps == 100
    mean_pass = w.time(COEF) / 100
    others = 0.63 + 2.3263 * math.sqrt(0.63)
    own = prefill_work(shape, 1000 * (1 + others), 63, 1050, prompt_len=1000).time(COEF)
    p99 = latency_point(shape, COEF, 64, 1000, 100, 1050, "p99")
    assert p99.ttft_ms == pytest.approx((0.99 * mean_pass * 63 / 64 + own) * 1e3)
    marginal = (prefill_work(shape, 2000, 63, 1050, prompt_len=1000).time(COEF)
                - prefill_work(shape, 1000, 63, 1050).time(COEF))
    assert p99.tpot_ms == pytest.approx((mean_pass + 2.3263 * math.sqrt(0.63) * marginal / math.sqrt(99)) * 1e3)
    p50 = latency_point(shape, COEF, 64, 1000, 100, 1050, "p50")
    assert p50.tpot_ms == pytest.approx(mean_pass * 1e3)  # p50: the mean pass
    assert p50.ttft_ms < p99.ttft_ms and p50.tpot_ms < p99.tpot_ms
    assert p50.output_tokens_per_s == p99.output_tokens_per_s == pytest.approx(6400 / w.time(COEF))


def test_the_largest_concurrency_meeting_the_sla(shape) -> None:
    pts = {c: latency_point(shape, COEF, c, 1000, 200, 1100, "p99") for c in concurrency_points(256)}
    assert all(pts[a].tpot_ms <= pts[b].tpot_ms for a, b in zip(sorted(pts), sorted(pts)[1:]))
    target = (pts[16].tpot_ms + pts[32].tpot_ms) / 2
    best = largest_meeting(shape, COEF, 256, 1000, 200, 1100, {"tpot_ms": target, "percentile": "p99"})
    assert 16 <= best.concurrency < 32 and best.tpot_ms <= target
    assert latency_point(shape, COEF, best.concurrency + 1, 1000, 200, 1100, "p99").tpot_ms > target
    assert largest_meeting(shape, COEF, 256, 1000, 200, 1100, {"tpot_ms": pts[1].tpot_ms / 2}) is None
    assert largest_meeting(shape, COEF, 256, 1000, 200, 1100, {"ttft_ms": 1e9}).concurrency == 256


def test_the_headline_is_at_the_sla_and_saturation_is_the_second_figure(shape) -> None:
    coef = coefficients_for("Hopper", "fp8", "1.0")
    traffic = Traffic(1000, 200, 1100, "t")
    kw = dict(shape=shape, batch=256, traffic=traffic, coef=coef, ceiling_tokens_per_s=1e9, price_share=1.0,
              price_per_gpu_hour=3.0)
    none = unit_estimate(**kw)
    assert none["concurrency"] == 256 and none["saturation"] is None and none["percentile"] == "p50"
    tpot32 = latency_point(shape, coef.coefficients, 32, 1000, 200, 1100, "p99").tpot_ms
    e = unit_estimate(**kw, sla={"tpot_ms": tpot32 * 1.0001, "percentile": "p99"})
    assert e["sla_met"] and e["concurrency"] == e["sla_concurrency"] >= 32 and e["percentile"] == "p99"
    sat = e["saturation"]
    assert sat["concurrency"] == 256
    assert e["output_tokens_per_s"]["value"] < sat["output_tokens_per_s"]["value"]
    assert e["cost_per_million_tokens"]["value"] > sat["cost_per_million_tokens"]["value"]
    assert e["tpot_ms"]["value"] <= tpot32 * 1.0001
    missed = unit_estimate(**kw, sla={"ttft_ms": 1e-3})
    assert missed["sla_met"] is False and missed["concurrency"] == 1 and missed["sla_concurrency"] is None
