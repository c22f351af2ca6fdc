"""Inline expectations for spec test cases (mypy-style).

A case is a spec file whose comments say which diagnostics it must produce:

    limits: {max_batch_szie: 8}   # expect: K101:14

means "a K101 at this line, column 14". Several per line are separated by commas. A diagnostic on
a line that cannot carry a comment is written anywhere as `# expect[LINE]: CODE:COL`.
A warning is written with a `W` suffix on the code (`K512W:5`) so that severities are pinned too.
A header line `# kiln-options: --gpu-profiles FILE` passes options (paths relative to the case).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from compiler.diagnostics import Diagnostic, Severity
from compiler.pipeline import Options

_INLINE = re.compile(r"\s*#\s*expect:\s*(?P<items>[^#]*?)\s*$")
_EXPLICIT = re.compile(r"^#\s*expect\[(?P<line>\d+)\]:\s*(?P<items>.*?)\s*$")
_OPTIONS = re.compile(r"^#\s*kiln-options:\s*(?P<opts>.*?)\s*$")
_ITEM = re.compile(r"^(?P<code>K\d{3})(?P<warn>W?):(?P<col>\d+)$")


@dataclass(frozen=True, order=True)
class Expected:
    line: int
    column: int
    code: str
    warning: bool = False

    def render(self) -> str:
        return f"{self.code}{'W' if self.warning else ''}:{self.column}"


def parse_expectations(text: str) -> set[Expected]:
    out: set[Expected] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _EXPLICIT.match(line.strip())
        if m:
            out |= _items(m.group("items"), int(m.group("line")))
            continue
        m = _INLINE.search(line)
        if m:
            out |= _items(m.group("items"), lineno)
    return out


def parse_options(text: str) -> list[str]:
    for line in text.splitlines():
        m = _OPTIONS.match(line.strip())
        if m:
            return m.group("opts").split()
    return []


def case_options(case: Path, text: str) -> Options:
    """The options a case's `# kiln-options:` header names; capture paths are relative to the case's
    directory (normalised, as a user would type them from where they run `kiln`)."""
    captures: list[tuple[Path, ...]] = []
    for arg in parse_options(text):
        if arg == "--gpu-profiles":
            captures.append(())
        elif captures and not arg.startswith("--"):
            captures[-1] += (Path(os.path.normpath(case.parent / arg)),)
        else:
            raise ValueError(f"{case}: unknown kiln-options argument {arg!r}")
    return Options(gpu_profiles=tuple(captures))


def _items(items: str, line: int) -> set[Expected]:
    out = set()
    for raw in filter(None, (s.strip() for s in items.split(","))):
        m = _ITEM.match(raw)
        if not m:
            raise ValueError(f"line {line}: bad expectation {raw!r} (want CODE:COL or CODEW:COL)")
        out.add(Expected(line, int(m.group("col")), m.group("code"), bool(m.group("warn"))))
    return out


def actual(diags: list[Diagnostic]) -> set[Expected]:
    return {Expected(d.span.line, d.span.column, d.code, d.severity is Severity.WARNING)
            for d in diags if d.severity in (Severity.ERROR, Severity.WARNING)}


def rewrite(text: str, found: set[Expected]) -> str:
    """The case text with its expectations replaced by `found` (the update flag). A line the case
    points at with `# expect[LINE]:` keeps that form where it stands; a stale one is dropped and the
    line numbers after it renumbered, so an update moves no expectation off its line."""
    lines = text.splitlines()
    by_line: dict[int, str] = {}
    for e in sorted(found):
        by_line[e.line] = f"{by_line[e.line]}, {e.render()}" if e.line in by_line else e.render()
    pointed = {i: int(m.group("line")) for i, line in enumerate(lines) if (m := _EXPLICIT.match(line.strip()))}
    dropped = [i + 1 for i, n in pointed.items() if n not in by_line]

    def renumbered(line_no: int) -> int:  # where an original line lands once the stale pointers go
        return line_no - sum(1 for d in dropped if d < line_no)

    out: list[str] = []
    for i, line in enumerate(lines):
        if i in pointed:
            if pointed[i] in by_line:
                out.append(f"# expect[{renumbered(pointed[i])}]: {by_line[pointed[i]]}")
            continue
        line = _INLINE.sub("", line)
        if i + 1 in by_line and i + 1 not in pointed.values() and line.strip() and not line.lstrip().startswith("#"):
            line = f"{line}  # expect: {by_line[i + 1]}"
        out.append(line)
    # a line that cannot carry a comment gets a pointer at the end, where it moves no other line
    inline_or_pointed = set(pointed.values()) | {n for n in by_line if 0 < n <= len(lines)
                                                 and lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#")
                                                 and n - 1 not in pointed}
    out += [f"# expect[{renumbered(n)}]: {items}" for n, items in sorted(by_line.items()) if n not in inline_or_pointed]
    return "\n".join(out) + "\n"


def case_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.yaml") if p.is_file())
