"""The scheduler, on stub action kinds: the executor and planner know kinds only through the
registry they are given, so these tests need no model, template or tool."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from compiler.graph.builder import Builder
from compiler.graph.executor import execute
from compiler.graph.kinds import ActionKind, KindRegistry, Params, RunContext
from compiler.graph.model import Graph
from compiler.graph.plan import make_plan
from compiler.store.local import LocalStore


class StepParams(Params):
    name: str
    seconds: float = 0.0
    fail: bool = False


class Step(ActionKind[StepParams]):
    """Writes its name and its dependencies' outputs; records when it ran."""

    kind, version, Params = "step", 1, StepParams

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.ways: dict = {}  # name -> the way it was told to run in (RunContext.way)

    def run(self, params: StepParams, ctx: RunContext) -> None:
        self.ways[params.name] = ctx.way
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        start = time.monotonic()
        try:
            time.sleep(params.seconds)
            if params.fail:
                raise RuntimeError(f"{params.name} was told to fail")
            upstream = "".join(sorted((d / "out.txt").read_text() for d in ctx.deps.values()))
            (ctx.out / "out.txt").write_text(upstream + params.name)
        finally:
            with self.lock:
                self.running -= 1
            self.spans[params.name] = (start, time.monotonic())


class GpuStep(Step):
    kind = "gpu-step"


def graph(step: Step, *specs: tuple[str, tuple[str, ...], dict]) -> Graph:
    actions = []
    for name, deps, opts in specs:
        kind = opts.pop("kind", step)
        actions.append(kind.action(name, StepParams(name=name, **opts), deps=deps,
                                   needs=("gpu",) if kind.kind == "gpu-step" else ()))
    return Graph.build(actions)


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def test_independent_actions_run_together_and_dependents_after(store: LocalStore) -> None:
    step = Step()
    g = graph(step, ("a", (), {"seconds": 0.4}), ("b", (), {"seconds": 0.4}), ("c", ("a", "b"), {}))
    results = execute(g, store, "spec", KindRegistry([step]), jobs=2)
    assert {r.status for r in results.values()} == {"built"}
    assert step.most_at_once == 2  # a and b overlapped
    assert step.spans["c"][0] >= max(step.spans["a"][1], step.spans["b"][1])
    out = {e.path: store.read_bytes(e.digest) for e in store.tree(results["c"].tree)}
    assert out == {"out.txt": b"abc"}  # c saw both dependencies' outputs


def test_one_job_runs_one_at_a_time(store: LocalStore) -> None:
    step = Step()
    g = graph(step, ("a", (), {"seconds": 0.1}), ("b", (), {"seconds": 0.1}))
    execute(g, store, "spec", KindRegistry([step]), jobs=1)
    assert step.most_at_once == 1


def test_a_failure_skips_its_dependents_and_builds_the_rest(store: LocalStore) -> None:
    step = Step()
    g = graph(step, ("bad", (), {"fail": True}), ("after-bad", ("bad",), {}), ("fine", (), {}))
    results = execute(g, store, "spec", KindRegistry([step]))
    assert results["bad"].status == "failed" and "was told to fail" in results["bad"].error
    assert results["after-bad"].status == "skipped" and "bad did not build" in results["after-bad"].error
    assert results["fine"].status == "built"
    assert store.get_action(g.keys["bad"]) is None  # a failure records nothing


def test_missing_needs_defer_the_action_and_what_waits_for_it(store: LocalStore) -> None:
    step, gpu = Step(), GpuStep()
    kinds = KindRegistry([step, gpu])
    g = graph(step, ("quantize", (), {"kind": gpu}), ("gate", ("quantize",), {}), ("other", (), {}))
    plan = {p.id: p for p in make_plan(g, store, "spec", kinds, Builder(fixed=frozenset()))}
    assert plan["quantize"].deferred == "needs a GPU builder (a CUDA device)"
    assert plan["gate"].deferred == "waits for quantize" and plan["other"].deferred is None
    results = execute(g, store, "spec", kinds, builder=Builder(fixed=frozenset()))
    assert {a: r.status for a, r in results.items()} == {"quantize": "deferred", "gate": "deferred",
                                                          "other": "built"}
    # a builder with a GPU completes it from the same store, reusing what is there
    results = execute(g, store, "spec", kinds, builder=Builder(fixed=frozenset({"gpu"})))
    assert {a: r.status for a, r in results.items()} == {"quantize": "built", "gate": "built", "other": "cached"}


def test_an_action_runs_in_the_way_its_builder_holds_and_its_record_and_log_say_which(tmp_path: Path) -> None:
    """The executor decides the way where it places the action (the builder's machine: probed, or a
    declared class) and hands it to the run; the way is not in the key (the same tree, the same key)."""
    from dataclasses import replace

    from compiler.graph.sizes import Machine, Size, Way

    gpu, cpu = Way(gpus=1, gpu_mem_gib=40.0, host_mem_gib=4.0), Way(gpus=0, host_mem_gib=16.0)
    seen, trees = {}, {}
    for box in (Machine("cpu box", host_mem_gib=32, disk_gib=10),
                Machine("gpu box", gpus=1, gpu_mem_gib=80, host_mem_gib=32, disk_gib=10), None):
        step = Step()
        g = graph(step, ("calibrate", (), {}), ("small", (), {}))
        g = Graph.build([replace(g.actions["calibrate"], size=Size((gpu, cpu))), g.actions["small"]])
        store = LocalStore(tmp_path / (box.name.replace(" ", "-") if box else "unplaced"))
        lines: list[str] = []
        results = execute(g, store, "spec", KindRegistry([step]), builder=Builder(fixed=frozenset(), machine=box),
                          progress=lines.append)
        name = box.name if box else None
        seen[name] = step.ways["calibrate"]
        trees[name] = (g.keys["calibrate"], results["calibrate"].tree)
        record = store.get_action(g.keys["calibrate"])
        assert results["calibrate"].way == seen[name]
        assert record.way == (seen[name].to_json() if box else None)
        log = store.log_path(g.keys["calibrate"]).read_text(encoding="utf-8")
        built = next(line for line in lines if "built  calibrate" in line)
        if box:
            assert f"way {seen[name].short()} ({seen[name].text()})" in log
            assert built.endswith(f"s, {seen[name].short()})"), built
        else:
            assert "way " not in log and built.endswith("s)"), built
        assert next(line for line in lines if "built  small" in line).endswith("s)")  # one way: nothing said
    assert seen == {"cpu box": cpu, "gpu box": gpu, None: None}
    assert len(set(trees.values())) == 1  # one key, one artifact, whichever way made it


def test_a_second_run_executes_nothing_and_the_plan_says_why_a_key_moved(store: LocalStore) -> None:
    step = Step()
    kinds = KindRegistry([step])
    first = graph(step, ("a", (), {}), ("b", ("a",), {}))
    execute(first, store, "spec", kinds)
    assert {r.status for r in execute(first, store, "spec", kinds).values()} == {"cached"}
    edited = graph(step, ("a", (), {"seconds": 0.01}), ("b", ("a",), {}))
    plan = {p.id: p for p in make_plan(edited, store, "spec", kinds)}
    assert plan["a"].reasons == ["step parameter seconds: 0.0 -> 0.01"]  # no spec to name it by
    assert plan["b"].reasons == ["step parameter seconds: 0.0 -> 0.01 (via a)"]


def test_an_unknown_kind_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no action kind 'step' is registered"):
        KindRegistry([])["step"]
    with pytest.raises(ValueError, match="registered twice"):
        KindRegistry([Step(), Step()])


def test_params_of_another_kind_are_refused() -> None:
    class OtherParams(Params):
        x: int

    with pytest.raises(TypeError, match="params must be StepParams"):
        Step().action("a", OtherParams(x=1))


def test_every_registered_kind_lowers_and_runs() -> None:
    """The base class only names `lower` and `run`; a kind of the build's registry that did not
    override both would fail in the middle of a build instead of here."""
    from compiler.targets.registry import REGISTRY

    kinds = list(REGISTRY)
    assert len(kinds) >= 15
    for kind in kinds:
        for hook in ("lower", "run"):
            assert getattr(type(kind), hook) is not getattr(ActionKind, hook), f"{kind.kind} does not override {hook}"


def test_every_registered_kind_overrides_lower_and_run() -> None:
    """ActionKind's lower and run only name the hooks (they raise NotImplementedError): a registered
    kind that kept either would validate a spec and then fail its build."""
    from compiler.graph.kinds import ActionKind
    from compiler.targets.registry import REGISTRY

    kinds = list(REGISTRY._kinds.values())
    assert len(kinds) >= 20
    assert [k.kind for k in kinds if type(k).lower is ActionKind.lower or type(k).run is ActionKind.run] == []
