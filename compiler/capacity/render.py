"""The capacity section of `kiln plan`: per host, GPU and instance, as text, markdown or JSON."""

from __future__ import annotations

import json
import math

from .report import UnitFigures, gib

_COLS = ["Unit", "Model", "Slice", "Memory", "Weights", "Reserve", "KV pool", "Headroom", "Max seqs",
         "Decode tok/s (b=1 / b=N)", "$/Mtok"]


def _row(f: UnitFigures, max_batch: int) -> list[str]:
    c = f.capacity
    if f.decode is not None:
        decode = f"{f.decode.tokens_per_s_batch1:,.0f} / {f.decode.tokens_per_s_at_batch:,.0f} (N={f.decode.batch})"
    else:
        decode = "-"
    cost = f"{f.cost_per_mtok:,.2f}" if f.cost_per_mtok is not None and math.isfinite(f.cost_per_mtok) else "-"
    seqs = f"{c.max_sequences}" + ("" if c.batch_reachable else f" (< {max_batch})")
    return [f.unit_id, f.model, f.slice, gib(c.gpu_memory_bytes), gib(c.weight_bytes), gib(c.reserve_bytes),
            gib(c.kv_pool_bytes), gib(c.headroom_bytes), seqs if c.fits else "does not fit", decode, cost]


def render_capacity(figures: list[tuple[UnitFigures, int]], fmt: str = "text") -> str:
    """`figures` pairs each unit's figures with its model's max_batch_size."""
    if fmt == "json":
        return json.dumps({"units": [_json(f, mb) for f, mb in figures]}, indent=2, sort_keys=True)
    rows = [_row(f, mb) for f, mb in figures]
    weak = sorted({w for f, _ in figures for w in f.weak_facts})
    if fmt == "markdown":
        out = ["### Capacity", "", "| " + " | ".join(_COLS) + " |", "|" + "---|" * len(_COLS)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        if weak:
            out += ["", "Figures rest on facts that are not verified: " + "; ".join(weak) + "."]
        out += ["", _FOOTNOTE]
        return "\n".join(out)
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(_COLS)]
    line = "  ".join("{:<%d}" % w for w in widths)
    out = ["Capacity (per GPU of each serving unit)", line.format(*_COLS).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += [line.format(*r).rstrip() for r in rows]
    if weak:
        out += ["", "Not verified: " + "; ".join(weak)]
    out += ["", _FOOTNOTE]
    return "\n".join(out)


_FOOTNOTE = ("Decode figures are a memory-bandwidth roofline (an upper bound); MIG instances get their memory "
             "slices' share of bandwidth, derated 10% when they share a GPU. The reserve is an estimate.")


def _json(f: UnitFigures, max_batch: int) -> dict:
    c = f.capacity
    d = {
        "unit": f.unit_id, "host": f.host, "model": f.model, "gpu": f.gpu, "slice": f.slice, "gpus": f.gpus,
        "memory_bytes": round(c.gpu_memory_bytes), "weight_bytes": round(c.weight_bytes),
        "reserve_bytes": round(c.reserve_bytes), "kv_pool_bytes": round(c.kv_pool_bytes),
        "headroom_bytes": round(c.headroom_bytes), "kv_bytes_per_token": round(c.kv_bytes_per_token, 3),
        "max_sequences": c.max_sequences, "max_batch_size": max_batch, "fits": c.fits,
        "batch_reachable": c.batch_reachable, "weak_facts": list(f.weak_facts),
        "decode": None, "cost_per_million_tokens": None,
    }
    if f.decode is not None:
        d["decode"] = {"tokens_per_s_batch1": round(f.decode.tokens_per_s_batch1, 3),
                       "tokens_per_s_at_batch": round(f.decode.tokens_per_s_at_batch, 3), "batch": f.decode.batch}
    if f.cost_per_mtok is not None and math.isfinite(f.cost_per_mtok):
        d["cost_per_million_tokens"] = round(f.cost_per_mtok, 4)
    return d
