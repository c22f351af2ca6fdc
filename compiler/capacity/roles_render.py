"""The "Disaggregated roles" section of `kiln plan`: per disaggregated model its router and, per
role, the servers placed, their parallelism, what one server does under the sla, the servers the
declared arrival rate needs and the prefill:decode ratio they make, from the rows of
compiler/ir/role_capacity.py (the figures K462 warns from)."""

from __future__ import annotations

import json

_COLS = ["Model", "Role", "Servers", "Parallelism", "Units", "Per server (under the sla)", "Needed"]


def _per_server(r: dict) -> str:
    p = r["per_server"]
    if p is None:
        return "-"
    if "prompt_ms" in p:
        if p["busy_max"] is None:  # one prompt alone is over the ttft: no busy share meets it
            return f"{p['prompt_ms']:,.0f} ms per prompt, over the sla's ttft_ms alone"
        moved = f" + {p['transfer_ms']:,.1f} ms KV transfer" if p.get("transfer_ms") is not None else ""
        return (f"{p['prompt_ms']:,.0f} ms per prompt{moved}, busy <= {p['busy_max']:.0%}: "
                f"{p['prompts_per_s']:,.2f} prompts/s")
    return f"batch {p['batch']} at {p['step_ms']:,.1f} ms/token: {p['tokens_per_s']:,.0f} tok/s"


def _needed(r: dict) -> str:
    n = r["needed"]
    return "-" if n is None else "sla unreachable" if n < 0 else f"{n}"


def _router_text(row: dict) -> str:
    rt = row["router"]
    kv = "KV-aware" if rt["kv_aware"] else "round robin"
    if rt["host"] is None:
        return f"router: Dynamo frontend on the node pools ({kv})"
    return f"router: {rt['runs']} on {rt['host']}:{rt['port']} ({kv})"


def _summary(row: dict) -> str:
    rate = row["requests_per_second"]
    if row["recommended"] is None:
        why = "" if rate is not None else " (no workload.requests_per_second and sla to size them against)"
        return f"recommended ratio: -{why}"
    rec = row["recommended"]
    placed = {r["role"]: r["servers"] for r in row["roles"]}
    text = (f"at {rate:g} requests/s: recommended {rec['prefill']} prefill : {rec['decode']} decode "
            f"(placed {placed['prefill']} : {placed['decode']})")
    return text + (f"; short of {' and '.join(row['short'])} servers" if row["short"] else "")


def render_roles(rows: list[dict], fmt: str = "text") -> str:
    """`rows` from roles_rows; "" when there is none."""
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True)
    if not rows:
        return ""
    cells = [[row["model"], r["role"], f"{r['servers']}", r["parallelism"], ", ".join(r["units"]) or "-",
              _per_server(r), _needed(r)] for row in rows for r in row["roles"]]
    notes = [f"{row['model']}: {text}" for row in rows for text in
             [_router_text(row), _summary(row)] + [r["basis"] for r in row["roles"] if r["basis"]]]
    foot = ("The per-server figures are modelled (compiler/capacity/estimate.py) with no tail: with a p99 sla "
            "the servers needed are a lower bound. TTFT here is the wait, the prefill and the KV transfer to a "
            "decode server. A decode server's ms/token here is its step with decode alone (prefill runs on "
            "other servers): it is the TPOT that applies to it; the estimate table's TPOT for the same unit "
            "is the aggregated figure, with prompts' prefill interleaved.")
    if fmt == "markdown":
        out = ["### Disaggregated roles", "", "| " + " | ".join(_COLS) + " |", "|" + "---|" * len(_COLS)]
        out += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(out + [""] + [f"- {n}" for n in notes] + ["", foot])
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLS)]
    line = "  ".join("{:<%d}" % w for w in widths)
    out = ["Disaggregated roles", line.format(*_COLS).rstrip(), "  ".join("-" * w for w in widths)]
    out += [line.format(*c).rstrip() for c in cells]
    return "\n".join(out + [""] + [f"  {n}" for n in notes] + ["", foot])

