"""The capacity section of `kiln plan` and the capacity report: per host, GPU and instance.

Figures are first turned into rows (`unit_row`, plain JSON data); text, markdown and JSON are
all rendered from rows, so `kiln plan`, the capacity-report artifact and the plan comment show
the same numbers."""

from __future__ import annotations

import json
import math

from .estimate_render import render_estimates, unit_label
from .report import UnitFigures, gib

_COLS = ["Unit", "Model", "Slice", "Memory", "Weights", "Reserve", "KV pool", "Headroom", "Max seqs",
         "Ceiling tok/s (b=1 / b=N)", "$/Mtok"]


def unit_row(f: UnitFigures, max_batch: int, start: int | None = None, measured: dict | None = None,
             role: str | None = None) -> dict:
    """One unit's figures as JSON data (bytes rounded to integers). `max_batch` is the model's
    max_batch_size; under attention DP it applies per rank, and the row gives the unit's total.
    `start`: a MIG instance's placement (its first memory slot). `measured`: the model's measured
    limit ({"record", "unit", "concurrency", "limit", "derivation"}), set beside the modelled bound.
    `role`: the role the unit serves under disaggregated serving (a key only then)."""
    c = f.capacity
    max_batch *= c.ranks
    d = {
        "unit": f.unit_id, "host": f.host, "model": f.model, "gpu": f.gpu, "slice": f.slice, "gpus": f.gpus,
        "placement": start,
        "memory_bytes": round(c.gpu_memory_bytes), "weight_bytes": round(c.weight_bytes),
        "reserve_bytes": round(c.reserve_bytes), "kv_pool_bytes": round(c.kv_pool_bytes),
        "headroom_bytes": round(c.headroom_bytes), "kv_bytes_per_token": round(c.kv_bytes_per_token, 3),
        "max_sequences": c.max_sequences, "max_batch_size": max_batch, "fits": c.fits,
        "batch_reachable": c.batch_reachable, "weak_facts": list(f.weak_facts),
        "reserve": [{"name": t.name, "bytes": round(t.bytes), "derivation": t.derivation} for t in c.reserve],
        "assumptions": list(f.assumptions),
        "decode": None, "cost_per_million_tokens": None,
        "concurrency_bound": f.concurrency_bound, "measured": None, "estimate": f.estimate,
    }
    if role is not None:
        d["role"] = role
    if measured is not None:
        bound = f.concurrency_bound
        d["measured"] = {**measured, "bound": bound,
                         "ratio": float(f"{measured['concurrency'] / bound:.4g}") if bound > 0 else None}
    if f.decode is not None:
        d["decode"] = {"tokens_per_s_batch1": round(f.decode.tokens_per_s_batch1, 3),
                       "tokens_per_s_at_batch": round(f.decode.tokens_per_s_at_batch, 3), "batch": f.decode.batch}
    if f.cost_per_mtok is not None and math.isfinite(f.cost_per_mtok):
        d["cost_per_million_tokens"] = round(f.cost_per_mtok, 4)
    return d


def _cells(r: dict) -> list[str]:
    if r["decode"] is not None:
        dec = r["decode"]
        decode = f"{dec['tokens_per_s_batch1']:,.0f} / {dec['tokens_per_s_at_batch']:,.0f} (N={dec['batch']})"
    else:
        decode = "-"
    cost = f"{r['cost_per_million_tokens']:,.2f}" if r["cost_per_million_tokens"] is not None else "-"
    seqs = f"{r['max_sequences']}" + ("" if r["batch_reachable"] else f" (< {r['max_batch_size']})")
    where = r["slice"] if r.get("placement") is None else f"{r['slice']}@{r['placement']}"
    return [unit_label(r), r["model"], where, gib(r["memory_bytes"]), gib(r["weight_bytes"]), gib(r["reserve_bytes"]),
            gib(r["kv_pool_bytes"]), gib(r["headroom_bytes"]), seqs if r["fits"] else "does not fit", decode, cost]


_MEASURED_COLS = ["Unit", "Model", "Modelled (memory)", "Measured (SLA)", "Batch limit", "Measured/modelled",
                  "Record"]


def _measured_cells(r: dict) -> list[str]:
    m = r["measured"]
    record = m["record"] + ("" if m["unit"] == r["unit"] else f" (measured on {m['unit']})")
    pct = None if m["ratio"] is None else m["ratio"] * 100
    ratio = "-" if pct is None else f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%"
    return [unit_label(r), r["model"], f"{m['bound']:,}", f"{m['concurrency']:,}", f"{m['limit']:,}", ratio, record]


def _md(cell: str) -> str:
    """A markdown table cell: a `|` (a record's file name may hold one) would end the cell."""
    return cell.replace("|", "\\|").replace("\n", " ")


def _table(cols: list[str], cells: list[list[str]], fmt: str) -> list[str]:
    if fmt == "markdown":
        return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + [
            "| " + " | ".join(_md(x) for x in c) + " |" for c in cells]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    line = "  ".join("{:<%d}" % w for w in widths)
    return [line.format(*cols).rstrip(), "  ".join("-" * w for w in widths)] + [line.format(*c).rstrip()
                                                                                for c in cells]


def _measured_section(rows: list[dict], fmt: str) -> list[str]:
    """Measured vs modelled: the concurrency `kiln tune` measured under the SLA beside the
    concurrency memory allows (the capacity bound), so a reviewer sees how far the model is off."""
    measured = [r for r in rows if r.get("measured")]
    if not measured:
        return []
    head = "#### Measured vs modelled concurrency" if fmt == "markdown" else "Measured vs modelled concurrency"
    out = ["", head] + ([""] if fmt == "markdown" else [])
    out += _table(_MEASURED_COLS, [_measured_cells(r) for r in measured], fmt)
    derivations = sorted({f"{r['model']}: {r['measured']['derivation']}" for r in measured})
    out += [""] + [("- " if fmt == "markdown" else "  ") + d for d in derivations]
    return out


def render_capacity(rows: list[dict], fmt: str = "text") -> str:
    """`rows` from `unit_row`, in spec order."""
    if fmt == "json":
        return json.dumps({"units": rows}, indent=2, sort_keys=True)
    cells = [_cells(r) for r in rows]
    weak = sorted({w for r in rows for w in r["weak_facts"]})
    assumptions = _assumptions(rows)
    if fmt == "markdown":
        out = ["### Capacity", "", "| " + " | ".join(_COLS) + " |", "|" + "---|" * len(_COLS)]
        out += ["| " + " | ".join(_md(x) for x in c) + " |" for c in cells]
        out += _measured_section(rows, fmt)
        out += render_estimates(rows, fmt)
        if weak:
            out += ["", "Figures rest on facts that are not verified: " + "; ".join(weak) + "."]
        if assumptions:
            out += ["", "Assumptions:"] + [f"- {units}: {text}" for units, text in assumptions]
        out += ["", _FOOTNOTE]
        return "\n".join(out)
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLS)]
    line = "  ".join("{:<%d}" % w for w in widths)
    out = ["Capacity (per GPU of each serving unit)", line.format(*_COLS).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += [line.format(*c).rstrip() for c in cells]
    out += _measured_section(rows, fmt)
    out += render_estimates(rows, fmt)
    if weak:
        out += ["", "Not verified: " + "; ".join(weak)]
    if assumptions:
        out += ["", "Assumptions:"] + [f"  {units}: {text}" for units, text in assumptions]
    out += ["", _FOOTNOTE]
    return "\n".join(out)


def _assumptions(rows: list[dict]) -> list[tuple[str, str]]:
    """(units, assumption) with the units that share an assumption named together."""
    by_text: dict[str, list[str]] = {}
    for r in rows:
        for a in r.get("assumptions", ()):
            by_text.setdefault(a, []).append(unit_label(r))
    out = []
    for text, units in by_text.items():
        shown = "all units" if len(units) == len(rows) and len(rows) > 1 else ", ".join(units)
        out.append((shown, text))
    return out


_FOOTNOTE = ("Ceiling figures are a memory-bandwidth roofline (an upper bound; the estimate is what to expect); MIG instances get their memory "
             "slices' share of bandwidth, derated 10% when they share a GPU. The reserve is an estimate.")
