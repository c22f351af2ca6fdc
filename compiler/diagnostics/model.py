"""The diagnostic record every stage produces, and its source span."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True, order=True)
class Span:
    """1-based line and column of the first character; end is exclusive and may equal start."""

    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None

    @staticmethod
    def unknown() -> "Span":
        return Span(1, 1)


@dataclass(frozen=True)
class Diagnostic:
    code: str  # stable, e.g. "K101"
    severity: Severity
    message: str
    file: str
    span: Span
    help: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def sort_key(self) -> tuple:
        return (self.file, self.span.line, self.span.column, self.code, self.message)


def sort_diagnostics(diags: list[Diagnostic]) -> list[Diagnostic]:
    """Source order, duplicates removed (two passes can reach the same fault)."""
    seen: set[tuple] = set()
    out: list[Diagnostic] = []
    for d in sorted(diags, key=Diagnostic.sort_key):
        k = (d.code, d.file, d.span.line, d.span.column, d.message)
        if k not in seen:
            seen.add(k)
            out.append(d)
    return out
