"""Writing command output: `emit` (stdout, or a file written atomically) and the one diagnostics
printer every command that shows diagnostics uses (validate, plan, plan --base, build, publish).

`results` are validation results (compiler.pipeline.Validation): each has `file`, `diagnostics` and
`document` (the source text, for the quoted line under each diagnostic; None if it did not load).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence, TextIO


def _write(stream: TextIO, text: str) -> None:
    stream.write(text if text.endswith("\n") or not text else text + "\n")


def emit(text: str, output: Path | None) -> None:
    """`text` on stdout, or into `output` (a temporary file renamed over it: never half-written)."""
    if output is None:
        _write(sys.stdout, text)
        return
    from .common import write_output

    write_output(output, (text if text.endswith("\n") else text + "\n").encode("utf-8"), "--output")


def use_color(mode: str, stream: TextIO) -> bool:
    """--color auto|always|never: auto colors a terminal unless $NO_COLOR is set."""
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def footer_line(results: Sequence, suffix: str = "") -> str:
    """`file[, file...]: N errors, M warnings` (or `no problems found`), then `suffix`."""
    from compiler.diagnostics.render import shown, summary_line

    names = ", ".join(shown(r.file) for r in results)
    return f"{names}: {summary_line([d for r in results for d in r.diagnostics])}{suffix}"


def render_diagnostics(results: Sequence, fmt: str = "text", *, color: bool = False, footer: bool = True,
                       suffix: str = "") -> str:
    """The diagnostics of `results` as text (with the source lines and, if `footer`, the summary
    line), JSON or SARIF."""
    from compiler import __version__
    from compiler.diagnostics.render import render_json, render_sarif, render_text

    diags = [d for r in results for d in r.diagnostics]
    if fmt == "json":
        return render_json(diags)
    if fmt == "sarif":
        return render_sarif(diags, __version__)
    sources = {r.file: r.document.text for r in results if r.document is not None}
    body = render_text(diags, sources, color=color)
    if not footer:
        return body
    return (body + "\n" if body else "") + footer_line(results, suffix)


def print_diagnostics(results: Sequence, fmt: str = "text", *, stream: TextIO | None = None,
                      output: Path | None = None, color: bool = False, footer: bool = True,
                      suffix: str = "") -> None:
    """Print `render_diagnostics(...)` on `stream`, or `emit` it (stdout, or the file `output`)."""
    text = render_diagnostics(results, fmt, color=color, footer=footer, suffix=suffix)
    if stream is None or output is not None:
        emit(text, output)
    else:
        _write(stream, text)


def diagnostic_records(results: Sequence) -> list[dict]:
    """The diagnostics as JSON objects, for commands whose JSON output embeds them (`kiln plan`)."""
    from compiler.diagnostics.render import diagnostic_dict

    return [diagnostic_dict(d) for r in results for d in r.diagnostics]
