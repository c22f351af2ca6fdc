"""Performance estimate: the step model's arithmetic on hand-computed cases, the fit, the coefficient
data and its fallbacks, and the estimate never above the ceiling (every example, every published row).

Constants are worked out here from the formulas in compiler/capacity/estimate.py's docstring, not by
calling the helpers under test: Llama-3.1-8B multiplies 8,030,261,248 - 128,256 x 4,096 =
7,504,924,672 parameters per token and spends 4 x 32 layers x 32 heads x 128 = 524,288 attention
FLOPs per token of context.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from compiler.capacity.estimate import (Shape, cohort_steps, cohort_work, concurrency_points,
                                        point, prefill_work)
from compiler.capacity.estimate_calibrate import calibrate
from compiler.capacity.estimate_fit import (Measured, fit, fit_groups, published_case, release_of)
from compiler.capacity.estimate_unit import Traffic, coefficient_table, coefficients_for, unit_estimate
from compiler.capacity.roofline import decode_ceiling
from compiler.catalog.gpus import load_gpu_catalog
from compiler.catalog.models import load_model_catalog
from compiler.pipeline import validate_path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "tests" / "data" / "perf" / "trtllm-published-throughput.json"
ACTIVE_8B = 7_504_924_672
ATTN_8B = 524_288
UNIT = {"memory": 1.0, "compute": 1.0, "experts": 0.0, "link": 1.0, "calls": 0.0, "steps": 0.0, "requests": 0.0,
        "layers": 0.0, "vector": 0.0}


@pytest.fixture(scope="module")
def llama8b():
    return load_model_catalog()["llama-3.1-8b"]


@pytest.fixture(scope="module")
def h100():
    return load_gpu_catalog()["H100-SXM5-80GB"]


@pytest.fixture(scope="module")
def published() -> list[Measured]:
    rows = json.loads(ROWS.read_text(encoding="utf-8"))["rows"]
    cases = [published_case(r) for r in rows]
    assert all(c is not None for c in cases), "every published model and GPU is in the catalog"
    return cases


def test_steps_are_the_decode_steps_until_prompts_overflow_max_num_tokens() -> None:
    assert cohort_steps(100, 1000, 100, 8192) == 100  # 100 x 1100 = 110,000 tokens in 100 passes of <= 8,192
    assert cohort_steps(1000, 1000, 100, 8192) == pytest.approx(1_100_000 / 8192)


def test_cohort_terms_by_hand(llama8b, h100) -> None:
    s = Shape(arch=llama8b, gpu=h100, weights_fmt="fp8", kv_fmt="fp8")
    w = cohort_work(s, 4, 1000, 100, 1050)
    flops = 2 * ACTIVE_8B * 4 * 1100 + ATTN_8B * 4 * 100 * 1050 + ATTN_8B * 4 * 1000 * 1000 / 2
    assert w.terms["compute"] == pytest.approx(flops / 1979e12)  # H100 FP8 dense peak
    assert w.terms["compute"] == pytest.approx(0.0340132, rel=1e-5)
    # memory: 100 decode steps of the roofline at batch 4 and context 1,050
    step = decode_ceiling(llama8b, weights_fmt="fp8", kv_fmt="fp8", bandwidth_tbps=3.35, batch=4,
                          context_len=1050).step_ms / 1e3
    assert w.terms["memory"] == pytest.approx(100 * step)
    assert w.terms["link"] == w.terms["calls"] == 0  # one GPU reduces nothing
    assert w.steps == w.terms["steps"] == 100
    assert w.output_tokens == 400
    assert w.ceiling_s == pytest.approx(100 * step)
    # off the tensor cores: 4,400 tokens x 32 layers x 4,096 over 132 SMs x 1,980 MHz; 32 layers a pass
    assert w.terms["vector"] == pytest.approx(4400 * 32 * 4096 / (132 * 1980e6))
    assert w.terms["layers"] == 100 * 32


def test_what_does_not_scale_with_the_tensor_peaks_by_hand(llama8b) -> None:
    """An NVFP4 checkpoint's attention runs at the FP8 KV cache's peak, its GEMMs at FP4's; the work
    off the tensor cores at SMs x clock, which a GPU without a catalogued SM count gets from its
    BF16 peak (GB200: 2,500 TFLOPS / (8,192 FLOPs per SM-clock x 1,965 MHz) = 155.3 SMs)."""
    gpus = load_gpu_catalog()
    b200, gb200 = gpus["B200-180GB"], gpus["GB200-186GB"]
    w = cohort_work(Shape(arch=llama8b, gpu=b200, weights_fmt="nvfp4", kv_fmt="fp8"), 4, 1000, 100, 1050)
    gemm = 2 * ACTIVE_8B * 4 * 1100
    attn = ATTN_8B * 4 * 100 * 1050 + ATTN_8B * 4 * 1000 * 1000 / 2
    assert w.terms["compute"] == pytest.approx(gemm / 9000e12 + attn / 4500e12)
    assert w.terms["vector"] == pytest.approx(4400 * 32 * 4096 / (148 * 1965e6))
    bf16 = cohort_work(Shape(arch=llama8b, gpu=b200, weights_fmt="nvfp4", kv_fmt="bf16"), 4, 1000, 100, 1050)
    assert bf16.terms["compute"] == pytest.approx(gemm / 9000e12 + attn / 2250e12)
    g = cohort_work(Shape(arch=llama8b, gpu=gb200, weights_fmt="nvfp4", kv_fmt="fp8"), 4, 1000, 100, 1050)
    assert g.terms["vector"] == pytest.approx(4400 * 32 * 4096 / (2500e12 / 8192))
    # tensor parallelism splits the GEMMs, not the norms of the replicated hidden states
    tp2 = cohort_work(Shape(arch=llama8b, gpu=b200, weights_fmt="nvfp4", kv_fmt="fp8", tp=2), 4, 1000, 100, 1050)
    assert tp2.terms["vector"] == pytest.approx(w.terms["vector"])
    assert tp2.terms["compute"] == pytest.approx(w.terms["compute"] / 2)


def test_tensor_parallel_terms_by_hand(llama8b, h100) -> None:
    s = Shape(arch=llama8b, gpu=h100, weights_fmt="fp8", kv_fmt="fp8", tp=2)
    w = cohort_work(s, 4, 1000, 100, 1050)
    # two all-reduces per layer per step, a ring moves 2 (tp-1)/tp of 4,400 tokens x 4,096 x 2 B each,
    # over one direction of NVLink (900 / 2 GB/s)
    assert w.terms["link"] == pytest.approx(2 * 1 / 2 * 4400 * 4096 * 2 * 64 / 450e9)
    assert w.terms["link"] == pytest.approx(0.00512637, rel=1e-5)
    assert w.terms["calls"] == 64 * 100
    assert w.terms["compute"] == pytest.approx(0.0340132 / 2, rel=1e-5)


def test_time_throughput_and_tpot_follow_from_the_coefficients(llama8b, h100) -> None:
    s = Shape(arch=llama8b, gpu=h100, weights_fmt="fp8", kv_fmt="fp8")
    w = cohort_work(s, 4, 1000, 100, 1050)
    coef = {"memory": 2.0, "compute": 1.5, "experts": 0.5, "link": 1.0, "calls": 0.0, "steps": 0.001, "requests": 0.0, "layers": 0.0, "vector": 0.0}
    t = 2.0 * w.terms["memory"] + 1.5 * w.terms["compute"] + 0.001 * 100
    assert w.time(coef) == pytest.approx(t)
    p = point(s, coef, 4, 1000, 100, 1050)
    assert p.output_tokens_per_s == pytest.approx(400 / t)
    assert p.tpot_ms == pytest.approx(t / 100 * 1e3)
    assert p.output_tokens_per_s < p.ceiling_tokens_per_s


def test_ttft_is_the_prompt_in_max_num_tokens_chunks(llama8b, h100) -> None:
    s = Shape(arch=llama8b, gpu=h100, weights_fmt="fp8", kv_fmt="fp8", max_num_tokens=2048)
    w = prefill_work(s, 5000, 48, 0)
    assert w.steps == 3  # 5,000 tokens in chunks of 2,048 - 48 = 2,000 beside 48 decode tokens
    assert w.terms["compute"] == pytest.approx((2 * ACTIVE_8B * (5000 + 48 * 3) + ATTN_8B * 5000 * 5000 / 2)
                                               / 1979e12)


def test_moe_decode_reads_only_the_experts_a_small_batch_hits(h100) -> None:
    mixtral = load_model_catalog()["mixtral-8x7b"]
    s = Shape(arch=mixtral, gpu=h100, weights_fmt="fp8", kv_fmt="fp8")
    one, many = cohort_work(s, 1, 100, 100, 150), cohort_work(s, 256, 100, 100, 150)
    # 2 of 8 experts at batch 1, all of them at 256: the bytes per token fall by far more than the batch
    assert one.terms["memory"] < many.terms["memory"] < 256 * one.terms["memory"] / 2


def test_fit_recovers_the_coefficients_that_made_the_times(published) -> None:
    true = {"memory": 1.3, "compute": 1.8, "experts": 0.4, "link": 2.0, "calls": 4e-5, "steps": 0.002, "requests": 3e-6,
            "layers": 2e-5, "vector": 3.0}
    cases = [Measured(c.label, c.group, c.work, c.work.output_tokens / c.work.time(true), c.facts)
             for c in published[:150]]
    got = fit(cases)
    for k, v in true.items():
        assert got[k] == pytest.approx(v, rel=1e-4), k


def test_fit_keeps_coefficients_at_their_floors(published) -> None:
    # times faster than the peaks allow: the fit cannot go below 1 for memory and compute
    fast = {"memory": 0.5, "compute": 0.5, "experts": 0.0, "link": 0.0, "calls": 0.0, "steps": 0.0, "requests": 0.0, "layers": 0.0, "vector": 0.0}
    cases = [Measured(c.label, c.group, c.work, c.work.output_tokens / c.work.time(fast), c.facts)
             for c in published[:50]]
    got = fit(cases)
    assert got["memory"] >= 1.0 and got["compute"] >= 1.0
    assert all(v >= 0 for v in got.values())


def test_the_coefficient_data_is_what_the_fit_script_writes(published) -> None:
    """No coefficient is set by hand: refitting the packaged rows gives the packaged data."""
    table = coefficient_table()
    assert table["provenance"]["script"] == "scripts/fit_estimates.py"
    assert table["provenance"]["rows_used"] == len(published) == 507
    assert fit_groups(published) == table["groups"]
    assert calibrate(published) == table["interval"]  # the interval too: left-out residuals, refitted here
    assert table["interval"]["target_coverage"] == 0.9
    for key, g in table["groups"].items():
        assert g["residuals"]["rows"] > 0 and g["range"]["models"], key


def test_every_published_row_is_under_the_ceiling_and_so_is_its_estimate(published) -> None:
    groups = coefficient_table()["groups"]
    for c in published:
        ceiling = c.work.output_tokens / c.work.ceiling_s
        assert c.tokens_per_s <= ceiling, c.label
        for key in (c.group, "*"):
            estimate = c.work.output_tokens / c.work.time(groups[key]["coefficients"])
            assert estimate <= ceiling * (1 + 1e-9), (c.label, key)


def test_coefficients_fall_back_to_an_earlier_release_then_to_the_pooled_set() -> None:
    assert coefficients_for("Hopper", "fp8", "1.0.0").key == "Hopper/fp8/1.0"
    assert coefficients_for("Hopper", "fp8_block", "0.20.0").key == "Hopper/fp8/0.20"
    later = coefficients_for("Hopper", "fp8", "1.2.1")
    # a later release: the latest earlier one's, said in the sources, not a reason to widen
    assert later.key == "Hopper/fp8/1.0" and later.reasons == () and later.distance == 0
    assert "TensorRT-LLM 1.2 has no published rows for Hopper fp8" in later.sources[-1]
    assert coefficients_for("Hopper", "fp8", "0.18.0").key == "Hopper/fp8/0.17"
    # no rows for the generation or precision: the nearest fitted generation and precision, not a pool
    ampere = coefficients_for("Ampere", "bf16", "1.2.1")
    assert ampere.key == "Hopper/fp8/1.0" and "Ampere bf16" in ampere.reasons[0]
    assert ampere.distance == 1.75  # one generation and one precision away
    ultra = coefficients_for("Blackwell Ultra", "nvfp4", "1.2.1")
    assert ultra.key == "Blackwell/fp4/1.0" and ultra.distance == 0.5
    hopper_bf16 = coefficients_for("Hopper", "bf16", "1.2.1")
    assert hopper_bf16.key == "Hopper/fp8/1.0" and hopper_bf16.distance == 0.75
    # Blackwell FP8: the same GPU at FP4 is nearer than Hopper at FP8
    assert coefficients_for("Blackwell", "fp8", "1.2.1").key == "Blackwell/fp4/1.0"
    # a GDDR part is one memory system away from every fitted row, and says so
    gddr = coefficients_for("Blackwell", "nvfp4", "1.0", memory_class="GDDR")
    assert gddr.key == "Blackwell/fp4/1.0" and gddr.distance == 1.0 and "GDDR" in gddr.reasons[0]
    assert release_of("v0.20") == "0.20" and release_of("1.2.1") == "1.2"


def test_a_gddr_part_streams_at_its_own_memory_systems_share_of_peak() -> None:
    """GDDR6 reaches 846 of 864 GB/s in a streaming kernel (an L40), HBM3e 3,898 of 4,800 (an H200):
    the HBM-fitted memory efficiency is scaled by 0.812 / 0.979, never below 1 (the roofline); the
    other efficiencies are the fitted set's."""
    hbm = coefficients_for("Blackwell", "nvfp4", "1.0")
    gddr = coefficients_for("Blackwell", "nvfp4", "1.0", memory_class="GDDR")
    ratio = 0.812 / 0.979
    assert gddr.coefficients["memory"] == pytest.approx(max(1.0, hbm.coefficients["memory"] * ratio))
    assert gddr.coefficients["memory"] < hbm.coefficients["memory"]
    assert {k: v for k, v in gddr.coefficients.items() if k != "memory"} == \
        {k: v for k, v in hbm.coefficients.items() if k != "memory"}
    assert "scaled by 0.83" in gddr.reasons[0]
    # a set whose memory efficiency is near 1 is floored there: never faster than the GPU's peak
    assert coefficients_for("Hopper", "fp8", "1.0", memory_class="GDDR").coefficients["memory"] >= 1.0


def test_pcie_boards_reduce_over_their_own_pcie_generation(llama8b) -> None:
    gpus = load_gpu_catalog()
    l40s, rtx = gpus["L40S-48GB"], gpus["RTX-PRO-6000-Blackwell-Server-96GB"]
    assert (l40s.pcie_gen, l40s.link_gbps) == (4, 32.0)  # PCIe Gen4 x16, one direction
    assert (rtx.pcie_gen, rtx.link_gbps) == (5, 64.0)
    assert gpus["H100-SXM5-80GB"].link_gbps == 450.0  # NVLink 900 GB/s both directions
    w = cohort_work(Shape(arch=llama8b, gpu=l40s, weights_fmt="fp8", kv_fmt="fp8", tp=2), 4, 1000, 100, 1050)
    # two all-reduces per layer per step of 2 (tp-1)/tp x 4,400 tokens x 4,096 x 2 B over 32 GB/s
    assert w.terms["link"] == pytest.approx(2 * 1 / 2 * 4400 * 4096 * 2 * 64 / 32e9)


def test_the_interval_widens_outside_the_fit_and_never_passes_the_ceiling(llama8b, h100) -> None:
    s = Shape(arch=llama8b, gpu=h100, weights_fmt="fp8", kv_fmt="fp8")
    coef = coefficients_for("Hopper", "fp8", "1.0")
    inside = unit_estimate(shape=s, batch=512, traffic=Traffic(1000, 1000, 1500, "t"), coef=coef,
                           ceiling_tokens_per_s=1e9, price_share=1.0, price_per_gpu_hour=3.0)
    outside = unit_estimate(shape=s, batch=512, traffic=Traffic(1000, 9000, 5500, "t"), coef=coef,
                            ceiling_tokens_per_s=1e9, price_share=1.0, price_per_gpu_hour=3.0)
    assert inside["outside_calibration"] == []
    assert outside["outside_calibration"] == ["output length 9,000 is outside the fitted 128-4,096"]

    def logs(e):
        t = e["output_tokens_per_s"]
        return math.log(t["low"] / t["value"]), math.log(t["high"] / t["value"])

    # the interval is the calibration's class for the unit's distance from the rows (left-out residuals)
    classes = coefficient_table()["interval"]["classes"]
    assert [k["max_distance"] for k in classes] == [0.75, 1.75, 2.75]
    assert logs(inside) == pytest.approx((classes[0]["log_low"], classes[0]["log_high"]), abs=2e-3)
    assert logs(outside) == pytest.approx(logs(inside), abs=2e-3)  # one fact outside: half a step, the same class
    far = unit_estimate(shape=s, batch=8192, traffic=Traffic(1000, 9000, 5500, "t"), coef=coef,
                        ceiling_tokens_per_s=1e9, price_share=None, price_per_gpu_hour=None)
    assert len(far["outside_calibration"]) == 2  # output length and batch: one step
    lo, hi = logs(far)  # (the high side is capped by the roofline at this batch)
    assert lo == pytest.approx(classes[1]["log_low"], abs=2e-3) and hi <= classes[1]["log_high"] + 2e-3
    ampere = coefficients_for("Ampere", "bf16", "1.0")
    beyond = unit_estimate(shape=s, batch=8192, traffic=Traffic(1000, 9000, 5500, "t"), coef=ampere,
                           ceiling_tokens_per_s=1e9, price_share=None, price_per_gpu_hour=None)
    # 1.75 (generation, precision) + 1 (two facts): past the last class by 0, its interval
    lo, hi = logs(beyond)
    assert lo == pytest.approx(classes[2]["log_low"], abs=2e-3) and hi <= classes[2]["log_high"] + 2e-3
    assert all(a["log_low"] >= b["log_low"] and a["log_high"] <= b["log_high"] for a, b in zip(classes, classes[1:]))
    t = inside["output_tokens_per_s"]
    assert t["low"] < t["value"] < t["high"]
    cost = inside["cost_per_million_tokens"]
    assert cost["value"] == pytest.approx(3.0 / 3600 / t["value"] * 1e6, rel=1e-3)
    assert cost["low"] < cost["value"] < cost["high"]
    clamped = unit_estimate(shape=s, batch=512, traffic=Traffic(1000, 1000, 1500, "t"), coef=coef,
                            ceiling_tokens_per_s=t["value"] * 1.01, price_share=None, price_per_gpu_hour=None)
    assert clamped["output_tokens_per_s"]["high"] == pytest.approx(t["value"] * 1.01, rel=1e-3)
    assert clamped["cost_per_million_tokens"] is None
    assert inside["basis"] == "modelled" and inside["sources"]


def _examples() -> list[Path]:
    return sorted((ROOT / "examples").glob("*/kiln.yaml"))


@pytest.mark.parametrize("spec", _examples(), ids=lambda p: p.parent.name)
def test_every_example_estimate_is_under_its_ceiling(spec: Path) -> None:
    v = validate_path(spec)
    rows = v.resolved.capacity_rows()
    estimated = [r for r in rows if r["estimate"]]
    assert estimated, "an example with sized units has estimates"
    for r in estimated:
        e = r["estimate"]
        t = e["output_tokens_per_s"]
        assert t["low"] <= t["value"] <= t["high"] <= r["decode"]["tokens_per_s_at_batch"] * (1 + 1e-3), r["unit"]
        assert e["ceiling_tokens_per_s"] == pytest.approx(r["decode"]["tokens_per_s_at_batch"], rel=1e-3)
        assert e["concurrency"] == r["decode"]["batch"]
        assert e["basis"] in ("modelled", "calibrated", "measured")
        for p in e["curve"]:
            assert p["output_tokens_per_s"] > 0 and p["concurrency"] <= e["concurrency"]


def test_kiln_plan_gives_each_unit_its_estimate_beside_the_ceiling(tmp_path: Path, capsys) -> None:
    from compiler.cli import ExitCode, main

    spec = str(ROOT / "examples" / "h200-tp8-llama70b" / "kiln.yaml")
    store = str(tmp_path / "store")
    assert main(["plan", spec, "--store", store, "--format", "json"]) == ExitCode.OK
    (unit,) = json.loads(capsys.readouterr().out)["capacity"]["units"]
    e = unit["estimate"]
    for key in ("output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_per_million_tokens"):
        assert set(e[key]) == {"value", "low", "high"}, key
    assert e["concurrency"] == unit["decode"]["batch"] == 128
    assert e["basis"] == "modelled" and e["sources"] and e["curve"][-1]["concurrency"] == 128
    # Llama-3.1-70B in BF16 on H200 has no coefficients of its own: the nearest precision's, and the plan says so
    assert e["coefficients"] == "Hopper/fp8/1.0"
    assert any("no published rows for Hopper bf16" in r for r in e["outside_calibration"])
    # the cost from the estimate is above the cost the ceiling implies
    assert e["cost_per_million_tokens"]["value"] > unit["cost_per_million_tokens"]
    for fmt, head in (("text", "Estimate (the ceiling above is the bound)"),
                      ("markdown", "#### Estimate (the ceiling above is the bound)")):
        assert main(["plan", spec, "--store", store, "--format", fmt]) == ExitCode.OK
        out = capsys.readouterr().out
        assert head in out and "Ceiling tok/s (b=1 / b=N)" in out
        assert f"{e['output_tokens_per_s']['value']:,.0f} ({e['output_tokens_per_s']['low']:,.0f}-" in out
        assert "interval widened: no published rows for Hopper bf16" in out
