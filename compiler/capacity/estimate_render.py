"""The estimate section of the capacity plan (text and markdown), beside the ceiling: per unit the
estimated output tokens/s with its interval, TTFT, TPOT, the concurrency they are at, the cost from
the estimate, the basis, and why an interval is wide. Rows come from render.unit_row; units with the
same estimate (replicas of one model on one kind of slice) share a line."""

from __future__ import annotations

_COLS = ["Unit", "Model", "Est. tok/s (low-high)", "Ceiling tok/s", "Concurrency", "TTFT ms", "TPOT ms",
         "$/Mtok (low-high)", "SLA conc.", "Basis"]


def unit_label(r: dict) -> str:
    """A row's unit as the tables name it: with its role under disaggregated serving."""
    return r["unit"] + (f" ({r['role']})" if r.get("role") else "")


def _range(f: dict | None, fmt: str = "{:,.0f}") -> str:
    if not f:
        return "-"
    return f"{fmt.format(f['value'])} ({fmt.format(f['low'])}-{fmt.format(f['high'])})"


def _ms(f: dict) -> str:
    fmt = "{:,.1f}" if f["value"] >= 1 else "{:.3g}"
    return _range(f, fmt)


def _cells(units: list[str], r: dict) -> list[str]:
    e = r["estimate"]
    basis = e["basis"] + (" (outside fit)" if e["outside_calibration"] and e["basis"] != "measured" else "")
    if e.get("calibration"):
        basis += f" from {e['calibration']['measurements']}"
    cost = _range(e["cost_per_million_tokens"], "{:,.2f}") if e.get("cost_per_million_tokens") else "-"
    sla = "-" if e.get("sla_concurrency") is None else f"{e['sla_concurrency']:,}"
    unit = units[0] if len(units) == 1 else f"{units[0]} (+{len(units) - 1} alike)"
    return [unit, r["model"], _range(e["output_tokens_per_s"]), f"{e['ceiling_tokens_per_s']:,.0f}",
            f"{e['concurrency']:,}", _ms(e["ttft_ms"]), _ms(e["tpot_ms"]), cost, sla, basis]


def _grouped(rows: list[dict]) -> list[tuple[list[str], dict]]:
    out: dict[str, tuple[list[str], dict]] = {}
    for r in rows:
        if not r.get("estimate"):
            continue
        key = repr((r["model"], r["slice"], r.get("role"), r["estimate"]))
        out.setdefault(key, ([], r))[0].append(unit_label(r))
    return list(out.values())


def render_estimates(rows: list[dict], fmt: str) -> list[str]:
    """Lines of the estimate section ([] when no unit has one)."""
    groups = _grouped(rows)
    if not groups:
        return []
    cells = [_cells(units, r) for units, r in groups]
    bullet = "- " if fmt == "markdown" else "  "
    if fmt == "markdown":
        out = ["", "#### Estimate (the ceiling above is the bound)", "", "| " + " | ".join(_COLS) + " |",
               "|" + "---|" * len(_COLS)] + ["| " + " | ".join(c) + " |" for c in cells]
    else:
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLS)]
        line = "  ".join("{:<%d}" % w for w in widths)
        out = ["", "Estimate (the ceiling above is the bound)", line.format(*_COLS).rstrip(),
               "  ".join("-" * w for w in widths)] + [line.format(*c).rstrip() for c in cells]
    notes: dict[str, list[str]] = {}
    sources: dict[str, None] = {}
    for units, r in groups:
        e = r["estimate"]
        label = units[0] if len(units) == 1 else f"{units[0]} (+{len(units) - 1} alike)"
        text = f"{e['traffic']}; coefficients {e['coefficients']}"
        sat = e.get("saturation")
        if sat:
            met = "at the largest concurrency meeting the sla" if e.get("sla_met") else \
                "the sla is not met even at concurrency 1: figures at 1"
            cost = sat.get("cost_per_million_tokens")
            text += (f"; {met} ({e.get('percentile', 'p99')}); at saturation (concurrency {sat['concurrency']:,}): "
                     f"{_range(sat['output_tokens_per_s'])} tok/s" + (f", ${_range(cost, '{:,.2f}')}/Mtok" if cost else ""))
        if e["outside_calibration"]:
            text += "; interval widened: " + "; ".join(e["outside_calibration"])
        notes.setdefault(text, []).append(label)
        for n in e.get("measurements_not_used") or ():
            notes.setdefault(f"{n['record']} not used: {n['why']}", []).append(label)
        sources.update(dict.fromkeys(e["sources"] + e["notes"]))
    out += ["", "Estimate basis:"]
    out += [f"{bullet}{', '.join(labels)}: {text}" for text, labels in notes.items()]
    out += [f"{bullet}{s}" for s in sources]
    return out
