"""The front half of the compiler, as one pure call per file:
load -> parse -> resolve -> analysis passes -> checks. The passes compare the records `kiln tune`
wrote with what the spec now describes, from the IR (compiler/ir/tune_inputs.py), and put the
records that apply into the estimates; the checks report the others. Their artifact keys are
compared where the spec is lowered (compiler/staleness.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from compiler.checks import CheckContext, run_checks
from compiler.diagnostics import Diagnostic, sort_diagnostics
from compiler.ir import Resolved, analyse, resolve
from compiler.ir.inputs import input_roots
from compiler.ir.lockfile import lock_path
from compiler.spec.loader import Document, LoadResult, load_file, load_text
from compiler.spec.models import Spec
from compiler.spec.parse import parse_document


@dataclass(frozen=True)
class Options:
    """Inputs besides the spec that change what the checks see."""

    # One capture per GPU model: its `nvidia-smi mig -lgip` (and -lgipp) output, in one file or two.
    # It replaces the catalog's MIG profiles for the hosts of that GPU only.
    gpu_profiles: tuple[tuple[Path, ...], ...] = ()
    # A directory of model files a spec may read besides its repository (compiler/ir/inputs.py);
    # the builder's $KILN_MODELS unless given.
    models_root: str | None = field(default_factory=lambda: os.environ.get("KILN_MODELS") or None)


@dataclass
class Validation:
    file: str
    document: Document | None
    spec: Spec | None
    resolved: Resolved | None = None  # the analysed IR; None when the spec did not parse
    diagnostics: list[Diagnostic] = field(default_factory=list)
    base_dir: Path = Path(".")  # relative paths in the spec are relative to this directory
    # whether the artifact keys of the measurement records the IR found current (or, a v1 record, could
    # not judge) were compared: once the spec is lowered, by compiler/staleness.keyed_diagnostics
    keys_compared: bool = False

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def validate_path(path: str | Path, options: Options | None = None, display: str | None = None) -> Validation:
    """Validate a spec file; relative paths in it are relative to its directory."""
    return _validate(load_file(path, display or str(path)), display or str(path), Path(path).resolve().parent,
                     options or Options(), lock_path(Path(path)))


def validate_text(text: str, base_dir: Path, display: str = "kiln.yaml", options: Options | None = None) -> Validation:
    """Validate a spec held in memory, as if it were the file `display` in `base_dir`."""
    return _validate(load_text(text, display), display, base_dir.resolve(), options or Options(),
                     lock_path(base_dir / Path(display).name))


def validate_loaded(loaded: LoadResult, base_dir: Path, options: Options | None = None) -> Validation:
    """Validate what `load_text` returned, as if it were the file it names in `base_dir`: for callers
    that load one text and validate edits of its data (the spans stay the loaded text's)."""
    shown = loaded.document.file if loaded.document is not None else "kiln.yaml"
    return _validate(loaded, shown, base_dir.resolve(), options or Options(), lock_path(base_dir / Path(shown).name))


def _validate(loaded: LoadResult, shown: str, base_dir: Path, options: Options, lock: Path | None) -> Validation:
    result = Validation(shown, loaded.document, None, diagnostics=list(loaded.diagnostics), base_dir=base_dir)
    if loaded.document is None:
        result.diagnostics = sort_diagnostics(result.diagnostics)
        return result
    parsed = parse_document(loaded.document)
    # A value the loader already reported (an unknown tag, an unreadable scalar) fails the schema
    # too; one diagnostic per place is enough. (Not for a loader warning: an error still fails the spec.)
    reported = {(d.span.line, d.span.column) for d in loaded.diagnostics if d.is_error}
    result.diagnostics.extend(d for d in parsed.diagnostics if (d.span.line, d.span.column) not in reported)
    result.spec = parsed.spec
    roots = input_roots(result.base_dir, options.models_root)
    if parsed.spec is not None and not any(d.is_error for d in result.diagnostics):
        ir, diags = resolve(parsed.spec, loaded.document, result.base_dir, options.gpu_profiles, lock=lock,
                            roots=roots)
        ir = analyse(ir)
        result.resolved = ir
        result.diagnostics.extend(diags)
        result.diagnostics.extend(run_checks(CheckContext(ir)))
    elif parsed.partial is not None:
        # One run, all problems: the entries that parsed are checked too (the IR stays out of the
        # result: a spec with errors is never lowered).
        ir, diags = resolve(parsed.partial, loaded.document, result.base_dir, options.gpu_profiles,
                            set_aside=parsed.set_aside, lock=lock, roots=roots)
        result.diagnostics.extend(diags)
        result.diagnostics.extend(run_checks(CheckContext(analyse(ir))))
    result.diagnostics = sort_diagnostics(result.diagnostics)
    return result
