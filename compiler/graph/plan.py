"""What a build would do, without running anything: each action cached or to run, and why."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from compiler.store.local import LocalStore

from .builder import Builder, describe
from .kinds import POOL, KindRegistry
from .model import Graph

MAX_CHANGES = 6  # per action; a reviewer needs the first few, not a dump


@dataclass
class PlannedAction:
    id: str
    kind: str
    key: str
    cached: bool
    reasons: list[str] = field(default_factory=list)
    needs: tuple[str, ...] = ()
    last_duration_s: float | None = None
    deferred: str | None = None  # why this builder will not run it (see builder.py)


def make_plan(graph: Graph, store: LocalStore, spec_name: str, kinds: KindRegistry,
              builder: Builder | None = None) -> list[PlannedAction]:
    """Each action cached or to run, with the reasons; with a builder, also which ones it would
    defer (needs it lacks, or a deferred dependency)."""
    out: list[PlannedAction] = []
    will_run: set[str] = set()
    deferred: set[str] = set()
    for aid in graph.order:
        action, key = graph.actions[aid], graph.keys[aid]
        record = store.get_action(key)
        planned = PlannedAction(aid, action.kind, key, record is not None, needs=action.needs)
        if record is not None:
            planned.last_duration_s = record.duration_s
        else:
            planned.reasons = _reasons(graph, aid, store.get_ref(spec_name, aid), will_run)
            will_run.add(aid)
            if builder is not None:
                waiting = [d for d in action.deps if d in deferred]
                missing = kinds.missing(action, builder)
                if waiting:
                    planned.deferred = f"waits for {waiting[0]}"
                elif missing:
                    planned.deferred = f"needs {describe(missing, builder)}"
                if planned.deferred:
                    deferred.add(aid)
        out.append(planned)
    return out


def _reasons(graph: Graph, aid: str, ref: dict | None, will_run: set[str]) -> list[str]:
    action = graph.actions[aid]
    if ref is None:
        return ["never built in this store"]
    if ref["key"] == graph.keys[aid]:
        return ["built before, but its output is no longer in the store"]
    return record_reasons(ref["params"], graph, aid, will_run)


def record_reasons(last: dict, graph: Graph, aid: str, will_run: set[str]) -> list[str]:
    """Field paths and inputs that differ between an earlier record of an action slot
    ({"params", "inputs", "deps", "version"}: from the store's refs or another graph) and now."""
    action = graph.actions[aid]
    reasons: list[str] = []
    if last.get("version") != action.version:
        reasons.append(f"{action.kind} changed (v{last.get('version')} -> v{action.version})")
    # What the user changed (an action's `cause`) explains a rebuild better than what it changes in
    # the artifact (its params); params speak when the cause did not move (a catalog correction).
    changes = _diff(last.get("cause") or {}, dict(action.cause)) or _diff(last.get("params", {}), action.params_json)
    for path, old, new in changes:
        reasons.append(f"{path}: {_short(old)} -> {_short(new)}")
    old_inputs, new_inputs = last.get("inputs", {}), dict(action.inputs)
    for role in sorted(set(old_inputs) | set(new_inputs)):
        if old_inputs.get(role) != new_inputs.get(role):
            verb = "added" if role not in old_inputs else "removed" if role not in new_inputs else "changed"
            reasons.append(f"input {role} {verb}")
    for dep in action.deps:
        if dep in will_run or last.get("deps", {}).get(dep) != graph.keys[dep]:
            reasons.append(f"depends on {dep}, which changes")
    if len(reasons) > MAX_CHANGES:
        reasons = reasons[:MAX_CHANGES] + [f"... and {len(reasons) - MAX_CHANGES} more changes"]
    return reasons or ["key changed"]


def _diff(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict) and "name" in old and "name" in new \
            and old["name"] != new["name"]:
        # A catalog record replaced by another (a MIG profile, a GPU): its name says it all.
        return [(f"{path}.name" if path else "name", old["name"], new["name"])]
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in old:
                out.append((sub, None, new[k]))
            elif k not in new:
                out.append((sub, old[k], None))
            else:
                out.extend(_diff(old[k], new[k], sub))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and \
            any(isinstance(v, (dict, list)) for v in old + new):  # a list of plain values reads best whole
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out.extend(_diff(a, b, f"{path}[{i}]"))
        return out
    return [] if old == new else [(path, old, new)]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def render_plan(plan: list[PlannedAction], fmt: str) -> str:
    run = [p for p in plan if not p.cached]
    if fmt == "json":
        return json.dumps({"actions": [{"id": p.id, "kind": p.kind, "key": p.key, "cached": p.cached,
                                        "reasons": p.reasons, "needs": list(p.needs), "deferred": p.deferred}
                                       for p in plan],
                           "to_run": len(run), "cached": len(plan) - len(run),
                           "deferred": sum(p.deferred is not None for p in plan)}, indent=2, sort_keys=True)
    deferred = [p for p in plan if p.deferred]
    tail = f", {len(deferred)} of them deferred on this builder" if deferred else ""
    if fmt == "markdown":
        lines = ["### Actions", "", f"{len(run)} to run, {len(plan) - len(run)} cached{tail}.", ""]
        if run:
            lines += ["| action | why |", "|---|---|"]
            lines += [f"| `{p.id}` | {_md_cell(p.reasons + ([f'deferred: {p.deferred}'] if p.deferred else []))} |"
                      for p in run]
        return "\n".join(lines)
    lines = [f"Actions: {len(run)} to run, {len(plan) - len(run)} cached{tail}"]
    for p in plan:
        lines.append(f"  {'cached' if p.cached else 'defer ' if p.deferred else 'run   '} {p.id}")
        for r in p.reasons:
            lines.append(f"           {r}")
        if p.deferred:
            lines.append(f"           deferred here: {p.deferred}")
    return "\n".join(lines)


def _md_cell(reasons: list[str]) -> str:
    return "<br>".join(r.replace("|", "\\|") for r in reasons)


def _is_pool(d) -> bool:
    return d.gpu_index == POOL


def render_disruptions(items: list, fmt: str) -> str:
    """Which hosts and GPUs applying the plan disrupts (drain those first), and which Kubernetes
    node pools (entries with gpu_index POOL: re-layouts, rolled workloads, replica changes)."""
    if fmt == "json":
        return json.dumps([{"host": d.host, "gpu": None if _is_pool(d) else d.gpu_index, "kind": d.kind,
                            "detail": d.detail, **({"node_pool": True} if _is_pool(d) else {})} for d in items],
                          indent=2, sort_keys=True)
    if not items:
        return "Disruption: no host or GPU changes" if fmt == "text" else "### Disruption\n\nNo host or GPU changes."
    if fmt == "markdown":
        lines = ["### Disruption", "", "| host | GPU | change | detail |", "|---|---|---|---|"]
        lines += [f"| {d.host} | {'node pool' if _is_pool(d) else d.gpu_index} | {d.kind} | "
                  f"{d.detail.replace('|', '/')} |" for d in items]
        return "\n".join(lines)
    gpus = [d for d in items if not _is_pool(d)]
    pools = {d.host for d in items if _is_pool(d)}
    parts = [f"{len({(d.host, d.gpu_index) for d in gpus})} GPU(s) on {len({d.host for d in gpus})} host(s)"] \
        if gpus else []
    parts += [f"{len(pools)} node pool(s)"] if pools else []
    head = "Disruption: " + "; ".join(parts)
    lines = [head]
    lines += [f"  {d.host} (node pool): {d.kind}: {d.detail}" if _is_pool(d) else
              f"  {d.host} GPU {d.gpu_index}: {d.kind}: {d.detail}" for d in items]
    return "\n".join(lines)
