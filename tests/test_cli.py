"""The command-line package (compiler/cli): handlers return ExitCode values, the README's exit codes
are the enum's, the commands are listed in a fixed order, and the library never imports the CLI."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

import compiler.cli.validate
from compiler.cli import ExitCode, _parser, main
from compiler.store.local import LocalStore
from tests.gitrepo import GitRepo

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "compiler"
CLI = PACKAGE / "cli"
QUICKSTART = str(ROOT / "examples" / "quickstart" / "kiln.yaml")
TP8 = ROOT / "examples" / "h200-tp8-llama70b" / "kiln.yaml"
WITH_ERRORS = str(ROOT / "tests" / "cases" / "spec" / "hosts-ranges.yaml")


# --- exit codes -----------------------------------------------------------------------------------
def _readme_exit_codes() -> list[tuple[int, str]]:
    """The README paragraph `Exit codes: 0 ..., 1 ..., ...` as (code, meaning) pairs."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^Exit codes: (.+?)\.\s", text, re.MULTILINE | re.DOTALL)  # up to the sentence's end
    assert match, "README.md has no 'Exit codes: ...' paragraph"
    paragraph = " ".join(match.group(1).split())
    flat = re.sub(r"\([^()]*\)", "", paragraph)  # commas and digits inside parentheses are not items
    pairs = []
    for item in flat.split(", "):
        code, _, meaning = item.strip().partition(" ")
        assert code.isdigit(), f"README exit codes: {item!r} does not start with a code"
        pairs.append((int(code), meaning.strip()))
    return pairs


def test_readme_exit_codes_are_the_enum() -> None:
    assert [code for code, _ in _readme_exit_codes()] == [int(c) for c in ExitCode]


def test_exit_code_values() -> None:
    assert {c.name: c.value for c in ExitCode} == {"OK": 0, "ERRORS": 1, "USAGE": 2, "INTERNAL": 3,
                                                   "INCOMPLETE": 4, "CHANGES": 5, "INTERRUPTED": 130,
                                                   "BROKEN_PIPE": 141}


def _returns(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            yield node


def test_no_bare_integer_is_returned_in_the_cli() -> None:
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _returns(tree):
            values = [node.value]
            if isinstance(node.value, ast.IfExp):
                values = [node.value.body, node.value.orelse]
            for value in values:
                assert not (isinstance(value, ast.Constant) and type(value.value) is int), \
                    f"{path.relative_to(ROOT)}:{node.lineno} returns a bare integer; return an ExitCode"
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith(("cmd_", "_plan")):
                assert fn.returns is not None and ast.unparse(fn.returns) == "ExitCode", \
                    f"{path.relative_to(ROOT)}: {fn.name} must be annotated -> ExitCode"


# --- handlers ---------------------------------------------------------------------------------------
@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("KILN_BUILDER_HAS", "")  # nothing beyond the CPU: deferrals do not depend on the machine
    LocalStore(tmp_path / "store")  # the store commands refuse a store that does not exist
    return tmp_path


CASES = [
    (["--help"], ExitCode.OK),
    (["--version"], ExitCode.OK),
    ([], ExitCode.USAGE),
    (["bogus"], ExitCode.USAGE),
    (["validate", QUICKSTART], ExitCode.OK),
    (["validate", QUICKSTART, "--format", "sarif"], ExitCode.OK),
    (["validate", WITH_ERRORS, "--format", "json"], ExitCode.ERRORS),
    (["validate", "no-such-spec.yaml"], ExitCode.USAGE),
    (["explain"], ExitCode.OK),
    (["explain", "K101"], ExitCode.OK),
    (["explain", "K000x"], ExitCode.USAGE),
    (["schema", "--check", "--output-dir", str(ROOT / "schemas")], ExitCode.OK),
    (["catalog", "--models"], ExitCode.OK),
    (["catalog", "no-such-gpu"], ExitCode.USAGE),
    (["plan", QUICKSTART], ExitCode.OK),
    (["plan", WITH_ERRORS], ExitCode.ERRORS),
    (["plan", QUICKSTART, "--cache", "127.0.0.1:1/x"], ExitCode.USAGE),
    (["plan", QUICKSTART, "--matrix"], ExitCode.OK),
    (["plan", QUICKSTART, "--matrix", "--cache", "/not-a-registry"], ExitCode.USAGE),
    (["build", QUICKSTART, "--jobs", "0"], ExitCode.USAGE),
    (["build", WITH_ERRORS], ExitCode.ERRORS),
    (["build", QUICKSTART, "-q", "--only", "spec-snapshot"], ExitCode.INCOMPLETE),
    (["build", QUICKSTART, "-q", "--only", "spec-snapshot", "--allow-partial"], ExitCode.OK),
    (["build", QUICKSTART, "--cache", "host/NOT A NAMESPACE"], ExitCode.USAGE),
    (["export", QUICKSTART, "--to", "/nonexistent/out"], ExitCode.USAGE),  # no store: nothing built yet
    (["show", QUICKSTART, "host-script/dev-h100/provision.sh"], ExitCode.USAGE),
    (["store", "verify"], ExitCode.OK),
    (["store", "gc", "--keep", "0"], ExitCode.USAGE),
    (["store", "gc", "--keep", "1"], ExitCode.OK),
    (["publish", "no-such-spec.yaml"], ExitCode.USAGE),
    (["publish", WITH_ERRORS, "--commit", "abc", "--registry", "127.0.0.1:1/x"], ExitCode.ERRORS),
]


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(a[:3]).replace(str(ROOT) + "/", "") or "(none)"
                                                      for a, _ in CASES])
def test_handlers_return_exit_codes(cli_env: Path, capsys, argv: list[str], expected: ExitCode) -> None:
    code = main(argv)
    capsys.readouterr()
    assert type(code) is ExitCode and code is expected


def test_plan_base_and_init_return_exit_codes(tmp_path: Path, monkeypatch, capsys) -> None:
    repo = GitRepo(tmp_path / "repo")
    (repo.root / "deploy").mkdir()
    shutil.copy(TP8, repo.root / "deploy" / "kiln.yaml")
    repo.commit("base")
    monkeypatch.chdir(repo.root)
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    init = ["init", "deploy/kiln.yaml", "--registry", "127.0.0.1:5000/inference",
            "--kiln-repo", "https://git.example/kiln", "--kiln-commit", "0" * 40]
    steps = [(init, ExitCode.OK),
             (init + ["--branch", "release"], ExitCode.USAGE),  # the workflow differs: needs --force
             (["plan", "deploy/kiln.yaml", "--base", "main"], ExitCode.OK)]
    for argv, expected in steps:
        code = main(argv)
        assert type(code) is ExitCode and code is expected, argv
    repo.edit("deploy/kiln.yaml", "max_queue_size: 512", "max_queue_size: 256")
    for argv, expected in [(["plan", "deploy/kiln.yaml", "--base", "main"], ExitCode.CHANGES),
                           (["plan", "deploy/kiln.yaml", "--base", "main", "--matrix"], ExitCode.OK),
                           (["plan", "deploy/kiln.yaml", "--base", "no-such-ref"], ExitCode.USAGE)]:
        code = main(argv)
        assert type(code) is ExitCode and code is expected, argv
    capsys.readouterr()


@pytest.mark.parametrize("exc,expected", [(RuntimeError("boom"), ExitCode.INTERNAL),
                                          (KeyboardInterrupt(), ExitCode.INTERRUPTED),
                                          (BrokenPipeError(), ExitCode.BROKEN_PIPE)])
def test_unexpected_exceptions(monkeypatch, capsys, exc: BaseException, expected: ExitCode) -> None:
    def handler(args):
        raise exc

    monkeypatch.delenv("KILN_DEBUG", raising=False)
    monkeypatch.setattr(compiler.cli.validate, "cmd_explain", handler)
    code = main(["explain"])
    assert type(code) is ExitCode and code is expected
    err = capsys.readouterr().err
    if expected is ExitCode.INTERNAL:
        assert err == ("kiln: internal error: RuntimeError: boom\n"
                       "This is a bug in kiln; rerun with KILN_DEBUG=1 for details.\n")
    monkeypatch.setenv("KILN_DEBUG", "1")
    if expected is ExitCode.INTERNAL:
        with pytest.raises(RuntimeError):
            main(["explain"])


def test_commands_are_listed_in_a_fixed_order() -> None:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    assert list(sub.choices) == ["validate", "explain", "schema", "catalog", "plan", "render", "build", "export", "show",
                                 "lock", "tune", "publish", "verify", "init", "store"]


def test_plan_reads_a_store_without_creating_it(tmp_path: Path, capsys) -> None:
    store = tmp_path / "no" / "store"
    assert main(["plan", QUICKSTART, "--store", str(store)]) == ExitCode.OK
    assert "run" in capsys.readouterr().out
    assert not (tmp_path / "no").exists()
    assert main(["plan", QUICKSTART, "--store", str(store), "--matrix"]) == ExitCode.OK
    assert not (tmp_path / "no").exists()


# --- the library does not import the CLI -------------------------------------------------------------
def _imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules `path` imports (relative imports resolved against its package)."""
    package = list(path.relative_to(ROOT).with_suffix("").parts)[:-1]  # a module's or __init__'s package
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from compiler import cli`
    return names


def test_only_the_cli_imports_the_cli() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if CLI in path.parents or path == PACKAGE / "__main__.py":
            continue
        hits = [m for m in _imported_modules(path) if m == "compiler.cli" or m.startswith("compiler.cli.")]
        if hits:
            offenders.append(f"{path.relative_to(ROOT)}: {', '.join(sorted(hits))}")
    assert not offenders, "library modules import the CLI:\n" + "\n".join(offenders)


def test_the_import_scan_sees_relative_imports(tmp_path: Path) -> None:
    assert "compiler.cli" in _imported_modules(CLI / "__main__.py")
    probe = PACKAGE / "gitops" / "cache.py"
    assert "compiler.gitops.oci" in _imported_modules(probe)  # `from .oci import ...`


def test_plan_shows_each_units_mig_placement_as_the_host_plan_creates_it(tmp_path: Path, capsys) -> None:
    import json

    from compiler.build import open_store, plan_spec

    spec = ROOT / "examples" / "b200-mig-three-models" / "kiln.yaml"
    assert main(["plan", str(spec), "--store", str(tmp_path / "s"), "--format", "json"]) == ExitCode.OK
    rows = json.loads(capsys.readouterr().out)["placements"]
    graph = plan_spec(spec, open_store(tmp_path / "s", create=False, missing_ok=True)).graph
    created = {(host, g["index"], i["slot"]): f"{i['profile_id']}:{i['start']}"
               for host in ("b200-a",) for g in graph.actions[f"host-plan/{host}"].params.state.model_dump()["gpus"]
               if g["mig"] for i in g["mig"]["instances"]}
    assert len(rows) == len(created) == 6
    for r in rows:
        slot = int(r["unit"].rsplit("mig", 1)[1])
        assert created[(r["host"], r["gpu"], slot)] == f"{r['profile_id']}:{r['start']}", r
    assert main(["plan", str(spec), "--store", str(tmp_path / "s")]) == ExitCode.OK
    text = capsys.readouterr().out
    assert re.search(r"^b200-a/gpu0/mig1 +coder +0 +2g\.45gb +14:4 +4-5$", text, re.M), text
