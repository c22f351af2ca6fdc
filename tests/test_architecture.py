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


# --- serving runtimes: one module and one data file each, behind one protocol -------------------
def test_no_module_outside_the_runtimes_package_tests_a_runtime_by_name() -> None:
    """A runtime's name appears in comparisons only inside compiler/runtimes: everything else asks
    the registry (what it serves, ignores, listens on), so a new runtime is one module and one file."""
    import ast

    from compiler.runtimes import NAMES

    found = []
    for path in sorted((ROOT / "compiler").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("compiler/runtimes/") or rel.startswith("compiler/templates/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for c in [node.left, *node.comparators]:
                    names = [c] if isinstance(c, ast.Constant) else list(getattr(c, "elts", []))
                    if any(isinstance(n, ast.Constant) and n.value in NAMES for n in names):
                        found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_every_runtime_has_its_module_and_data_file_and_the_spec_offers_exactly_them() -> None:
    import typing

    from compiler.runtimes import REGISTRY, ServingRuntime
    from compiler.spec.models import Serving

    for name, rt in REGISTRY.items():
        assert isinstance(rt, ServingRuntime) and rt.name == name
        module = name.replace("-", "_")
        assert (ROOT / "compiler" / "runtimes" / f"{module}.py").is_file(), name
        assert rt.data_file == f"{module}.json" and (ROOT / "compiler/runtimes/data" / rt.data_file).is_file()
        assert rt.data["name"] == name
    assert typing.get_args(Serving.model_fields["runtime"].annotation) == tuple(REGISTRY)


def test_every_runtime_command_fits_its_own_flag_table() -> None:
    """For each target a runtime serves, one GPU and several (tp, pp > 1): every rank's command line
    passes the shared checker; a refused target raises ServingCommandError with the refusal."""
    import pytest

    from compiler.runtimes import REGISTRY, ServingCommandError, Unit
    from compiler.runtimes.base import check_argv

    ports = {"http": 8000, "grpc": 8001, "metrics": 8002}
    for rt in REGISTRY.values():
        for target in ("llmapi", "engine"):
            for tp, pp in ((1, 1), (2, 1), (2, 2)):
                unit = Unit(model="m", target=target, ports=ports, tp=tp, pp=pp, gpus=tp * pp)
                if target not in rt.targets:
                    assert rt.refusal(target)
                    with pytest.raises(ServingCommandError, match="target only"):
                        rt.serve(unit)
                    continue
                serving = rt.serve(unit)
                argvs = rt.rank_commands(serving.command)
                assert len(argvs) == serving.ranks == rt.ranks(unit) >= 1
                assert all(check_argv(rt.data, argv) == [] for argv in argvs)
                assert serving.listens == [ports[k] for k in rt.ports] and serving.port == ports["http"]
                assert serving.ready and serving.files and rt.live.startswith("/")
                assert check_argv(rt.data, [*argvs[0], "--no-such-flag"]) == [f"--no-such-flag is not a "
                                                                             f"{rt.data['program']} flag"]
                assert rt.restarts(serving, serving) == []
                moved = rt.serve(Unit(model="m", target=target, ports={**ports, "http": 9000}, tp=tp, pp=pp,
                                      gpus=tp * pp))
                assert "command" in rt.restarts(serving, moved)
