"""What a build would do, without running anything: each action cached or to run, and why."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from compiler.store.local import LocalStore

from .builder import Builder, describe
from .kinds import KindRegistry
from .model import Graph
from .sizes import SMALL

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
    size: Any = None  # the machine it needs (compiler/graph/sizes.py Size)
    builder: str | None = None  # the declared builder class it runs on (`kiln plan --builders`)
    builder_way: Any = None  # the way it runs there (a Way of `size`)


def make_plan(graph: Graph, store: LocalStore, spec_name: str, kinds: KindRegistry,
              builder: Builder | None = None, spec_changes: list | None = None) -> list[PlannedAction]:
    """Each action cached or to run, with the reasons; with a builder, also which ones it would
    defer (needs it lacks, or a deferred dependency). `spec_changes`: the spec's own changes since
    the store's last build (spec_diff), which name a rebuild whose parameters only echo a spec field."""
    out: list[PlannedAction] = []
    will_run: dict[str, list[str]] = {}  # action -> its root reasons (spec paths), for its dependents
    deferred: set[str] = set()
    for aid in graph.order:
        action, key = graph.actions[aid], graph.keys[aid]
        record = store.get_action(key)
        planned = PlannedAction(aid, action.kind, key, record is not None, needs=action.needs, size=action.size)
        if record is not None:
            planned.last_duration_s = record.duration_s
        else:
            planned.reasons = _reasons(graph, aid, store.get_ref(spec_name, aid), will_run, spec_changes)
            will_run[aid] = root_reasons(planned.reasons)
            if builder is not None:
                waiting = [d for d in action.deps if d in deferred]
                missing = kinds.missing(action, builder)
                if waiting:
                    planned.deferred = f"waits for {waiting[0]}"
                elif missing:
                    planned.deferred = f"needs {describe(missing, builder)}"
                else:
                    planned.deferred = builder.too_small(action.size)
                if planned.deferred:
                    deferred.add(aid)
        out.append(planned)
    return out


NEVER_BUILT = "never built in this store"
VIA = " (via "


def _reasons(graph: Graph, aid: str, ref: dict | None, will_run: Mapping[str, list[str]],
             spec_changes: list | None) -> list[str]:
    if ref is None:
        return [NEVER_BUILT]
    if ref["key"] == graph.keys[aid]:
        return ["built before, but its output is no longer in the store"]
    return record_reasons(ref["params"], graph, aid, will_run, spec_changes)


def root_reasons(reasons: list[str]) -> list[str]:
    """The reasons a dependent inherits: the spec paths, without the chain that carried them."""
    out = []
    for r in reasons:
        root = r.split(VIA, 1)[0]
        if root not in out and not root.startswith("... and "):
            out.append(root)
    return out


def spec_diff(before: Any, after: Any) -> list[tuple[str, Any, Any]] | None:
    """(spec path, old, new) for every field that differs between two parsed specs (their JSON form);
    None when either is unknown (not a spec's JSON form)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return None
    return _diff_fields(before, after)


def _diff_fields(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """_diff of two documents rooted at the spec, field by field: the spec's own `name` is a field
    like any other, not a catalog record's name that would stand for everything else."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        out.extend(_diff(old.get(k), new.get(k), str(k)) if k in old and k in new else
                   [(str(k), old.get(k), new.get(k))])
    return out


def record_reasons(last: dict, graph: Graph, aid: str, will_run: Mapping[str, list[str]],
                   spec_changes: list | None = None) -> list[str]:
    """Why an action slot differs from an earlier record of it ({"params", "inputs", "deps", "version",
    "cause"}: from the store's refs or another graph), as spec paths: the fields whose values changed
    (`models.chat.quantization.weights: "fp8" -> "nvfp4"`), the fields whose files changed, and
    what a dependency that changes carries `(via <action>)`. `will_run`: the actions that run,
    with their root reasons."""
    action = graph.actions[aid]
    reasons: list[str] = []
    if last.get("version") != action.version:
        reasons.append(f"Kiln's {action.kind} changed (v{last.get('version')} -> v{action.version})")
    # What the user changed (an action's `cause`, rooted at the spec) explains a rebuild better than
    # what it changes in the artifact (its params); params speak when the cause did not move.
    changes = _diff_fields(last.get("cause") or {}, dict(action.cause))
    if changes:
        reasons += [f"{path}: {_change(old, new)}" for path, old, new in changes]
    else:
        reasons += _param_reasons(action, _diff(last.get("params", {}), action.params_json), spec_changes)
    reasons += _input_reasons(last, action)
    for dep in action.deps:
        if dep in will_run:
            inherited = [r for r in will_run[dep] if r not in reasons and r != NEVER_BUILT]
            reasons += [f"{r}{VIA}{dep})" for r in inherited] or [f"depends on {dep}, which changes"]
        elif last.get("deps", {}).get(dep) != graph.keys[dep]:
            reasons.append(f"depends on {dep}, which differs from its last build here")
    if len(reasons) > MAX_CHANGES:
        reasons = reasons[:MAX_CHANGES] + [f"... and {len(reasons) - MAX_CHANGES} more changes"]
    return reasons or ["key changed"]


def _param_reasons(action, changes: list, spec_changes: list | None) -> list[str]:
    """Parameter changes named by the spec fields with the same old and new values (the action's
    own model or host first). A parameter that is a transformed value (an enum spelled for the
    tool) is named by the spec changes of the action's model or host, else by the parameter itself
    (an edit of another host or model is never given as the cause); when the spec did not change
    at all, it is Kiln's or its catalog's. `spec_changes` None: unknown."""
    subject = action.id.partition("/")[2]
    scope = (f"models.{subject}.", f"hosts.{subject}.")
    known = spec_changes or []
    scoped = [c for c in known if c[0].startswith(scope)]
    out: list[str] = []
    for path, old, new in changes:
        same = [c for c in known if c[1] == old and c[2] == new]
        # never every spec change: an edit of another host or model is not why this action runs
        named = [c for c in same if c[0].startswith(scope)] or same or scoped
        if named:
            out += [f"{p}: {_change(o, n)}" for p, o, n in named]
        else:
            out.append(f"{action.kind} parameter {path}: {_change(old, new)}"
                       + (" (the spec did not change: Kiln or its catalog did)" if spec_changes == [] else ""))
    return list(dict.fromkeys(out))


def _input_reasons(last: dict, action) -> list[str]:
    """Input files that changed, by the spec field that names them (one line per field)."""
    old_inputs, new_inputs = last.get("inputs", {}), dict(action.inputs)
    recorded = last.get("input_paths")  # from a store ref: used only where it has the shape Kiln writes
    paths = {k: v for k, v in recorded.items() if isinstance(v, str)} if isinstance(recorded, dict) else {}
    paths.update(action.input_paths)
    by_field: dict[str, list[tuple[str, str]]] = {}
    for role in sorted(set(old_inputs) | set(new_inputs)):
        if old_inputs.get(role) != new_inputs.get(role):
            verb = "added" if role not in old_inputs else "removed" if role not in new_inputs else "changed"
            by_field.setdefault(paths.get(role) or f"input {role}", []).append((role, verb))
    out = []
    for where, changed in by_field.items():
        if where.startswith("input "):
            out += [f"input {role} {verb}" for role, verb in changed]
        elif len(changed) == 1 and "/" not in changed[0][0]:
            verb = changed[0][1]
            out.append(f"{where}: the file's content changed" if verb == "changed" else f"{where}: file {verb}")
        else:  # a directory (a local model source): its files
            files = [f"{role.split('/', 1)[1]} {verb}" for role, verb in changed]
            out.append(f"{where}: " + (", ".join(files) if len(files) <= 3 else f"{len(files)} files changed"))
    return out


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


def _shown(value: Any) -> str:
    """A value as the spec writes it: strings quoted, mappings and lists in flow style."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return json.dumps(value, sort_keys=True)


SHOWN = 48  # characters of a value a reason shows whole; a longer one is cut around what changed


def _change(old: Any, new: Any) -> str:
    """`old -> new`, each cut to the part where they differ when long (an image reference differs in
    its digest, past the first 40 characters, where a cut at the start hid it)."""
    a, b = _shown(old), _shown(new)
    if len(a) <= SHOWN and len(b) <= SHOWN:
        return f"{a} -> {b}"
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1

    def cut(t: str) -> str:
        start, end = max(0, head - 12), len(t) - max(0, tail - 12)
        if end - start > SHOWN:
            end = start + SHOWN
        return ("..." if start else "") + t[start:end] + ("..." if end < len(t) else "")

    return f"{cut(a)} -> {cut(b)}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(plan: list[PlannedAction], disrupted: str) -> str:
    """The plan in one line: "3 actions to run, 12 cached; 1 host disrupted" (`disrupted`: what the
    deploy targets say of the disruptions, compiler/targets/disruption.py)."""
    run = [p for p in plan if not p.cached]
    deferred = sum(p.deferred is not None for p in plan)
    tail = f" ({deferred} deferred on this builder)" if deferred else ""
    return (f"{_count(len(run), 'action')} to run{tail}, {len(plan) - len(run)} cached; "
            f"{disrupted}")


def render_plan(plan: list[PlannedAction], fmt: str) -> str:
    run = [p for p in plan if not p.cached]
    if fmt == "json":
        return json.dumps({"actions": [{"id": p.id, "kind": p.kind, "key": p.key, "cached": p.cached,
                                        "reasons": p.reasons, "needs": list(p.needs), "deferred": p.deferred,
                                        "size": p.size.to_json() if p.size is not None else None,
                                        **({"builder": p.builder} if p.builder else {}),
                                        **({"builder_way": p.builder_way.to_json()} if p.builder_way else {})}
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
        if not p.cached and p.size is not None and p.size.ways != SMALL.ways:  # the small allowance goes unsaid
            lines.append(f"           needs: {p.size.text()}")
        if p.builder:
            way = p.builder_way
            lines.append(f"           builds on: {p.builder}" + (f" ({way.gpu_text()})" if way and way.gpus else ""))
        if p.deferred:
            lines.append(f"           deferred here: {p.deferred}")
    return "\n".join(lines)


def _md_cell(reasons: list[str]) -> str:
    return "<br>".join(r.replace("|", "\\|") for r in reasons)
