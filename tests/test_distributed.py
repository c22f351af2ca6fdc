"""Builds through a real Ray cluster (compiler/distributed/): a head and two worker nodes on this
machine, one with `torch` and one without, and the session's real registry as the cache every
input and output moves through."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from compiler.build import build_spec
from compiler.gitops.cache import remote_for
from compiler.graph.builder import Builder
from compiler.store.local import LocalStore
from tests.quickstart import on_engine_target, one_batch, only_tiny
from tests.ray_cluster import RayCluster, ray_available

ROOT = Path(__file__).resolve().parents[1]
QUANTIZE_TASK = "ray::kiln:quantize/tiny"  # the process title of the worker running the task

pytestmark = pytest.mark.skipif(not ray_available(), reason="Ray is not installed (the distributed extra)")


@pytest.fixture(scope="module")
def cluster():
    c = RayCluster([{"torch": 1}, {"docker": 1}])
    yield c
    c.stop()


def _spec(tmp_path: Path, edit) -> Path:
    shutil.copytree(ROOT / "examples" / "quickstart", tmp_path / "spec", ignore=shutil.ignore_patterns(".kiln"))
    spec = tmp_path / "spec" / "kiln.yaml"
    text = one_batch(only_tiny(spec.read_text(encoding="utf-8")))
    # no quality gate: its two evaluations would double the quantization's time, and prove nothing here
    text = text.replace("\n      quality_gate: {eval: data/eval-prose.jsonl, metric: perplexity, max_regression_pct: 5.0}",
                        "")
    spec.write_text(edit(text), encoding="utf-8")
    return spec


def _through_ray(spec: Path, store: LocalStore, cluster: RayCluster, registry, lines: list):
    from compiler.distributed.driver import on_engine
    from compiler.distributed.connect import connect

    engine = connect(f"ray://{cluster.address}")
    try:
        cache = remote_for(registry.host, store)
        return build_spec(spec, store, remote=cache, engine=on_engine(engine, cache), progress=lines.append)
    finally:
        engine.close()


def test_the_quickstart_through_ray_survives_a_killed_worker_and_matches_a_local_build(
        tmp_path: Path, cluster: RayCluster, registry) -> None:
    spec = _spec(tmp_path, lambda text: text)
    local = build_spec(spec, LocalStore(tmp_path / "local"), builder=Builder(fixed=frozenset({"torch"})))
    assert local.complete and local.manifest_digest is not None

    # Kill the worker that runs quantize/tiny once, while it runs; Ray starts it again in a new worker.
    seen: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set():
            for pid in [p for p, title in cluster.workers().items() if title == QUANTIZE_TASK]:
                if pid not in seen:
                    seen.append(pid)
                    if len(seen) == 1:
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    watcher = threading.Thread(target=killer, daemon=True)
    watcher.start()
    lines: list[str] = []
    try:
        remote = _through_ray(spec, LocalStore(tmp_path / "ray"), cluster, registry, lines)
    finally:
        stop.set()
        watcher.join()
    assert remote.complete, [(r.id, r.status, r.error) for r in remote.results.values()]
    assert len(seen) >= 2, lines  # killed in its first worker, finished in another
    assert remote.manifest_digest == local.manifest_digest  # the same release as a one-machine build
    built = {r.id for r in remote.results.values() if r.status == "built"}
    assert "quantize/tiny" in built and len(built) == len(remote.results)
    # the small actions ran on the driver (no Ray round trip), the heavy ones on the cluster
    from compiler.distributed.driver import DRIVER, on_driver

    ran = {r.id: r.ran_on for r in remote.results.values()}
    small = {aid for aid in ran if on_driver(remote.graph.actions[aid])}
    assert small and {ran[aid] for aid in small} == {DRIVER}, ran
    assert all(ran[aid].startswith("ray node ") for aid in set(ran) - small), ran
    assert ran["quantize/tiny"].startswith("ray node "), ran
    # what came back was imported whole: the local store verifies every tree of the release
    store = LocalStore(tmp_path / "ray")
    for r in remote.results.values():
        assert store.tree(r.tree)
    # the job ran in the way its node was chosen for (no node has a GPU: the CPU way), which the local
    # store's record and the action's log (the worker's and the action's own lines) say
    q = remote.results["quantize/tiny"]
    assert q.way == next(w for w in remote.graph.actions["quantize/tiny"].size.ways if not w.gpus)
    assert store.get_action(q.key).way == q.way.to_json()
    log = store.log_path(q.key).read_text(encoding="utf-8")
    assert "way on the CPU (no GPU, " in log and "placed to run on the CPU: calibrating on the CPU" in log
    assert any(line.endswith(", on the CPU)") and "built  quantize/tiny" in line for line in lines), lines


def test_an_action_no_node_holds_is_deferred_with_what_it_needs(tmp_path: Path, cluster: RayCluster,
                                                                registry, capsys) -> None:
    from compiler.cli import main

    spec = _spec(tmp_path, on_engine_target)  # engine/tiny: one Hopper GPU, which no node has
    store = tmp_path / "ray"
    assert main(["build", str(spec), "--store", str(store), "--executor", f"ray://{cluster.address}",
                 "--cache", registry.host, "--allow-partial"]) == 0
    out = capsys.readouterr()
    deferred = [line for line in out.err.splitlines() if line.startswith("deferred: engine/tiny: ")]
    assert len(deferred) == 1, out.err
    assert deferred[0].startswith("deferred: engine/tiny: no node of the ray cluster holds it: it needs 1 x Hopper "
                                  "GPU >= ")
    assert "and gpu" in deferred[0] and "ray node" in deferred[0]
    assert "release sha256:" in out.out  # an incomplete release, saying what it waits for
    # what the nodes hold still builds there (or comes from the cache, which another test filled)
    record = LocalStore(store).get_action(_key(spec, store, "calibration-set/tiny"))
    assert record is not None


def _key(spec: Path, store: Path, aid: str) -> str:
    from compiler.build import plan_spec

    plan = plan_spec(spec, LocalStore(store))
    return plan.graph.keys[aid]


def test_a_wedged_action_is_cancelled_at_its_deadline_and_leaves_nothing_half_written(
        tmp_path: Path, cluster: RayCluster, registry) -> None:
    from compiler.distributed.connect import connect
    from compiler.distributed.driver import on_engine
    from compiler.gitops import artifacts as oa

    # seed 8, not the quickstart's 7: a key no other test built, so the cache cannot answer for it
    spec = _spec(tmp_path, lambda text: text.replace("seed: 7", "seed: 8"))
    store = LocalStore(tmp_path / "ray")
    cache = remote_for(registry.host, store)
    engine = connect(f"ray://{cluster.address}")
    try:  # importing torch alone takes longer than 2 s: the quantization is still running then
        out = build_spec(spec, store, remote=cache, engine=on_engine(engine, cache, deadline_s=2.0))
    finally:
        engine.close()
    quantize = out.results["quantize/tiny"]
    assert quantize.status == "failed" and quantize.error == "cancelled at its deadline (2 s)"
    assert out.manifest_digest is None  # a failed build records no release
    assert store.get_action(quantize.key) is None  # nothing of it entered the local store
    assert cache.client.manifest_digest(cache.repo, oa.artifact_tag("quantize", quantize.key)) is None


def test_an_interrupt_cancels_the_submitted_tasks(tmp_path: Path, cluster: RayCluster, registry) -> None:
    from compiler.distributed.connect import connect
    from compiler.distributed.driver import on_engine
    from compiler.graph.executor import Interrupt

    spec = _spec(tmp_path, lambda text: text.replace("seed: 7", "seed: 9"))  # a key no other test built
    store = LocalStore(tmp_path / "ray")
    cache = remote_for(registry.host, store)
    interrupt = Interrupt()

    def progress(line: str) -> None:  # Ctrl-C as the CLI delivers it, once quantize/tiny is submitted
        if line.strip().startswith("submitted quantize/tiny"):
            interrupt.stop()

    engine = connect(f"ray://{cluster.address}")
    try:
        out = build_spec(spec, store, remote=cache, engine=on_engine(engine, cache), progress=progress,
                         interrupt=interrupt)
    finally:
        engine.close()
    assert out.interrupted and out.manifest_digest is None
    quantize = out.results["quantize/tiny"]
    assert quantize.status == "interrupted" and "cancelled" in quantize.error
    assert store.get_action(quantize.key) is None
    deadline = time.monotonic() + 60  # the cancelled task's worker is killed (Ray's forced cancel)
    while time.monotonic() < deadline and QUANTIZE_TASK in cluster.workers().values():
        time.sleep(0.5)
    assert QUANTIZE_TASK not in cluster.workers().values()


@pytest.mark.parametrize("argv, error", [
    (["--executor", "ray://127.0.0.1:1"], "--executor needs --cache REGISTRY"),
    (["--executor", "slurm://head:1", "--cache", "127.0.0.1:1"], "no engine 'slurm' (Kiln runs on: ray)"),
    (["--action-deadline", "5"], "--action-deadline goes with --executor"),
    (["--executor", "ray://127.0.0.1:1", "--cache", "127.0.0.1:1", "--action-deadline", "0"],
     "--action-deadline must be a positive number of seconds"),
])
def test_executor_options_that_cannot_work_are_usage_errors(tmp_path: Path, capsys, argv, error) -> None:
    from compiler.cli import main

    spec = _spec(tmp_path, lambda text: text)
    assert main(["build", str(spec), "--store", str(tmp_path / "s"), *argv]) == 2
    out = capsys.readouterr()
    assert error in out.err and "release" not in out.out  # refused before anything was built
