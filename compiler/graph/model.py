"""The action graph: one node per artifact to produce, each with a content key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from compiler.store.canonical import canonical_json


@dataclass(frozen=True)
class Action:
    """One artifact to produce.

    `params` are exactly the values the action reads (a field it does not read must not be here,
    or an unrelated change would rebuild it); `inputs` are digests of the files it reads, by role;
    `deps` are the actions whose outputs it consumes. The key covers all of them.
    """

    id: str  # stable slot name, e.g. "llmapi-options/chat"
    kind: str
    version: int  # bump when the action's output format or logic changes
    params: Any  # the kind's typed Params (compiler.graph.kinds); their JSON form enters the key
    inputs: Mapping[str, str] = field(default_factory=dict)  # role -> "sha256:..."
    deps: tuple[str, ...] = ()
    gpu_arch: str | None = None  # set when the output depends on the GPU architecture
    needs: tuple[str, ...] = ()  # what the executing machine must have, e.g. ("gpu",) ("docker",)
    # How much machine it needs (GPUs, memory, disk: compiler/graph/sizes.py), from the IR; not in
    # the key: the same artifact built on a bigger machine is the same artifact.
    size: Any = field(default=None, compare=False)
    files: Mapping[str, str] = field(default_factory=dict, compare=False)  # role -> path; not in the key
    # The spec values the params are derived from, when the params are a derived document (a host's
    # desired state, capacity figures): not in the key, recorded so a plan can name the edit that
    # changed the artifact rather than everything the edit changed in it.
    cause: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # role -> the spec path that names the input file ("models.chat.quantization.calibration.data"),
    # so a plan says which field's file changed; not in the key
    input_paths: Mapping[str, str] = field(default_factory=dict, compare=False)

    @cached_property
    def params_json(self) -> dict[str, Any]:
        """The parameters as plain JSON data (what the key covers, and what the store records)."""
        return self.params.to_json() if hasattr(self.params, "to_json") else dict(self.params)

    def record(self, dep_keys: Mapping[str, str]) -> dict[str, Any]:
        """What the store remembers about the slot, so a later plan can say what changed."""
        out = {"params": self.params_json, "inputs": dict(self.inputs),
               "deps": {d: dep_keys[d] for d in self.deps}, "version": self.version}
        if self.cause:
            out["cause"] = dict(self.cause)
        if self.input_paths:
            out["input_paths"] = dict(self.input_paths)
        return out


def action_key(action: Action, dep_keys: Mapping[str, str]) -> str:
    """sha256 over canonical JSON of everything that determines the action's output."""
    body = {
        "kind": action.kind,
        "version": action.version,
        "params": action.params_json,
        "inputs": dict(action.inputs),
        "deps": {d: dep_keys[d] for d in action.deps},
        "gpu_arch": action.gpu_arch,
    }
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


@dataclass
class Graph:
    actions: dict[str, Action]
    keys: dict[str, str]  # action id -> key
    order: list[str]  # topological, deterministic

    @staticmethod
    def build(actions: list[Action]) -> "Graph":
        by_id: dict[str, Action] = {}
        for a in actions:
            if a.id in by_id:
                raise ValueError(f"two actions named {a.id}")
            by_id[a.id] = a
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(aid: str, trail: tuple[str, ...]) -> None:
            if state.get(aid) == 2:
                return
            if state.get(aid) == 1:
                raise ValueError("dependency cycle: " + " -> ".join(trail + (aid,)))
            if aid not in by_id:
                raise ValueError(f"{trail[-1]} depends on unknown action {aid}")
            state[aid] = 1
            for dep in sorted(by_id[aid].deps):
                visit(dep, trail + (aid,))
            state[aid] = 2
            order.append(aid)

        for aid in sorted(by_id):
            visit(aid, ())
        keys: dict[str, str] = {}
        for aid in order:
            keys[aid] = action_key(by_id[aid], keys)
        return Graph(by_id, keys, order)

    def dependents(self, aid: str) -> set[str]:
        out: set[str] = set()
        frontier = [aid]
        while frontier:
            cur = frontier.pop()
            for other in self.actions.values():
                if cur in other.deps and other.id not in out:
                    out.add(other.id)
                    frontier.append(other.id)
        return out
