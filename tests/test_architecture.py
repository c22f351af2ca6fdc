"""The layering the design promises, read from the import statements (scripts/import_cycles.py):
no cycle between packages, the graph knows only the store, the IR and the checks know no build."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_cycles.py"


def _script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_between_packages() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout


def test_the_script_finds_a_cycle() -> None:
    ic = _script()
    assert ic.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert ic.cycles({"a": {"b"}, "b": set()}) == []


def test_layers() -> None:
    edges = _script().import_edges()

    def deps(package: str) -> set[str]:
        return edges.get(f"compiler.{package}", set())

    assert deps("graph") <= {"compiler.store"}, deps("graph")
    # the store reads what it did not just write through the bounded JSON parser, a leaf module
    assert deps("store") <= {"compiler.boundedjson"} and deps("resources") == set()
    assert deps("boundedjson") == set()
    assert deps("catalog") <= {"compiler.resources"}  # packaged data files
    # the front end: nothing below the checks reaches lowering, actions, the CLI or gitops
    late = {"compiler.actions", "compiler.build", "compiler.lower", "compiler.gitops", "compiler.cli",
            "compiler.release", "compiler.pipeline"}
    for package in ("spec", "diagnostics", "catalog", "capacity", "ir", "checks"):
        assert not deps(package) & late, (package, deps(package) & late)
    assert "compiler.checks" not in deps("ir") and "compiler.checks" not in deps("diagnostics")
    # only the CLI and `python -m compiler` import the CLI
    importers = {p for p, ds in edges.items() if "compiler.cli" in ds}
    assert importers <= {"compiler.__main__"}, importers


def test_the_slow_files_the_scheduler_puts_first_exist() -> None:
    """conftest.SLOW_FILES orders the suite for pytest-xdist; a renamed file would drop out silently."""
    from tests.conftest import SLOW_FILES

    here = Path(__file__).resolve().parent
    assert [name for name in SLOW_FILES if not (here / name).is_file()] == []
