"""The semantic difference between a spec at a base revision and now: what a pull request costs.

Pure over its inputs (two validations, two graphs, what the store recorded): which artifacts are
rebuilt and why (field paths, input files), how long that is expected to take (durations the store
recorded), which hosts and GPUs are disrupted, and how capacity changes per serving unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.graph.model import Graph
from compiler.graph.plan import record_reasons, root_reasons, spec_diff
from compiler.graph.progress import expected_duration
from compiler.store.local import LocalStore

GIB = 1024 ** 3


@dataclass
class ActionChange:
    id: str
    kind: str
    change: str  # "new", "changed", "removed"
    reasons: list[str] = field(default_factory=list)
    needs: tuple[str, ...] = ()
    cached: bool = False  # the new output is already in the store (or the registry cache)
    expected_s: float | None = None  # from the store's last build of this slot; None: unknown


@dataclass
class CapacityDelta:
    unit: str
    change: str  # "new", "changed", "removed"
    before: dict | None
    after: dict | None


@dataclass
class SemanticPlan:
    base: str  # the revision as the user named it
    base_commit: str
    base_note: str | None  # e.g. the spec did not exist there
    actions: list[ActionChange]
    unchanged: int
    disruptions: list  # compiler.targets.disruption.Disruption
    capacity: list[CapacityDelta]
    matrix: dict = field(default_factory=lambda: {"include": []})  # GPU fan-out of what is left to build
    rollouts: list = field(default_factory=list)  # per target that simulates a change: its simulation

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.disruptions or self.capacity)

    @property
    def expected_build_s(self) -> tuple[float, int]:
        """(seconds known from earlier builds, number of actions with no recorded duration)."""
        todo = [a for a in self.actions if a.change != "removed" and not a.cached]
        return (round(sum(a.expected_s or 0.0 for a in todo), 3), sum(a.expected_s is None for a in todo))



def _record(graph: Graph, aid: str) -> dict:
    return graph.actions[aid].record(graph.keys)


def _spec(graph: Graph | None) -> dict | None:
    """The parsed spec a graph was lowered from (its snapshot's parameters)."""
    from compiler.actions.snapshot import KIND as SNAPSHOT

    snap = graph.actions.get(SNAPSHOT.kind) if graph is not None else None
    return snap.params_json.get("spec") if snap is not None else None


def action_changes(base: Graph | None, head: Graph, store: LocalStore, spec_name: str,
                   has_remote=lambda key, kind: False) -> tuple[list[ActionChange], int]:
    changes: list[ActionChange] = []
    rebuilt: dict[str, list[str]] = {}  # action -> its root reasons (spec paths), for its dependents
    unchanged = 0
    spec_changes = spec_diff(_spec(base), _spec(head))
    for aid in head.order:
        action, key = head.actions[aid], head.keys[aid]
        base_key = base.keys.get(aid) if base is not None else None
        if base_key == key:
            unchanged += 1
            continue
        if base_key is None:
            change = ActionChange(aid, action.kind, "new", ["not in the base revision"], action.needs)
        else:
            change = ActionChange(aid, action.kind, "changed",
                                  record_reasons(_record(base, aid), head, aid, rebuilt, spec_changes), action.needs)
        rebuilt[aid] = root_reasons(change.reasons)
        change.cached = store.get_action(key) is not None or has_remote(key, action.kind)
        change.expected_s = 0.0 if change.cached else expected_duration(store, spec_name, aid, base_key)
        changes.append(change)
    if base is not None:
        for aid in base.order:
            if aid not in head.actions:
                changes.append(ActionChange(aid, base.actions[aid].kind, "removed", ["no longer in the spec"]))
    return changes, unchanged


def host_disruptions(base: Graph | None, head: Graph, kinds=None) -> list:
    """What applying the head revision's artifacts over the base revision's disrupts on the hosts."""
    from compiler.build import graph_disruptions
    from compiler.targets.registry import REGISTRY

    def earlier(aid: str) -> dict | None:
        if base is None or aid not in base.actions:
            return None
        return {"key": base.keys[aid], **_record(base, aid)}

    return graph_disruptions(head, earlier, kinds or REGISTRY)


def change_simulations(base: Graph | None, head: Graph) -> list:
    """Each deploy target's simulation of the change on its live system, where it has one (the
    Kubernetes target: compiler/targets/kubernetes/sim/)."""
    from compiler.deploy import TARGETS
    from compiler.targets.registry import CHANGE_SIMULATORS

    out = []
    for target in TARGETS:
        simulate = CHANGE_SIMULATORS.get(target.name)
        found = simulate(base, head) if simulate is not None else None
        if found is not None:
            out.append(found)
    return out


def _unit_row(row: dict) -> dict:
    """The capacity figures a reviewer compares, from a capacity row (compiler.capacity.render)."""
    decode = row["decode"]
    est = row.get("estimate")
    # throughput and price as the plan's estimate table shows them (the ceiling is only its bound);
    # a unit without an estimate keeps the ceiling's figures
    tok_s = est["output_tokens_per_s"]["value"] if est else None if decode is None else decode["tokens_per_s_at_batch"]
    cost = est.get("cost_per_million_tokens") if est else None
    return {
        "host": row["host"], "model": row["model"], "slice": row["slice"],
        "headroom_gib": round(row["headroom_bytes"] / GIB, 2),
        "max_sequences": row["max_sequences"],
        "decode_tok_s": None if tok_s is None else round(tok_s, 1),
        "cost_per_mtok": cost["value"] if cost else None if est else row["cost_per_million_tokens"],
    }


def capacity_deltas(base_rows: list[dict], head_rows: list[dict]) -> list[CapacityDelta]:
    """Units whose figures differ between two revisions (rows from Resolved.capacity_rows)."""
    before = {r["unit"]: _unit_row(r) for r in base_rows}
    after = {r["unit"]: _unit_row(r) for r in head_rows}
    out = []
    for unit in sorted(set(before) | set(after)):
        b, a = before.get(unit), after.get(unit)
        if b == a:
            continue
        out.append(CapacityDelta(unit, "new" if b is None else "removed" if a is None else "changed", b, a))
    return out


def chains(graph: Graph, ids: set[str]) -> list[tuple[str, list[str]]]:
    """(an action of `ids` none of `ids` depends on, it with the actions of `ids` it waits for,
    dependencies first), by action id: what one job builds."""
    def ancestors(aid: str) -> set[str]:
        seen: set[str] = set()
        stack = [aid]
        while stack:
            for d in graph.actions[stack.pop()].deps:
                if d in ids and d not in seen:
                    seen.add(d)
                    stack.append(d)
        return seen

    has_dependent = {d for aid in ids for d in ancestors(aid)}
    return [(aid, [x for x in graph.order if x in ancestors(aid) | {aid}]) for aid in sorted(ids - has_dependent)]


def job_matrix(todo: list, graph: Graph | None, lacks) -> dict:
    """A GitHub Actions `strategy.matrix` with one job per chain of actions this builder cannot run.

    `todo`: actions left to build (anything with `.id`); `lacks(action)`: whether this builder
    lacks a need of it (a GPU, typically). Each entry names such an action that no other one
    depends on, and in `actions` that action with the ones it waits for (space-separated,
    dependencies first), so one runner builds the chain with `kiln build --only A --only B`.
    What this builder can run is built before the fan-out and shared through the registry."""
    if graph is None:
        return {"include": []}
    far = {a.id for a in todo if lacks(graph.actions[a.id])}
    include = [{"name": aid, "actions": " ".join(chain)} for aid, chain in chains(graph, far)]
    return {"include": include}


def class_matrix(todo: list, graph: Graph | None, kinds, machines: list) -> tuple[dict, list[str]]:
    """The job matrix over declared builder classes (compiler/machines.py): one job per
    chain of actions left to build (an action no other depends on, with the actions it waits
    for), on the class that holds every action of the chain in its most preferred way (the first of
    equals: compiler/machines.py home); each entry names the class
    (`class`) and its runner labels (`runs-on`). Also the actions of chains no class holds."""
    from compiler.machines import home as home_of, place

    if graph is None:
        return {"include": []}, []
    include, homeless = [], []
    for aid, chain in chains(graph, {a.id for a in todo}):
        home = home_of([graph.actions[x] for x in chain], kinds, machines)
        if home is None:
            homeless += [x for x in chain if place(kinds, graph.actions[x], machines) is None] or [aid]
            continue
        include.append({"name": aid, "actions": " ".join(chain), "class": home.name, "runs-on": list(home.labels)})
    return {"include": include}, sorted(set(homeless))


def builder_lacks(builder=None, kinds=None):
    """`lacks` for job_matrix from this machine's builder (or $KILN_BUILDER_HAS)."""
    from compiler.graph.builder import Builder
    from compiler.targets.registry import REGISTRY

    builder = builder if builder is not None else Builder()
    kinds = kinds or REGISTRY
    return lambda action: bool(kinds.missing(action, builder))
