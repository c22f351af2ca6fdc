"""What every semantic check receives, and the base class of checks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

from compiler.diagnostics import Diagnostic, Rule, Severity
from compiler.spec.loader import Document
from compiler.spec.models import Spec


@dataclass
class CheckContext:
    """A parsed spec with its source document and the resolved facts checks need."""

    spec: Spec
    doc: Document
    base_dir: Path
    resolved: Any  # compiler.resolve.Resolved; typed loosely to keep this module import-light
    extra: dict[str, Any] = field(default_factory=dict)

    def diag(self, rule: type[Rule], path: tuple, message: str, *, help: str | None = None, key: bool = False,
             notes: Iterable[str] = (), severity: Severity | None = None) -> Diagnostic:
        return Diagnostic(rule.code, severity or rule.severity, message, self.doc.file,
                          self.doc.span_of(path, key=key), help, tuple(notes))


class Check(Rule, ABC):
    """A rule that inspects a resolved spec. Subclasses implement `run`."""

    #: Checks run in ascending order; resolution-type checks first.
    order: ClassVar[int] = 100

    @abstractmethod
    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        """Yield the diagnostics this rule finds."""


def weak_fact_note(what: str, status: str, source: str | None = None) -> str:
    """The note a diagnostic carries when its rule rests on a fact that is not verified."""
    src = f" (source: {source})" if source else ""
    return f"this check rests on {what}, which is {status} in the catalog{src}; confirm on the target GPU"
