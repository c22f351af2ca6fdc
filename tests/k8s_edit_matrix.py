"""The generated edit matrix of issue 32: every spec field of examples/k8s-two-pools that reaches the
Kubernetes tree, changed one at a time and in pairs, on both runtimes (deployment, dynamo), Dynamo on
both of its operator's pathways (`grove`: kubernetes.dynamo.grove true; sim/grove.py).

Fields are not hand-picked: every scalar leaf of the spec gets one mutation by its type (an integer
doubled, else halved, else +1; a float times 0.9; a boolean flipped; a string with a suffix; a MIG
profile another of its GPU's, a `serves` another model), the first that validates, and an edit is
kept when a Kubernetes action's key changes (the field reaches the tree). tests/test_k8s_edit_matrix.py runs a seeded part; benchmarks/bench_k8s_edit_matrix.py all.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from compiler.diagnostics import Severity  # noqa: F401  (severity of the plan's diagnostics)
from compiler.gitops.semplan import change_simulations, host_disruptions
from tests.k8s_tree import graph_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "k8s-two-pools" / "kiln.yaml"
DYNAMO = (('tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.3.0rc29"'),
          ("  runtime: deployment\n", '  runtime: dynamo\n  dynamo: {version: "1.6.1"}\n'),
          ("image: {repository: registry.example.com/inference/fleet}",
           "image:\n  repository: registry.example.com/inference/fleet\n"
           "  base: nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1@sha256:" + "1" * 64))
GROVE = (('dynamo: {version: "1.6.1"}', 'dynamo: {version: "1.6.1", grove: true}'),)
RUNTIMES = ("deployment", "dynamo", "grove")
# the pathway itself: a change under running models is refused before any rollout (K850,
# gitops/planbase.py pathway_changed; tests/test_k8s_grove.py)
FIXED = (("kubernetes", "dynamo", "grove"),)


def base_text(runtime: str) -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    for old, new in (DYNAMO if runtime in ("dynamo", "grove") else ()) + (GROVE if runtime == "grove" else ()):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def leaves(doc, path=()):
    """(path, value) of every scalar leaf."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from leaves(v, path + (i,))
    else:
        yield path, doc


def candidates(value, path: tuple = (), doc: dict | None = None) -> list:
    """Values to try for a leaf, the first that validates is the edit. Named fields take their
    domain's other values: a MIG profile the host's GPU has (catalog), another model to serve."""
    if doc is not None and path and path[-1] == "profile" and path[0] == "hosts":
        from compiler.catalog import load_gpu_catalog

        gpu = load_gpu_catalog()[doc["hosts"][path[1]]["gpu"]]
        return [p for p in gpu.mig.profile_names if p != value]
    if doc is not None and path and path[-1] == "serves" and path[0] == "hosts":
        return [m for m in doc["models"] if m != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [v for v in (value * 2, value // 2, value + 1) if v != value and v > 0]
    if isinstance(value, float):
        return [round(value * 0.9, 4)]
    if isinstance(value, str):
        return [value + "x"]
    return []


def _set(doc, path, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


@dataclass(frozen=True)
class Edit:
    runtime: str
    changes: tuple  # ((path, value), ...)

    @property
    def name(self) -> str:
        return self.runtime + ":" + "+".join(".".join(map(str, p)) + "=" + str(v) for p, v in self.changes)

    def text(self) -> str:
        doc = yaml.safe_load(base_text(self.runtime))
        for path, value in self.changes:
            _set(doc, path, value)
        return yaml.safe_dump(doc, sort_keys=False)


def k8s_keys(graph) -> dict:
    return {a: k for a, k in graph.keys.items() if graph.actions[a].kind.startswith("k8s-")}


def single_edits(runtime: str, work: Path, sample: int | None = None, seed: int = 0) -> list[Edit]:
    """The edits of one field that validate and reach the tree (`sample`: that many leaves, seeded)."""
    from compiler.pipeline import validate_text

    doc = yaml.safe_load(base_text(runtime))
    base = k8s_keys(graph_of(EXAMPLE, work / "base", yaml.safe_dump(doc, sort_keys=False)))
    paths = [(p, v) for p, v in leaves(doc) if p[0] != "kiln" and p not in FIXED]
    if sample is not None:
        paths = random.Random(seed).sample(paths, min(sample, len(paths)))
    out = []
    for i, (path, value) in enumerate(paths):
        for new in candidates(value, path, doc):
            edit = Edit(runtime, ((path, new),))
            result = validate_text(edit.text(), EXAMPLE.parent, EXAMPLE.name)
            if not result.ok:
                continue
            if k8s_keys(graph_of(EXAMPLE, work / f"e{i}", edit.text())) != base:
                out.append(edit)
            break
    return out


def pairs(edits: list[Edit], count: int, seed: int = 0) -> list[Edit]:
    rng = random.Random(seed)
    all_pairs = [(a, b) for i, a in enumerate(edits) for b in edits[i + 1:] if a.changes[0][0] != b.changes[0][0]]
    chosen = rng.sample(all_pairs, min(count, len(all_pairs)))
    return [Edit(a.runtime, a.changes + b.changes) for a, b in chosen]


def assert_lines_agree(sim, disruptions: list, name: str) -> None:
    from compiler.targets.kubernetes.plan import pace
    from compiler.targets.kubernetes.sim.report import promise

    r = sim.result
    for d in disruptions:
        workload = d.detail.split(":", 1)[0]
        rolled = ("workload-roll", d.host, workload) in r.events
        if d.pool and d.kind == "rollout-settings":  # the plan says no pod is replaced: the controllers replaced none
            assert not rolled and "no pod replaced" in d.detail, (name, d.detail)
            continue
        if not d.pool or d.kind != "workload-roll" or d.detail.split(": ", 1)[1].startswith(("new,", "recreate")):
            continue
        # its promise ("at least X of N stay ready") is never above the simulated lowest of its model's pods
        # on its pool: where the simulation went lower, the line says the simulated figure instead
        low = r.pool_low.get(d.host, {}).get(r.models.get(workload.replace("/", "-")))
        said = re.search(r"; simulated: lowest (\d+) of ", d.detail)
        if promise(d.detail) is not None and low is not None:
            assert (int(said.group(1)) if said else promise(d.detail)[0]) <= low[0], (name, d.detail, low)
            assert said is None or int(said.group(1)) == low[0], (name, d.detail, low)
        paces = r.paces.get(workload.replace("/", "-"))
        if paces is None:  # a frontend or planner: no GPU, not a rollout the simulation runs
            continue
        assert rolled or not r.completed, (name, d.detail)  # a roll the plan names, the controllers did
        assert d.detail.split(": ", 1)[1].startswith(pace(*paces)), (name, d.detail, paces)
        stuck = r.stuck_on is not None and r.stuck_on[2] in (workload, workload.split("/", 1)[0])
        assert ("does NOT complete" in d.detail) == stuck, (name, d.detail)
    # ... and every roll the controllers did, the plan names (its own line, never a correction)
    named = {(d.host, d.detail.split(":", 1)[0]) for d in disruptions if d.pool and d.kind == "workload-roll"}
    assert all((e[1], e[2]) in named for e in r.events if e[0] == "workload-roll"), (name, sorted(r.events))


def locked_spec(text: str, where: Path) -> Path:
    """The example with `text` as its spec and the lock `kiln lock` writes for it beside it: the base
    revision as a team commits it (compiler/ir/lockfile.py), read by the base's and the edit's graphs
    alike (a Deployment's pod shape change paces by the lock's "pods", k8s_deployment.reshape_unavailable)."""
    from compiler.cli import main

    shutil.copytree(EXAMPLE.parent, where)
    spec = where / EXAMPLE.name
    spec.write_text(text, encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()):  # "wrote .../kiln.lock"
        assert main(["lock", str(spec)]) == 0
    return spec


def check(edit: Edit, work: Path) -> tuple[str, object]:
    """Run the edit's change through the simulator and assert issue 32's four properties; returns
    ("completes" | "refused K858" | "refused K859", the simulation)."""
    from compiler.pipeline import validate_text

    if not validate_text(edit.text(), EXAMPLE.parent, EXAMPLE.name).ok:
        return "invalid", None  # a pair of valid edits need not be valid together
    spec = locked_spec(base_text(edit.runtime), work / "spec")
    base = graph_of(spec, work / "a", base_text(edit.runtime))
    head = graph_of(spec, work / "b", edit.text())
    sims = change_simulations(base, head)
    assert len(sims) == 1, edit.name
    sim = sims[0]
    r = sim.result
    codes = [c for c, _, _ in sim.diagnostics()]
    # 1. no update the API server refuses (an immutable field: a tree's fault), no API call forbidden;
    #    one Dynamo's webhook refuses is refused by the plan (K858, with K855's recreate)
    assert "API server refuses" not in (r.stuck or "") and "forbidden" not in (r.stuck or ""), (edit.name, r.stuck)
    if "webhook refuses" in (r.stuck or ""):
        assert "K858" in codes
    #    and the node-tuning pods it starts are admitted and can do what their commands need (pod security)
    assert not r.tuning_failed, (edit.name, r.tuning_failed)
    # 2. the rollout completes, or the plan refuses the change (K858)
    assert r.completed or "K858" in codes, edit.name
    # 3. every model served before and after keeps a ready pod, or the plan says when and why not (K859)
    zero = [m for m in r.before if r.before[m] and r.desired.get(m) and min(
        [r.before[m]] + [s.ready.get(m, 0) for s in r.steps]) == 0]
    assert bool(zero) == ("K859" in codes), (edit.name, zero, codes)
    for m in zero:
        assert any(f"model {m!r} has no ready pod" in msg for _, msg, _ in sim.diagnostics())
    #    and each model keeps, on each pool, the floor its PodDisruptionBudgets declare there, or the plan
    #    says when and why not (K450; not beside K859): the lowest recomputed from the timeline
    below = sorted((p, m) for p, floors in r.floors.items() for m, floor in floors.items() if m not in zero
                   and 0 <= min([r.pool_before.get(p, {}).get(m, 0)]
                                + [s.by_pool.get(p, {}).get(m, 0) for s in r.steps]) < floor)
    said = sorted((msg.split("'")[3], msg.split("'")[1]) for c, msg, _ in sim.diagnostics() if c == "K450")
    assert below == said, (edit.name, below, said)
    # 4. the plan's text is the simulation: its figures recomputed from the timeline
    text = sim.text()
    for m, (lowest, _, _) in r.low.items():
        seen = min([r.before.get(m, 0)] + [s.ready.get(m, 0) for s in r.steps])
        assert lowest == seen, (edit.name, m)
        if r.before.get(m) and lowest < r.before[m]:
            assert f"{m}: {r.before[m]} -> {r.end.get(m, 0)} ready" in text and f"lowest {lowest} " in text
    assert all(step.text in text for step in r.steps)
    # ... and its lowest is the pods': the fewest Ready and not being deleted at any moment (the three
    # rollout paths alike: rolling.go, Dynamo's worker generations, Grove's PodClique)
    serving = serving_lows(base, head)
    assert {m: v[0] for m, v in r.low.items()} == serving, (edit.name, r.low, serving)
    # ... per node pool too: a pool's ready pods add up to the model's, its fewest are its timeline's,
    # and every pool says whether the object the change sticks on is in it
    for step in r.steps:
        assert all(sum(by.get(m, 0) for by in step.by_pool.values()) == n for m, n in step.ready.items())
    for pool, low in r.pool_low.items():
        for m, (lowest, _, _) in low.items():
            assert lowest == min([r.pool_before.get(pool, {}).get(m, 0)]
                                 + [s.by_pool.get(pool, {}).get(m, 0) for s in r.steps]), (edit.name, pool, m)
        for line in sim.pool_lines(pool):
            assert f"    {line}\n" in text + "\n", (edit.name, pool, line)
        if not r.completed and r.stuck_on is not None:
            assert any("(K858), in this pool" in x for x in sim.pool_lines(pool)) == (r.stuck_pool == pool)
    assert sorted(id(s) for _, steps in sim.sections() for s in steps) == sorted(id(s) for s in r.steps)
    # ... and so are its per-workload lines: each roll's pace is the controller's arithmetic on the
    # strategy the simulated workload rolled by, and the workload the change sticks on says so
    assert_lines_agree(sim, sim.annotate(host_disruptions(base, head)), edit.name)
    return ("completes" if r.completed and not codes else "refused " + ",".join(codes)), sim


# --- the lowest count, cross-checked against the pods themselves ----------------------------------------
# The engine's methods after which the pods may have changed: the controllers' syncs, Argo CD's applies
# and prunes, the re-layout Job's evictions and scale-downs (each in a step of its own or a settle).
_SAMPLED = ("_replicaset_step", "_schedule", "_kubelet", "_deployment_step", "_mig_step", "_apply",
            "_delete_deployment", "_say", "_run_job")


def serving_lows(base, head) -> dict:
    """model -> the fewest pods that are Ready and not being deleted behind its Service, sampled after
    every controller action of the simulation of base -> head (not from its steps). A generation
    (ReplicaSet, Dynamo worker generation, Grove PodClique hash) over its replicas deletes pods in its
    next sync, the not-ready ones first, and a pod being deleted is no ready endpoint (kubernetes
    endpointslice/utils.go podToEndpoint: ready = serving && !terminating): so it serves min(its Ready
    pods, its replicas)."""
    from compiler.targets.kubernetes.kinds import KINDS
    from compiler.targets.kubernetes.sim.engine import Simulation
    from compiler.targets.kubernetes.sim.fromgraph import pool_nodes, render_revision

    class Sampled(Simulation):
        def __init__(self, *args):
            super().__init__(*args)
            self.samples = [self._serving()]

        def _serving(self) -> dict:
            out = {}
            for model in {m for m, _ in self.services.values()}:
                sels = [sel for m, sel in self.services.values() if m == model]
                out[model] = sum(
                    min(sum(1 for p in self.pods if p.rs == rs.name and p.ready), rs.replicas)
                    for d in self.deploys.values() for rs in d.rss
                    if any(all(d.templates[rs.name].labels.get(k) == v for k, v in sel.items()) for sel in sels))
            return out

    def sampled(name):
        inner = getattr(Simulation, name)

        def call(self, *args, **kwargs):
            out = inner(self, *args, **kwargs)
            if hasattr(self, "samples"):
                self.samples.append(self._serving())
            return out
        return call

    for name in _SAMPLED:
        setattr(Sampled, name, sampled(name))
    sim = Sampled(render_revision(base, KINDS), render_revision(head, KINDS), pool_nodes(base, head))
    sim.run()
    return {m: min(s.get(m, 0) for s in sim.samples) for m in {m for s in sim.samples for m in s}}
