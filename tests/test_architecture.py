"""The layering the design promises, read from the import statements (scripts/import_cycles.py):
no cycle between packages or modules, the graph knows only the store, the IR and the checks know no
build; the nevers hold transitively, function-local imports included."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_cycles.py"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script():
    return _load("import_cycles")


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

    assert deps("graph") <= {"compiler.store", "compiler.params"}, deps("graph")
    assert deps("params") == set()
    # the store reads what it did not just write through the bounded JSON parser, a leaf module
    assert deps("store") <= {"compiler.boundedjson"} and deps("resources") == set()
    assert deps("boundedjson") == set()
    assert deps("catalog") <= {"compiler.resources"}  # packaged data files
    # the targets' objects are asked by the spec, the IR and the checks: they import nothing; what the
    # targets build is late (the nevers below hold it transitively)
    assert deps("deploy") == set() and edges.get("compiler.targets", set()) == set()
    assert "compiler.checks" not in deps("ir") and "compiler.checks" not in deps("diagnostics")
    # only the CLI and `python -m compiler` import the CLI
    importers = {p for p, ds in edges.items() if "compiler.cli" in ds}
    assert importers <= {"compiler.__main__"}, importers


def test_the_nevers_hold_transitively() -> None:
    """What a package never reaches, through any chain of imports (module by module, a function's own
    imports and the packages above what is imported included; scripts/import_cycles.py NEVERS):
    checking never builds or emits (no action, nothing of compiler/targets/, no serving renderer, graph,
    lowering or build), the executor's graph knows no action, target or CLI, capacity no IR or check,
    the catalog no spec or IR, the store and the runtimes no action or target, a target's object
    nothing at all."""
    ic = _script()
    nevers = {package: never for package, never, _ in ic.NEVERS}
    # at least what the design promises (the reviewer's list), each a whole package
    promised = {"compiler.checks": ("compiler.actions", "compiler.targets", "compiler.graph", "compiler.serving.triton",
                                    "compiler.build", "compiler.lower"),
                "compiler.graph": ("compiler.actions", "compiler.targets", "compiler.cli"),
                "compiler.capacity": ("compiler.ir", "compiler.checks"), "compiler.catalog": ("compiler.ir", "compiler.spec"),
                "compiler.store": ("compiler.actions", "compiler.targets"),
                "compiler.runtimes": ("compiler.targets", "compiler.actions")}
    assert {p: [f for f in fs if not ic.within(f, nevers.get(p, ()))] for p, fs in promised.items()} == \
        {p: [] for p in promised}
    edges = ic.module_edges()
    assert all(any(ic.within(m, (p,)) for m in edges) for p in nevers), "a never names no package"
    assert ic.broken_nevers(edges) == []


def test_a_check_that_reaches_the_targets_breaks_a_never(tmp_path: Path) -> None:
    """The walk sees what checking must not reach: a check importing compiler.targets itself, and a
    function-local import of a target's module two packages away (checks -> ir -> targets)."""
    import shutil

    ic = _script()
    for path in (ROOT / "compiler").rglob("*.py"):
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    refs = tmp_path / "compiler" / "checks" / "refs.py"
    refs.write_text(refs.read_text(encoding="utf-8") + "\nfrom compiler import targets\n", encoding="utf-8")
    broken = ic.broken_nevers(ic.module_edges(tmp_path))
    assert [b for b in broken if b.startswith("compiler.checks.refs reaches compiler.targets ")] == \
        ["compiler.checks.refs reaches compiler.targets (checking never emits or builds)"], broken
    refs.write_bytes((ROOT / "compiler" / "checks" / "refs.py").read_bytes())
    pools = tmp_path / "compiler" / "ir" / "pools.py"
    pools.write_text(pools.read_text(encoding="utf-8") + "\n\ndef _late():\n    from compiler.targets.kubernetes import meta\n",
                     encoding="utf-8")
    broken = ic.broken_nevers(ic.module_edges(tmp_path))
    assert any(b.startswith("compiler.checks.base reaches compiler.targets, compiler.targets.kubernetes") for b in broken), broken
    assert any(b.startswith("compiler.ir.pools reaches compiler.targets") for b in broken), broken


def test_the_walk_follows_local_imports_and_parent_packages_not_type_checking(tmp_path: Path) -> None:
    ic = _script()
    for name, text in {"p/__init__.py": "", "p/a/__init__.py": "from p.b import x\n",
                       "p/b/__init__.py": "", "p/b/x.py": "def f():\n    from p.c import y\n",
                       "p/c/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.a\n",
                       "p/c/y.py": "from . import z\n", "p/c/z.py": ""}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = ic.module_edges(tmp_path, "p")
    assert edges["p.a"] == {"p.b", "p.b.x"} and edges["p.b.x"] == {"p.c", "p.c.y"}
    assert edges["p.c"] == set() and edges["p.c.y"] == {"p.c.z"}  # its own package is set up first
    assert ic.reach(edges, {"p.a"}) == {"p.b", "p.b.x", "p.c", "p.c.y", "p.c.z"}
    assert ic.cycles(edges) == []
    (tmp_path / "p/c/z.py").write_text("def g():\n    import p.b.x\n")
    assert ic.cycles(ic.module_edges(tmp_path, "p")) == [["p.b.x", "p.c.y", "p.c.z"]]


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", *args],
                          cwd=cwd, capture_output=True, text=True)


def test_no_function_in_the_compiler_is_above_mccabe_25() -> None:
    """The complexity gate: pyproject.toml's [tool.ruff.lint] (C901, max-complexity 25) over compiler/.
    ruff comes with the test extra; a missing ruff fails here rather than passing the gate unseen."""
    import tomllib

    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert lint["select"] == ["C901"] and lint["mccabe"]["max-complexity"] == 25
    proc = _ruff("compiler")
    assert "No module named ruff" not in proc.stderr, "install the test extra (pip install -e '.[test]')"
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_gate_sees_a_function_of_26(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(25))
    (tmp_path / "m.py").write_text(f"def f(x):\n{body}    return -1\n")
    proc = _ruff("m.py", cwd=tmp_path)
    assert proc.returncode == 1 and "`f` is too complex (26 > 25)" in proc.stdout, proc.stdout + proc.stderr


def test_the_slow_files_the_scheduler_puts_first_exist() -> None:
    """conftest.SLOW_FILES orders the suite for pytest-xdist; a renamed file would drop out silently."""
    from tests.conftest import SLOW_FILES

    here = Path(__file__).resolve().parent
    assert [name for name in SLOW_FILES if not (here / name).is_file()] == []


# --- the deploy targets (their objects: compiler/deploy/; what they build: compiler/targets/) ---
TARGETS_DIR = ROOT / "compiler" / "targets"
EXAMPLES = ROOT / "examples"
# Every kind the build knows (the ones before the targets had a package of their own, and the
# weights image since): a move must not lose or add a kind.
KINDS_BEFORE_THE_MOVE = {"spec-snapshot", "llmapi-options", "calibration-set", "model-source", "quantize",
                         "quality-gate", "engine", "host-plan", "host-script", "capacity-report", "tokenizer",
                         "triton-repo", "image-context", "image", "k8s-node-layer", "k8s-deployment", "k8s-dgd",
                         "k8s-release", "weights-image"}
KINDS_SINCE = {"disagg-options"}  # the disaggregated model's files (compiler/actions/disaggregated.py)


def _imported_modules(path: Path) -> set[str]:
    """The compiler modules a file imports, relative imports resolved (as scripts/import_cycles.py does)."""
    import ast

    module = list(path.relative_to(ROOT).with_suffix("").parts)
    base = module[:-1]  # a package's __init__ and a module both resolve `.` to their directory
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            target = ".".join(base[:len(base) - (node.level - 1)] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            out |= {target} | {f"{target}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("compiler.")}


def test_a_target_object_imports_nothing_else_of_the_compiler() -> None:
    """The registry of targets and each target's object (compiler/deploy/) are what the spec, the IR,
    the checks and the action kinds ask: they import nothing but each other, so asking them pulls in
    no build; compiler/targets/__init__.py, run by importing anything a target builds, imports nothing."""
    ic = _script()
    edges = ic.module_edges()
    seam = {m for m in edges if ic._package(m) == "compiler.deploy"}
    assert seam == {"compiler.deploy", "compiler.deploy.base", "compiler.deploy.hosts", "compiler.deploy.kubernetes"}
    assert ic.reach(edges, seam) == set(), ic.reach(edges, seam)
    assert edges["compiler.targets"] == set()


def test_no_module_outside_the_targets_package_tests_a_target_by_name() -> None:
    """A deploy target's name (or the spec's `deploy` value) appears in comparisons only inside
    compiler/targets: everything else asks the target's object (`compiler.deploy.of(host)`), so a new
    target is one package under compiler/targets/, one module under compiler/deploy/ and its registry
    lines (the AST is read, not the text: scripts/seams.py)."""
    from compiler.deploy import BY_DEPLOY

    seams = _load("seams")
    names = set(BY_DEPLOY) | {t.name for t in BY_DEPLOY.values()}
    assert names == set(seams.TARGET_NAMES)
    assert seams.target_comparisons(ROOT, names) == []


def test_the_comparison_walk_sees_what_it_looks_for(tmp_path: Path) -> None:
    seams = _load("seams")
    (tmp_path / "compiler" / "targets").mkdir(parents=True)
    (tmp_path / "compiler" / "a.py").write_text('if h.deploy == "host" or "kubernetes" in ds or x in ("hosts", 1):\n'
                                                '    y = {"host": 1}\n')
    (tmp_path / "compiler" / "targets" / "t.py").write_text('ok = h.deploy == "host"\n')
    assert seams.target_comparisons(tmp_path) == ["compiler/a.py:1"]


def test_checks_read_the_resolved_models_and_hosts_not_the_parsed_spec(tmp_path: Path) -> None:
    """Checks read models, hosts and the build target from the IR (CheckContext.models(), hosts(),
    target) and the spec's other sections from the IR too (Resolved.name, toolchain, image,
    kubernetes): no read of the parsed spec is left, down from 112; the ceiling keeps it so."""
    seams = _load("seams")
    reads = seams.spec_reads(ROOT)
    assert sum(reads.values()) == 0, reads
    (tmp_path / "compiler" / "checks").mkdir(parents=True)
    (tmp_path / "compiler" / "checks" / "a.py").write_text("x = ctx.spec.models\ny = ctx.ir.spec\nz = ctx.ir.models\n")
    assert seams.spec_reads(tmp_path) == {"compiler/checks/a.py": 2}


def test_the_spec_offers_exactly_the_registered_targets() -> None:
    import typing

    from compiler.spec.models import Host
    from compiler.deploy import DEPLOYS, TARGETS
    from compiler.targets.registry import KINDS

    assert typing.get_args(Host.model_fields["deploy"].annotation) == DEPLOYS == ("host", "kubernetes")
    assert Host.model_fields["deploy"].default == "host"
    assert list(KINDS) == [t.name for t in TARGETS]  # a target without its kinds registered fails here


def test_a_target_never_imports_another_target() -> None:
    packages = sorted(p.name for p in TARGETS_DIR.iterdir() if (p / "__init__.py").is_file())
    assert packages == ["hosts", "kubernetes"]
    for name in packages:
        others = tuple(f"compiler.{where}.{o}" for o in packages if o != name for where in ("targets", "deploy"))
        for path in sorted((TARGETS_DIR / name).rglob("*.py")):
            bad = {m for m in _imported_modules(path) if m.startswith(others) or m == "compiler.targets"}
            assert not bad, (path.relative_to(ROOT).as_posix(), bad)


def test_the_import_walk_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    modules = _imported_modules(TARGETS_DIR / "kubernetes" / "k8s_nodes.py")
    assert {"compiler.targets.kubernetes.nodelayer", "compiler.actions.gpustate"} <= modules


def _resolved(example: str):
    from compiler.pipeline import validate_path

    result = validate_path(EXAMPLES / example / "kiln.yaml")
    assert result.ok and result.resolved is not None, [d.message for d in result.diagnostics]
    return result


def test_every_registered_target_implements_the_protocol() -> None:
    from compiler.graph.kinds import ActionKind
    from compiler.store.digests import DigestCache
    from compiler.deploy import TARGETS
    from compiler.deploy.base import DeployTarget
    from compiler.lower import lower
    from compiler.targets.registry import KINDS, REGISTRY, disruptions, in_scope

    assert [t.name for t in TARGETS] == ["hosts", "kubernetes"]
    deployed: dict[str, set[str]] = {}
    for example in ("b200-mig-three-models", "k8s-two-pools"):
        result = _resolved(example)
        ir = result.resolved
        graph = lower(result, DigestCache(None))
        for target in TARGETS:
            assert isinstance(target, DeployTarget) and target.disruption_scope in ("gpu", "pool"), target.name
            kinds = KINDS[target.name]
            assert kinds and all(isinstance(k, ActionKind) and k.kind in REGISTRY for k in kinds)
            where = target.applies(ir)
            assert where == sorted(where) and set(where) <= set(ir.hosts)
            placement = target.placement(ir)
            assert list(placement) == where
            assert all(p.model in ir.models for placed in placement.values() for p in placed)
            deployed.setdefault(target.name, set()).update(where)
            # its kinds lower exactly what it says it deploys
            own = {k.kind for k in kinds}
            lowered = [aid for aid in graph.order if graph.actions[aid].kind in own]
            assert bool(lowered) == bool(where), (example, target.name)
            if target.name == "hosts":  # one plan and one script per host
                assert sorted(aid.split("/", 1)[1] for aid in lowered) == sorted(where * 2)
            # what its kinds would disrupt deploying this spec from nothing is of the target's scope
            for aid in graph.order:
                action = graph.actions[aid]
                if action.kind in own:
                    found = disruptions(action.kind, None, action.params)
                    assert all(in_scope(target.disruption_scope, d) for d in found), (aid, found)
        # every host is deployed by exactly one target
        claims = sorted(h for t in TARGETS for h in t.applies(ir))
        assert claims == sorted(ir.hosts), example
    assert deployed["hosts"] and deployed["kubernetes"]  # both examples exercise a target each


def test_the_registry_is_the_common_kinds_then_each_targets() -> None:
    from compiler.actions import COMMON
    from compiler.deploy import TARGETS
    from compiler.targets.registry import KINDS, REGISTRY

    names = [k.kind for k in REGISTRY]
    assert set(names) == KINDS_BEFORE_THE_MOVE | KINDS_SINCE and len(names) == len(set(names))
    assert names == [k.kind for k in COMMON] + [k.kind for t in TARGETS for k in KINDS[t.name]]
    owners = [k.kind for t in TARGETS for k in KINDS[t.name]]
    assert len(owners) == len(set(owners)) and not set(owners) & {k.kind for k in COMMON}


def test_the_lowering_order_of_the_kinds_changes_no_graph() -> None:
    """The registry's order is the lowering order; the graph orders actions by id and dependency, so
    reversing it changes no action, key or order (the targets' kinds moved after the common ones)."""
    from compiler.store.digests import DigestCache
    from compiler.graph.kinds import KindRegistry
    from compiler.lower import lower
    from compiler.targets.registry import REGISTRY

    for example in ("b200-mig-three-models", "k8s-two-pools"):
        graph = lower(_resolved(example), DigestCache(None))
        backwards = lower(_resolved(example), DigestCache(None), KindRegistry(reversed(list(REGISTRY))))
        assert len(graph.order) > 3
        assert (graph.order, graph.keys) == (backwards.order, backwards.keys), example
        assert {a: graph.actions[a].params_json for a in graph.order} == \
            {a: backwards.actions[a].params_json for a in backwards.order}

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


# --- facts computed once, as passes of the IR ---------------------------------------------------------
def test_the_facts_are_passes_and_only_their_pass_computes_them() -> None:
    """Where a disaggregated model's router runs and what each role needs are IR passes (routers,
    roles); the checks, the plan and the emitters read `ir.routers` and `ir.roles`, never the
    functions behind them."""
    import ast

    from compiler.ir import PASSES

    names = [p.__name__ for p in PASSES]
    assert names.index("placements_pass") < names.index("routers_pass") < names.index("capacity_pass") \
        < names.index("roles_pass")
    owners = {"router_host": "compiler/ir/disaggregated.py", "role_capacity": "compiler/ir/role_capacity.py"}
    found = []
    for path in sorted((ROOT / "compiler").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in owners and owners[name] != rel:
                    found.append(f"{rel}:{node.lineno} {name}")
    assert found == []
    ir = _resolved("disaggregated").resolved
    disaggregated = {n for n, m in ir.spec.models.items() if m.serving.disaggregated is not None}
    assert disaggregated and set(ir.routers) == set(ir.roles) == disaggregated
    assert all(r is None or r in ir.hosts for r in ir.routers.values())


def test_the_runtimes_outside_the_spec_choices_have_their_module_data_file_and_flag_table() -> None:
    """The disaggregated router on hosts (ROUTER), Dynamo's worker (WORKER) and its frontend
    (FRONTEND, the router on node pools) are runtimes too, one module and one data file each; the
    DGD's containers run exactly the argv they answer."""
    import pytest

    from compiler.runtimes import FRONTEND, REGISTRY, ROUTER, WORKER, ServingCommandError, Unit
    from compiler.runtimes.base import check_argv

    for rt in (ROUTER, WORKER, FRONTEND):
        module = rt.data_file.removesuffix(".json")
        assert rt.name not in REGISTRY and rt.data["name"] == rt.name
        assert (ROOT / "compiler" / "runtimes" / f"{module}.py").is_file()
    assert check_argv(ROUTER.data, ROUTER.command(Unit(model="m", target="llmapi", ports={"http": 8000}))) == []
    for role, kv in ((None, False), ("prefill", True), ("decode", False)):
        argv = WORKER.argv("m", role, kv)
        assert argv[:3] == ["python3", "-m", "dynamo.trtllm"] and check_argv(WORKER.data, argv) == []
        assert ("--publish-events-and-metrics" in argv) == kv
    assert check_argv(WORKER.data, ["python3", "-m", "dynamo.vllm"]) == ["python3 must run -m dynamo.trtllm, not "
                                                                        "-m dynamo.vllm"]
    assert check_argv(WORKER.data, [*WORKER.argv("m"), "--disaggregation-mode", "both"]) == [
        "--disaggregation-mode 'both' is not one of prefill, decode"]
    with pytest.raises(ServingCommandError, match="not one of prefill, decode"):
        WORKER.argv("m", "encode")
    assert FRONTEND.argv() == ["python3", "-m", "dynamo.frontend"] and FRONTEND.routing_args(None) == []
    routed = FRONTEND.argv(FRONTEND.routing_args(32))
    assert routed[3:] == ["--router-mode", "kv", "--kv-cache-block-size", "32"]
    assert check_argv(FRONTEND.data, [*routed, "--router-mode", "random"]) == [
        "--router-mode 'random' is not one of kv", "--router-mode is given twice"]


def test_the_graph_knows_no_targets_vocabulary() -> None:
    """The kinds of disruption and how a plan words them are the deploy targets' (each target's
    `disruptions`, compiler/targets/disruption.py); the graph that computes them names none."""
    from compiler.deploy import DISRUPTION_ORDER, TARGETS

    assert DISRUPTION_ORDER == {k: r for t in TARGETS for k, r in t.disruptions.items()}
    assert all(DISRUPTION_ORDER[k] == r for t in TARGETS for k, r in t.disruptions.items())  # one meaning each
    words = set(DISRUPTION_ORDER) | {"node pool", "node_pool", "kubernetes", "Kubernetes"}
    seams = _load("seams")
    found = [f"{path.relative_to(ROOT).as_posix()}:{line} {value[:40]!r}"
             for path in sorted((ROOT / "compiler" / "graph").rglob("*.py"))
             for line, value in seams.strings(path) if any(w in value for w in words)]  # docstrings included
    assert found == []
    # nor does it define or import the disruption record or its vocabulary (compiler/targets/disruption.py)
    vocabulary = {name for _, name in seams.names(TARGETS_DIR / "disruption.py", imports=False) if name[0] != "_"}
    assert {"Disruption", "POOL", "render_disruptions"} <= vocabulary
    defined = [f"{path.relative_to(ROOT).as_posix()}:{line} {name}"
               for path in sorted((ROOT / "compiler" / "graph").rglob("*.py"))
               for line, name in seams.names(path) if name in vocabulary]
    assert defined == []


def test_the_name_walk_sees_definitions_and_imports(tmp_path: Path) -> None:
    (tmp_path / "k.py").write_text("from x.y import A as B, C\nimport p.q\nPOOL = -1\n@dataclass\n"
                                   "class Disruption:\n    host: str\ndef f():\n    from z import D\n    a, b = 1, 2\n")
    seams = _load("seams")
    assert sorted(n for _, n in seams.names(tmp_path / "k.py")) == ["B", "C", "D", "Disruption", "POOL", "f", "q"]
    assert sorted(n for _, n in seams.names(tmp_path / "k.py", imports=False)) == ["Disruption", "POOL", "f"]


def test_a_workloads_fields_declare_what_their_change_does() -> None:
    """Every field of a Kubernetes workload's parameters (Deployment, DGD worker) declares its effect
    where it is defined; the fields that roll the pods are read from the declarations (the tuples
    they replace, in the order the plan lists them)."""
    import pytest

    from compiler.params import EFFECTS, Effect, effect, fields_that, undeclared
    from compiler.targets.kubernetes.k8s_deployment import ROLLS, DeploymentParams
    from compiler.targets.kubernetes.k8s_dgd import WORKER_ROLLS, DgdParams, Worker
    from compiler.targets.kubernetes.k8s_nodes import PoolLayer
    from compiler.deploy.kubernetes import TARGET

    declaring = (DeploymentParams, Worker, DgdParams, PoolLayer)
    assert [m.__name__ for m in declaring if undeclared(m)] == []
    shown = {k for m in declaring for f in m.model_fields for k in effect(m, f).shows_as}
    assert shown <= set(TARGET.disruptions)  # each a kind the Kubernetes target words
    # spec_name: the pod template's part-of label (review N6, S10)
    assert ROLLS == ("spec_name", "image_action", "weights_action", "command", "ports", "liveness", "readiness",
                     "resource", "count", "selector", "gpu_product", "pod_resources")
    # a DGD worker's surge/unavailable annotations are in the pod template Dynamo's worker hash covers
    # (catalog k8s_controllers.json rolling_update.hash_source); a Deployment's strategy is not
    assert WORKER_ROLLS == ("image_action", "weights_action", "resource", "count", "selector", "gpu_product",
                            "power_limit_w", "pod_resources", "max_surge", "max_unavailable")
    assert fields_that(DeploymentParams, "scale") == fields_that(Worker, "scale") == ("replicas",)
    assert effect(Worker, "options").what == "roll" and effect(DeploymentParams, "max_unavailable").what == "none"
    # the frontend's fields, the planner and the worker hash are named in the plan by their declarations
    from compiler.targets.kubernetes.k8s_dgd import _FRONTEND_FIELDS

    assert [effect(DgdParams, f).named for f in _FRONTEND_FIELDS] == ["router arguments", "image", "Dynamo"]
    assert effect(DgdParams, "workers").named.startswith("Dynamo's worker hash") and effect(DgdParams, "planner").named
    assert all(effect(m, f).what in EFFECTS and effect(m, f).why for m in (DeploymentParams, Worker, DgdParams)
               for f in m.model_fields)
    with pytest.raises(ValueError, match="unknown effect"):
        Effect("reboot")


def test_every_kinds_parameters_declare_what_their_change_does() -> None:
    """Every field of every registered kind's parameters declares its effect where it is defined: a
    build input's kind once for all its fields (BUILD_INPUT: what runs sees it only through what
    consumes it), the kinds that reach what runs field by field, each shown kind one a target words."""
    from compiler.deploy import BY_DEPLOY
    from compiler.params import BUILD_INPUT, effect, undeclared
    from compiler.targets.registry import REGISTRY, WORDING

    assert {k.kind: undeclared(k.Params) for k in REGISTRY if undeclared(k.Params)} == {}
    words = {w for t in BY_DEPLOY.values() for w in t.disruptions}
    shown = {s for k in REGISTRY for f in k.Params.model_fields for s in effect(k.Params, f).shows_as}
    assert shown <= words, shown - words
    inputs = sorted(k.kind for k in REGISTRY if k.Params.effect_of_fields is BUILD_INPUT)
    assert {"quantize", "engine", "llmapi-options", "triton-repo", "weights-image", "image-context"} <= set(inputs)
    reaching = {k.kind for k in REGISTRY} - set(inputs)  # each field its own, and what it shows as
    assert reaching == {"image", "host-plan", "host-script", "k8s-node-layer", "k8s-deployment", "k8s-dgd",
                        "k8s-release"}, reaching
    assert effect(REGISTRY["host-script"].Params, "units").shows_as == ("container-restart",)
    # a host unit's fields too: the causes its plan line names are read from them, in this order
    from compiler.targets.hosts.hostscript import CAUSES, HostUnit

    assert undeclared(HostUnit) == [] and CAUSES == ("model", "ports", "gpus", "mig_slot")
    # where no cause changed, the declared ranks name the echo: environment, then the server command,
    # then the role's options (params.changed_names; hostscript.disruptions holds no order of its own)
    from compiler.params import changed_names

    u = HostUnit.model_construct(id="h/prefill", model="m", ports={"http": 1}, gpus=[0], mig_slot=None,
                                 role="prefill", serving="argv", environment={"A": "1"}, inputs="x")
    assert changed_names(u, u) == []
    assert changed_names(u, u.model_copy(update={"inputs": "y"})) == ["the prefill role's options"]
    assert changed_names(u, u.model_copy(update={"inputs": "y", "environment": {}})) == ["environment"]
    assert changed_names(u, u.model_copy(update={"inputs": "y", "role": "decode"})) == ["server command"]
    assert changed_names(u, u.model_copy(update={"environment": {}, "ports": {"http": 2}, "gpus": [1]})) == \
        ["ports", "gpus"]
    # one entry words a change (targets/registry.py disruptions), for exactly the kinds that reach what runs;
    # the graph's ActionKind has no disruption hook
    assert set(WORDING) == reaching
    assert not hasattr(REGISTRY["k8s-dgd"], "disruptions") and not hasattr(REGISTRY["image"], "affects_hosts")
    assert effect(REGISTRY["k8s-release"].Params, "runtime").shows_as == ("recreate",)


def test_a_gpus_fields_declare_the_disruptions_the_host_plan_words() -> None:
    """GpuState's fields declare what their change may do to a GPU (the kinds of the host target);
    one function, changed_kinds, reads them from the fields that differ, and hostplan.disruptions
    words each where it changes anything."""
    from compiler.actions.gpustate import GpuState
    from compiler.params import changed_kinds, undeclared
    from compiler.deploy.hosts import TARGET

    assert undeclared(GpuState) == []
    declared = {k for f in GpuState.model_fields for k in GpuState.model_fields[f].metadata[0].shows_as}
    assert declared == set(TARGET.disruptions) - {"container-restart"}  # the image kind restarts containers
    gpu = GpuState(index=0, locked_clocks=None, application_clocks=None, power_limit_w=None, mig=None,
                   serves="chat", group=None)
    assert changed_kinds(gpu, gpu) == []
    assert changed_kinds(gpu, gpu.model_copy(update={"power_limit_w": 500})) == ["power"]
    assert changed_kinds(gpu, gpu.model_copy(update={"serves": "other", "power_limit_w": 500})) == \
        ["power", "serving-change"]
    assert changed_kinds(None, gpu) == ["serving-change"]  # a new GPU: only what it sets
