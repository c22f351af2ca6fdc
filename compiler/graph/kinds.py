"""The protocol every action kind implements, and the registry the executor and planner are given.

The graph, the planner and the executor know no kind by name: they call these methods on the kind
the registry returns for an action. A kind declares
  - `kind`, `version`: its name and the version of its output format (both enter every key);
  - `Params`: the typed parameters (a frozen pydantic model) its actions carry, which are exactly
    what it reads; their canonical JSON enters the key;
  - `lower(ctx)`: the actions of this kind for an analysed spec (compiler.actions.base.LowerContext);
  - `missing(params, builder)`: what this builder lacks to run it (default: the action's `needs`);
  - `size(action, ir)`: how much machine it needs (compiler/graph/sizes.py; default: small);
  - `preflight(params)`: refuse, before any model or tool is touched, what `run` would refuse for
    these params alone (default: nothing);
  - `run(params, ctx)`: produce the artifact in `ctx.out`;
  - `manifest_entry(params, tree)`: what the release manifest says about a built artifact beyond
    its key and tree (a quality gate's figures, an image's digest), as (section, name, value);
  - `disruptions(old, new)`: what replacing an artifact built with `old` params by one built with
    `new` does to what serves, in its deploy target's vocabulary (compiler.targets.disruption:
    Disruption; the graph knows none of it); `old` is None when nothing was built before;
  - `isolated`, `exclusive`: run each action in a child process an interrupt can kill; one at a time;
    `preload`: what an isolated kind's actions import slowly, imported once per build.
`run` may report its phase (`ctx.phase("calibrating")`): the build's progress lines show it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, Iterable, Iterator, Mapping, Protocol, TypeVar

from pydantic import ValidationError

from compiler.params import Params

from .model import Action
from .sizes import Way


P = TypeVar("P", bound=Params)

def _no_phase(phase: str) -> None:
    pass


@dataclass
class RunContext:
    """Where an action writes its output, and what it may read. `phase` tells the build which step
    of a long run is under way ("loading", "calibrating", ...): the progress lines show it. `way`:
    how it runs (one of its Size's ways: GPUs, offload, CPU), decided where the action was placed
    (compiler/graph/sizes.py holds) and obeyed by the run; a run-time input, never part of the key
    (the artifact is the same whichever way made it). None: placed nowhere (a kind run by hand); an
    action that has ways then decides from what it sees."""

    out: Path  # empty directory; everything written here becomes the artifact
    files: dict[str, Path]  # role -> input file (its digest was checked before the run)
    deps: dict[str, Path]  # upstream action id -> its materialized output directory
    log: logging.Logger
    phase: Callable[[str], None] = _no_phase
    way: Way | None = None


class TreeReader(Protocol):
    """Read access to a built artifact's files (a store tree)."""

    def read(self, path: str) -> bytes | None: ...


class Capabilities(Protocol):
    def has(self, need: str) -> bool: ...


class ActionKind(Generic[P]):
    """Base of the action kinds (compiler/actions/*). Subclasses set the class attributes and
    implement `lower` and `run`; the other hooks have defaults."""

    kind: ClassVar[str]
    version: ClassVar[int]
    Params: ClassVar[type[Params]]
    # Runs in a child process of its own (compiler/graph/child.py), which an interrupted build kills:
    # for kinds that run for minutes in native code or drive other programs, where a thread cannot
    # be stopped. Its class must be importable by module and name and construct without arguments.
    isolated: ClassVar[bool] = False
    # Modules an isolated kind's run imports that are slow to import (torch): imported once per build
    # by the process that forks each action's process (compiler/graph/zygote.py), not once per action.
    preload: ClassVar[tuple[str, ...]] = ()
    # At most one action of this kind runs at a time in a build (one device's memory, one tool).
    exclusive: ClassVar[bool] = False

    # The two hooks every registered kind overrides (tests/test_executor.py checks the registry);
    # the base only names them. A kind whose actions a test places in a graph by hand needs no lower.
    def lower(self, ctx: Any) -> list[Action]:
        raise NotImplementedError(f"action kind {self.kind!r} does not lower a spec")

    def run(self, params: P, ctx: RunContext) -> None:
        raise NotImplementedError(f"action kind {self.kind!r} has no run")

    def preflight(self, params: P) -> None:
        """Raise what `run` would raise for these parameters alone (a recipe a tool has no format
        for, a flag it does not take), without loading a model or running a tool."""

    def missing(self, params: P, needs: tuple[str, ...], builder: Capabilities) -> list[str]:
        return [n for n in needs if not builder.has(n)]

    def size(self, action: Action, ir: Any) -> Any:
        """GPUs, host memory and disk the action needs (compiler/actions/sizing.py has the formulas)."""
        from .sizes import SMALL

        return SMALL

    def manifest_entry(self, params: P, tree: TreeReader) -> tuple[str, str, Any] | None:
        return None

    # --- helpers ---------------------------------------------------------------------------------
    def action(self, id: str, params: P, *, inputs: Mapping[str, str] | None = None, deps: Iterable[str] = (),
               needs: tuple[str, ...] = (), files: Mapping[str, str] | None = None,
               cause: Mapping[str, Any] | None = None) -> Action:
        """An action of this kind (its params are checked to be this kind's Params)."""
        if not isinstance(params, self.Params):
            raise TypeError(f"{self.kind}: params must be {self.Params.__name__}, got {type(params).__name__}")
        return Action(id, self.kind, self.version, params, inputs=dict(inputs or {}), deps=tuple(deps),
                      needs=needs, files=dict(files or {}), cause=dict(cause or {}))

    def params_from_record(self, record: Mapping[str, Any] | None) -> P | None:
        """The typed params of an earlier build of this kind (a store ref or another graph's
        action), or None when they are of another version or no longer parse."""
        if record is None or record.get("version") != self.version:
            return None
        try:
            return self.Params.model_validate(record.get("params"))  # type: ignore[return-value]
        except ValidationError:
            return None


class KindRegistry:
    """The action kinds a build knows, in lowering order."""

    def __init__(self, kinds: Iterable[ActionKind]) -> None:
        self._kinds: dict[str, ActionKind] = {}
        for k in kinds:
            if k.kind in self._kinds:
                raise ValueError(f"action kind {k.kind!r} registered twice")
            self._kinds[k.kind] = k

    def __getitem__(self, kind: str) -> ActionKind:
        try:
            return self._kinds[kind]
        except KeyError:
            raise KeyError(f"no action kind {kind!r} is registered") from None

    def __iter__(self) -> Iterator[ActionKind]:
        return iter(self._kinds.values())

    def __contains__(self, kind: str) -> bool:
        return kind in self._kinds

    def missing(self, action: Action, builder: Capabilities) -> list[str]:
        """The needs of `action` this builder lacks (its kind may refine them: a local model copy
        stands in for the network)."""
        return self[action.kind].missing(action.params, action.needs, builder)


Remote = Callable[[Any, str, str], Any]
