"""Edits of examples/quickstart/kiln.yaml that several test modules make."""

from __future__ import annotations

import re


def only_tiny(text: str) -> str:
    """The quickstart with its second model (`tiny-awq`) and its MIG slice removed: one serving unit."""
    text, n = re.subn(r"\n  tiny-awq:\n(?:    .*\n|              .*\n)+", "\n", text)
    text = text.replace("          - {profile: 1g.10gb, serves: tiny-awq}\n", "")
    assert n == 1 and "tiny-awq" not in text, text
    return text


def on_engine_target(text: str) -> str:
    """The spec on `target: engine`, without quality gates (K807: the engine target cannot enforce one)."""
    text = re.sub(r"\n +quality_gate: \{[^}]*\}", "", text)
    return with_batcher_delay(text).replace("kiln: v1\n", "kiln: v1\ntarget: engine\n", 1)


def with_batcher_delay(text: str) -> str:
    """The quickstart's models with Triton's batching delay of 100 us, which only the engine target's
    models have (a dynamic batcher; on llmapi it has no effect, K613, so the example leaves it out)."""
    return text.replace("serving: {max_queue_size: 16,", "serving: {max_queue_delay_us: 100, max_queue_size: 16,")


TUNING = "    workload: {input_tokens: 32, output_tokens: 16}\n    sla: {ttft_ms: 200, tpot_ms: 40, percentile: p99}\n"


def with_tuning(text: str) -> str:
    """The quickstart with a workload and an SLA for `tiny` (what `kiln tune` needs), as the runs kept
    under tests/data/tune were made: 32 prompt and 16 output tokens, p99 TTFT <= 200 ms and TPOT <= 40 ms."""
    anchor = "    serving: {max_queue_size: 16, queue_timeout_ms: 1000}\n  tiny-awq:\n"
    assert anchor in text, "the quickstart's tiny model changed; update tests/quickstart.py"
    return text.replace(anchor, anchor.replace("\n  tiny-awq:", "\n" + TUNING.rstrip("\n") + "\n  tiny-awq:"), 1)


# The quickstart as the shared quantized store builds it (tests/conftest.py: quickstart_build): the
# INT4 model's gate evaluates on code from the training text (calib-code.jsonl; calibration stays on
# prose). On held-out text this small, overfitted model gets no measurably worse from 4-bit weights
# (its held-out perplexity even drops a little; see the calibration-domain table), which would leave
# tests/test_quantize.py's failing-gate case without a regression to catch. `tiny` (FP8) keeps its gate.
# Both models calibrate in one batch of 16 (the spec's default is one text a batch): the same tokens,
# a third of the CPU time here (AWQ's search runs once per batch), for the quantization this store
# makes and for each test that repeats it in memory to compare.
CALIBRATION = "calibration: {data: data/calib-prose.jsonl, samples: 16, max_seq_len: 128, seed: 7}"
ONE_BATCH = "calibration: {data: data/calib-prose.jsonl, samples: 16, max_seq_len: 128, seed: 7, batch_size: 16}"
QUANTIZED_EDITS = {
    f"{CALIBRATION}\n      quality_gate: {{eval: data/eval-prose.jsonl, metric: perplexity, max_regression_pct: 5.0}}":
    f"{ONE_BATCH}\n      quality_gate: {{eval: data/eval-prose.jsonl, metric: perplexity, max_regression_pct: 5.0}}",
    f"{CALIBRATION}\n      quality_gate: {{eval: data/eval-prose.jsonl, metric: perplexity, max_regression_pct: 10.0}}":
    f"{ONE_BATCH}\n      quality_gate: {{eval: data/calib-code.jsonl, metric: perplexity, max_regression_pct: 50.0, "
    "samples: 12}"}


def one_batch(text: str) -> str:
    """Every model of the quickstart calibrated in one batch of its 16 texts (as QUANTIZED_EDITS do):
    for tests that quantize for real but compare nothing with a batch-by-batch calibration."""
    assert CALIBRATION in text, text
    return text.replace(CALIBRATION, ONE_BATCH)


def edited(text: str, edits: dict[str, str]) -> str:
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text
