"""The semantic half of validation: resolve catalog facts, then run every check."""

from __future__ import annotations

from pathlib import Path

from compiler.checks import CheckContext, run_checks
from compiler.diagnostics import Diagnostic
from compiler.resolve import Resolved, resolve
from compiler.spec.loader import Document
from compiler.spec.models import Spec


def analyse(spec: Spec, doc: Document, base_dir: Path, options) -> tuple[Resolved, list[Diagnostic]]:
    resolved, diags = resolve(spec, doc, base_dir, getattr(options, "gpu_profiles", None))
    ctx = CheckContext(spec, doc, base_dir, resolved)
    diags.extend(run_checks(ctx))
    return resolved, diags
