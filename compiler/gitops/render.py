"""Text, Markdown (a pull-request comment) and JSON forms of a semantic plan."""

from __future__ import annotations

import json

from compiler.targets.disruption import disrupted_phrase, render_disruptions

from .semplan import CapacityDelta, SemanticPlan

_CAP_FIELDS = (("headroom_gib", "headroom", " GiB"), ("max_sequences", "sequences", ""),
               ("decode_tok_s", "est.", " tok/s"), ("cost_per_mtok", "est. $/Mtok", ""))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes}m{s:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _time_line(plan: SemanticPlan) -> str:
    known, unknown = plan.expected_build_s
    todo = sum(1 for a in plan.actions if a.change != "removed" and not a.cached)
    if todo == 0:
        return "nothing to build"
    if unknown == todo:
        return f"{todo} to build, none built in this store before: duration unknown"
    text = f"{todo} to build, expected {_duration(known)} from earlier builds"
    return text + (f" (+ {unknown} never built here)" if unknown else "")


def _cap_change(d: CapacityDelta) -> str:
    if d.change == "new":
        return "new unit: " + ", ".join(f"{label} {d.after[k]}{unit}" for k, label, unit in _CAP_FIELDS
                                        if d.after[k] is not None)
    if d.change == "removed":
        return "removed"
    parts = []
    for k, label, unit in _CAP_FIELDS:
        b, a = d.before[k], d.after[k]
        if b != a:
            parts.append(f"{label} {b}{unit} -> {a}{unit}")
    if d.before["slice"] != d.after["slice"]:
        parts.insert(0, f"slice {d.before['slice']} -> {d.after['slice']}")
    return ", ".join(parts)


def summary(plan: SemanticPlan) -> str:
    """The plan in one line: "6 artifacts to rebuild (2 cached), 12 unchanged; 1 host disrupted"."""
    todo = [a for a in plan.actions if a.change != "removed"]
    cached = sum(a.cached for a in todo)
    removed = len(plan.actions) - len(todo)
    n = len(todo)
    return (f"{n} artifact{'' if n == 1 else 's'} to rebuild" + (f" ({cached} cached)" if cached else "")
            + (f", {removed} removed" if removed else "") + f", {plan.unchanged} unchanged; "
            + disrupted_phrase(plan.disruptions))


def _action_word(a) -> str:
    return "cached" if a.cached else {"new": "new", "changed": "rebuild", "removed": "removed"}[a.change]


def render_semantic(plan: SemanticPlan, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(plan_dict(plan), indent=2, sort_keys=True)
    if fmt == "markdown":
        return _markdown(plan)
    lines = [f"Plan against {plan.base} ({plan.base_commit[:12]}): "
             + ("changes" if plan.changed else "no change") + f": {summary(plan)}"]
    if plan.base_note:
        lines.append(f"  note: {plan.base_note}")
    lines.append(f"Artifacts: {len(plan.actions)} differ, {plan.unchanged} unchanged; {_time_line(plan)}")
    for a in plan.actions:
        gpu = " [gpu]" if "gpu" in a.needs else ""
        eta = "" if a.change == "removed" or a.cached else \
            f" ~{_duration(a.expected_s)}" if a.expected_s is not None else " (duration unknown)"
        lines.append(f"  {_action_word(a):<8} {a.id}{gpu}{eta}")
        lines += [f"           {r}" for r in a.reasons]
    lines.append(render_disruptions(plan.disruptions, "text"))
    lines += [sim.text() for sim in plan.rollouts]
    if plan.capacity:
        lines.append("Capacity:")
        lines += [f"  {d.unit}: {_cap_change(d)}" for d in plan.capacity]
    else:
        lines.append("Capacity: unchanged")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(plan: SemanticPlan) -> str:
    head = "changes" if plan.changed else "no change"
    lines = [f"## Kiln plan against `{plan.base}` ({plan.base_commit[:12]}): {head}", "", f"**{summary(plan)}**", ""]
    if plan.base_note:
        lines += [f"> {plan.base_note}", ""]
    lines += ["### Artifacts", "", f"{len(plan.actions)} differ, {plan.unchanged} unchanged; {_time_line(plan)}.",
              ""]
    if plan.actions:
        lines += ["| artifact | change | expected | why |", "|---|---|---|---|"]
        for a in plan.actions:
            eta = "" if a.change == "removed" else "cached" if a.cached else \
                _duration(a.expected_s) if a.expected_s is not None else "unknown"
            gpu = " (GPU)" if "gpu" in a.needs else ""
            lines.append(f"| `{a.id}`{gpu} | {_action_word(a)} | {eta} | {'<br>'.join(_md(r) for r in a.reasons)} |")
        lines.append("")
    lines.append(render_disruptions(plan.disruptions, "markdown"))
    for sim in plan.rollouts:
        lines += ["", sim.markdown()]
    lines += ["", "### Capacity", ""]
    if plan.capacity:
        lines += ["| unit | change |", "|---|---|"]
        lines += [f"| `{d.unit}` | {_md(_cap_change(d))} |" for d in plan.capacity]
    else:
        lines.append("No capacity change.")
    return "\n".join(lines)


def plan_dict(plan: SemanticPlan) -> dict:
    known, unknown = plan.expected_build_s
    return {
        "base": {"ref": plan.base, "commit": plan.base_commit, "note": plan.base_note},
        "changed": plan.changed,
        "summary": summary(plan),
        "actions": [{"id": a.id, "kind": a.kind, "change": a.change, "reasons": a.reasons, "needs": list(a.needs),
                     "cached": a.cached, "expected_s": a.expected_s} for a in plan.actions],
        "unchanged": plan.unchanged,
        "expected_build_s": known,
        "unknown_durations": unknown,
        "disruptions": json.loads(render_disruptions(plan.disruptions, "json")),
        "capacity": [{"unit": d.unit, "change": d.change, "before": d.before, "after": d.after} for d in plan.capacity],
        "matrix": plan.matrix,
        "rollouts": [sim.json() for sim in plan.rollouts],
    }
