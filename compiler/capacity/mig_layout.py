"""The MIG placement of every serving unit, as `kiln plan` shows it: which GPU instance profile
each unit gets on which GPU, and at which start slot (`nvidia-smi mig -cgi <id>:<start>`, the
slots the host script creates). Rows are plain JSON data; text and markdown render from them.
Units are read duck-typed (the IR's ServingUnit: id, host, model, gpu_indexes, mig, mig_start)."""

from __future__ import annotations

import json

_COLS = ["Unit", "Model", "GPU", "Profile", "-cgi", "Slots"]


def placement_rows(units) -> list[dict]:
    """One row per MIG instance, in spec order; `start` None when no legal placement exists."""
    rows = []
    for u in units:
        profile = u.mig.profile if u.mig is not None else None
        if profile is None:
            continue
        start = u.mig_start
        rows.append({"unit": u.id, "host": u.host, "model": u.model, "gpu": u.gpu_indexes[0],
                     "profile": profile.name, "profile_id": profile.id, "start": start,
                     "slots": None if start is None else [start, start + profile.placement_size - 1]})
    return rows


def _cells(r: dict) -> list[str]:
    if r["start"] is None:
        return [r["unit"], r["model"], str(r["gpu"]), r["profile"], "-", "no legal placement"]
    first, last = r["slots"]
    return [r["unit"], r["model"], str(r["gpu"]), r["profile"], f"{r['profile_id']}:{r['start']}",
            str(first) if first == last else f"{first}-{last}"]


def render_placements(rows: list[dict], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps({"placements": rows}, indent=2, sort_keys=True)
    cells = [_cells(r) for r in rows]
    if fmt == "markdown":
        out = ["### MIG placements", "", "| " + " | ".join(_COLS) + " |", "|" + "---|" * len(_COLS)]
        return "\n".join(out + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLS)]
    line = "  ".join("{:<%d}" % w for w in widths)
    out = ["MIG placements (nvidia-smi mig -cgi <profile id>:<start slot>)", line.format(*_COLS).rstrip(),
           "  ".join("-" * w for w in widths)]
    return "\n".join(out + [line.format(*c).rstrip() for c in cells])
