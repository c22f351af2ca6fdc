"""The base of every typed parameter model (an action kind's, a serving unit's): immutable, strict
about unknown keys, and the effect a change of each field has on what runs (Effect), declared where
the field is. A leaf module, so that what describes a runtime's unit needs no graph."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping

from pydantic import BaseModel, ConfigDict


# --- what changing a parameter does to what runs, declared where the parameter is ------------------
EFFECTS = ("none", "reload", "restart", "roll", "re-layout", "replace", "scale")


@dataclass(frozen=True)
class Effect:
    """What changing one parameter does to what runs, declared on the field (`Annotated[T, Effect(...)]`):
      none       nothing running reads it (or another field carries the change)
      reload     applied while serving
      restart    the processes that read it restart
      roll       the pods are replaced one at a time (it is in their template)
      re-layout  the devices are re-partitioned
      replace    another object: deleted and created anew (an identity, or a field a controller
                 refuses to update)
      scale      servers added or removed, the others untouched
    `why`: the rule it follows, with its source where it is a controller's; `shows_as`: the kinds of
    disruption a plan may list for such a change (the deploy target's vocabulary, which words them);
    `named`: what the plan calls the field where it lists the change (empty: the field's name; it
    may name the new value's fields, `{role}`); `rank`: where the plan names it among the changed
    fields of one value (changed_names: those of the lowest rank are named, the others echo them;
    None: never named)."""

    what: str
    why: str = ""
    shows_as: tuple[str, ...] = ()
    named: str = ""
    rank: int | None = None

    def naming(self, what: str, rank: int | None = None) -> Effect:
        """The same effect, the plan calling its field `what` (at `rank`, where given)."""
        return dataclasses.replace(self, named=what, rank=self.rank if rank is None else rank)

    def __post_init__(self) -> None:
        if self.what not in EFFECTS:
            raise ValueError(f"unknown effect {self.what!r} (one of {', '.join(EFFECTS)})")


class Params(BaseModel):
    """Base of every kind's typed parameters: immutable, strict about unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # The effect of every field that declares none of its own: for a kind whose artifact nothing
    # running reads but through what consumes it (BUILD_INPUT). None: each field declares its own.
    effect_of_fields: ClassVar[Effect | None] = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# A build input (a checkpoint, an engine, options, a Triton repository, an image's context): what
# runs reads it only through the digest of what consumes it (a serving image, a workload, a host
# script), whose own fields say what a new one does.
BUILD_INPUT = Effect("none", "a build input: what runs sees it only through the digest of what consumes it (a "
                             "serving image, a workload, a host script), whose fields declare what that does")


def effect(model: type[BaseModel], name: str) -> Effect | None:
    """The effect field `name` of `model` declares (else its model's for every field), or None."""
    own = next((m for m in model.model_fields[name].metadata if isinstance(m, Effect)), None)
    return own if own is not None else getattr(model, "effect_of_fields", None)


def changed_names(old: BaseModel, new: BaseModel) -> list[str]:
    """What a plan says changed from `old` to `new` (two values of one Params model): the changed
    fields of the lowest declared rank, each as its effect names it (with `new`'s fields), once,
    in declaration order; [] where no ranked field changed."""
    model = type(new)
    changed = [(e.rank, e.named.format(**dict(new)) if e.named else name) for name in model.model_fields
               if (e := effect(model, name)) is not None and e.rank is not None
               and getattr(old, name) != getattr(new, name)]
    first = min((rank for rank, _ in changed), default=None)
    return list(dict.fromkeys(named for rank, named in changed if rank == first))


def fields_that(model: type[BaseModel], what: str) -> tuple[str, ...]:
    """The fields of `model` whose change has effect `what`, in declaration order."""
    return tuple(name for name in model.model_fields if (e := effect(model, name)) is not None and e.what == what)


def undeclared(model: type[BaseModel]) -> list[str]:
    """The fields of `model` that declare no effect."""
    return [name for name in model.model_fields if effect(model, name) is None]


def changed_kinds(old: BaseModel | None, new: BaseModel, but: tuple[str, ...] = ()) -> list[str]:
    """The kinds of disruption the fields that differ between `old` (None: nothing before) and `new`
    declare, each once, in declaration order: what a change may do, which the target then words
    (and may find did nothing, where a field changed without changing what it stands for). `but`:
    fields left out (a list of parts the caller compares part by part)."""
    out: list[str] = []
    for name in type(new).model_fields:
        e = effect(type(new), name) if name not in but else None
        if e is not None and getattr(old, name, None) != getattr(new, name):
            out += [k for k in e.shows_as if k not in out]
    return out


def worded(kinds: Iterable[str], words: Mapping[str, Callable[..., str | None]], *values: Any) -> list[tuple[str, str]]:
    """(kind, detail) of each kind a change's fields declare (changed_kinds), in that order, as the
    deploy target's `words` put it for `values` (its old and new parameters); a kind whose wording
    finds that nothing it stands for changed (None: a field changed, its meaning did not) is left out.
    The one derivation of every field-declared disruption's words (hostplan, k8s_nodes)."""
    return [(kind, detail) for kind in kinds if (detail := words[kind](*values)) is not None]
