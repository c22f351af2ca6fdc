"""The processes of each serving unit that starts more than one (MPI ranks), for `kiln plan`."""

from __future__ import annotations

import json

from . import get
from .base import Unit


def process_rows(resolved) -> list[dict]:
    """One row per serving unit whose runtime starts more than one process, in spec order."""
    rows = []
    for u in resolved.units:
        if u.model not in resolved.models:  # a unit serving an unknown model: the spec's error says so
            continue
        m = resolved.models[u.model].spec
        par = m.parallelism
        rt = get(m.serving.runtime)
        ranks = rt.ranks(Unit(model=u.model, target=resolved.target, ports={}, tp=par.tp, pp=par.pp, ep=par.ep,
                              gpus=len(u.gpu_indexes)))
        if ranks > 1:
            rows.append({"unit": u.id, "host": u.host, "model": u.model, "runtime": rt.name, "ranks": ranks,
                         "tp": par.tp, "pp": par.pp})
    return rows


_COLS = ("unit", "host", "model", "runtime", "processes", "tp x pp")


def _cells(r: dict) -> list[str]:
    return [r["unit"], r["host"], r["model"], r["runtime"], str(r["ranks"]), f"{r['tp']} x {r['pp']}"]


def render_processes(rows: list[dict], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps({"processes": rows}, indent=2, sort_keys=True)
    cells = [_cells(r) for r in rows]
    if fmt == "markdown":
        out = ["### Processes per serving unit (MPI ranks)", "", "| " + " | ".join(_COLS) + " |",
               "|" + "---|" * len(_COLS)]
        return "\n".join(out + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLS)]
    line = "  ".join("{:<%d}" % w for w in widths)
    return "\n".join(["Processes per serving unit (MPI ranks):", line.format(*_COLS).rstrip()]
                     + [line.format(*c).rstrip() for c in cells])
