#!/usr/bin/env python3
"""Eval perplexity of the quickstart model per calibration domain, eval domain and format.

    python3 scripts/calibration_domain_table.py [--samples 16] [--eval-samples 40]

Each cell quantizes the model with the quantize action's own code (quantize_in_memory: ModelOpt
calibration plus its export preprocessing, i.e. the model the checkpoint encodes), calibrated on
`samples` texts of data/calib-<domain>.jsonl selected as calibration-set selects them (seeded),
and evaluates it on data/eval-<domain>.jsonl. Formats ModelOpt fake-quantizes only on CUDA
(nvfp4) are reported as "needs GPU" on a CPU-only machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.actions import quantize  # noqa: E402
from compiler.actions.calibration import read_texts  # noqa: E402

EXAMPLE = ROOT / "examples" / "quickstart"
DOMAINS = ("prose", "code")
FORMATS = {  # label -> the quantize params that differ from the quickstart's
    "fp8": {"weights": "fp8", "activations": "fp8"},
    "int8_sq": {"weights": "int8", "activations": "int8"},  # static per-tensor int8 activations: most sensitive
    "int4_awq": {"weights": "int4_awq", "activations": None},
    "w4a8_awq": {"weights": "int4_awq", "activations": "fp8"},
    "nvfp4": {"weights": "nvfp4", "activations": "nvfp4"},
}


def select(texts: list[str], n: int, seed: int) -> list[str]:
    """The same selection as the calibration-set action."""
    if len(texts) <= n:
        return texts
    return [texts[i] for i in sorted(random.Random(seed).sample(range(len(texts)), n))]


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=16, help="calibration samples (the quickstart uses 16)")
    ap.add_argument("--seed", type=int, default=7, help="calibration selection seed (the quickstart uses 7)")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--eval-samples", type=int, default=40)
    ap.add_argument("--formats", nargs="*", help=f"only these ({', '.join(FORMATS)}); default all")
    args = ap.parse_args(argv)

    torch.set_num_threads(quantize.CPU_THREADS)
    base_params = {"model": "tiny", "dtype": "bf16", "kv_cache": "auto", "block_size": None, "exclude": ["lm_head"],
                   "overrides": [], "calibration": {"max_seq_len": args.max_seq_len, "batch_size": 1}}
    calib = {d: select(read_texts((EXAMPLE / "data" / f"calib-{d}.jsonl").read_text()), args.samples, args.seed)
             for d in DOMAINS}
    evals = {d: read_texts((EXAMPLE / "data" / f"eval-{d}.jsonl").read_text())[:args.eval_samples] for d in DOMAINS}

    def ppl(model, tok, d: str) -> float:
        return quantize.evaluate(model, tok, evals[d], "perplexity", 1024)

    head = ("format", "calibration", *(f"eval {d} ppl" for d in DOMAINS), "quantize time")
    widths = tuple(max(len(h), w) for h, w in zip(head, (18, 11, *(9 for _ in DOMAINS), 9)))

    def emit(cells) -> None:  # one row as soon as it is measured: a long run shows progress
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |", flush=True)

    print(f"calibration: {args.samples} samples x <= {args.max_seq_len} tokens; eval: {args.eval_samples} samples "
          "per domain; quantize time = calibration + export preprocessing, CPU", flush=True)
    emit(head)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", flush=True)
    model, tok = quantize.load(EXAMPLE / "model", "bf16", "cpu")
    emit(("unquantized (bf16)", "-", *(f"{ppl(model, tok, d):.2f}" for d in DOMAINS), ""))
    for label, fmt in FORMATS.items():
        if args.formats and label not in args.formats:
            continue
        params = {**base_params, **fmt}
        for cd in DOMAINS:
            if quantize.needs_gpu(params) and not torch.cuda.is_available():
                emit((label, cd, *("needs GPU" for _ in DOMAINS), ""))
                continue
            model, tok = quantize.load(EXAMPLE / "model", "bf16", "cpu")
            torch.manual_seed(0)
            start = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()):  # ModelOpt prints its progress
                model = quantize.quantize_in_memory(model, tok, params, calib[cd])
            took = time.monotonic() - start
            emit((label, cd, *(f"{ppl(model, tok, d):.2f}" for d in DOMAINS), f"{took:.1f}s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
