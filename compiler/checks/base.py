"""What every semantic check receives, and the base class of checks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterable, Iterator

from compiler.catalog.models import ModelArch
from compiler.diagnostics import Diagnostic, Rule, Severity
from compiler.ir import Resolved, ServingUnit
from compiler.spec.loader import Document
from compiler.spec.models import Host, Model


@dataclass(frozen=True)
class CheckContext:
    """The analysed IR, and how a check turns a spec path into a positioned diagnostic."""

    ir: Resolved

    # What the checks read: the IR's models and hosts as the passes left them (a measured limit is a
    # number by now) and its name, toolchain, image and kubernetes sections, never the parsed spec
    # (there is no `spec` here); spans come from `doc`.
    @property
    def target(self) -> str:
        return self.ir.target

    def models(self) -> Iterator[tuple[str, Model]]:
        """(name, model) of every model the IR resolved, in spec order."""
        return ((name, rm.spec) for name, rm in self.ir.models.items())

    def model(self, name: str) -> Model | None:
        rm = self.ir.models.get(name)
        return rm.spec if rm is not None else None

    def arch(self, name: str) -> ModelArch | None:
        """The catalog architecture of a model; None where the model or its architecture did not
        resolve (K1xx and K9xx say why), so a rule that needs one says nothing."""
        rm = self.ir.models.get(name)
        return rm.arch if rm is not None else None

    def hosts(self) -> Iterator[tuple[str, Host]]:
        """(name, host) of every host the IR resolved, in spec order."""
        return ((name, rh.spec) for name, rh in self.ir.hosts.items())

    def host(self, name: str) -> Host | None:
        rh = self.ir.hosts.get(name)
        return rh.spec if rh is not None else None

    @property
    def doc(self) -> Document:
        return self.ir.document

    @property
    def base_dir(self) -> Path:
        return self.ir.base_dir

    def diag(self, rule: type[Rule], path: tuple, message: str, *, help: str | None = None, key: bool = False,
             notes: Iterable[str] = (), severity: Severity | None = None, file: str | None = None) -> Diagnostic:
        """A diagnostic at `path` of the spec; `file` names another file the finding rests on (a
        capture), whose position is then unknown."""
        if file is not None:
            from compiler.diagnostics import Span
            return Diagnostic(rule.code, severity or rule.severity, message, file, Span.unknown(), help,
                              tuple(notes))
        return Diagnostic(rule.code, severity or rule.severity, message, self.doc.file,
                          self.doc.span_of(path, key=key), help, tuple(notes))


class Check(Rule, ABC):
    """A rule that inspects the analysed IR. Subclasses implement `run`."""

    #: Checks run in ascending order; resolution-type checks first.
    order: ClassVar[int] = 100

    @abstractmethod
    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        """Yield the diagnostics this rule finds."""


def once_per_entry(units: Iterable[ServingUnit]) -> Iterator[ServingUnit]:
    """The first unit of each spec entry, in order: the replicas of a layout share their entry's path,
    and what is wrong with the entry is said once."""
    seen: set[tuple] = set()
    for unit in units:
        if unit.path not in seen:
            seen.add(unit.path)
            yield unit


def weak_fact_note(what: str, status: str, source: str | None = None) -> str:
    """The note a diagnostic carries when its rule rests on a fact that is not verified."""
    src = f" (source: {source})" if source else ""
    return f"this check rests on {what}, which is {status} in the catalog{src}; confirm on the target GPU"
