"""The build loop over a distributed engine: the local executor's contract (compiler/graph/executor.py:
results per action, dependents of a failure skipped, an Interrupt stops it), with each action run as
an engine job instead of a local thread.

For an action to run: its dependencies' artifacts and its input files are pushed to the registry
cache (by digest; what is there already is not sent again), the machine that holds it is chosen
among the engine's (compiler/machines.py: its preferred way, its software), and the job is
submitted with that way's resources. An action no machine holds is deferred with what it needs.
When a job ends, its artifact is imported from the registry, every blob verified, and its tree
must be the digest the worker reported before its record enters the local store. A job past its
deadline is cancelled and fails; an Interrupt cancels every submitted job.

A small action that needs no software capability (a specs snapshot, a host plan or script, a
capacity report: the small allowance, compiler/graph/sizes.py SMALL) runs on the driver itself,
as the local executor runs it: any machine holds it, and an engine job's round trip (push its
inputs, schedule, fetch and verify its output) costs far more than the action. Its tree is the
same wherever it runs, and so is the release. Each result says where it was built (`ran_on`) and
in which way (`way`: the one its node was chosen for, which the job tells the action to run in and
the local store's record keeps).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from compiler.graph.executor import ActionResult, Interrupt, run_here, way_said
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.store.local import LocalStore

from .engine import Engine
from .worker import JOB_VERSION

POLL_S = 0.5
DRIVER = "driver"  # ActionResult.ran_on of an action built by the driver itself


def on_driver(action) -> bool:
    """Whether the driver builds `action` itself: the small allowance and no software need."""
    from compiler.graph.sizes import SMALL

    return (action.size is None or action.size is SMALL) and not action.needs


def _job(graph: Graph, aid: str, results: dict, registry: str, store_dir: str | None) -> dict:
    action = graph.actions[aid]
    files = {role: (action.inputs[role], Path(path).stat().st_size, Path(path).name)
             for role, path in action.files.items()}
    return {"version": JOB_VERSION, "id": aid, "kind": action.kind, "kind_version": action.version,
            "key": graph.keys[aid], "params": action.params_json, "registry": registry, "store": store_dir,
            "deps": {d: (graph.actions[d].kind, graph.keys[d]) for d in action.deps}, "files": files}


def _share(graph: Graph, aid: str, results: dict, store: LocalStore, cache) -> None:
    """Push what the job reads: the artifacts of its dependencies and its input files, by digest."""
    from compiler.gitops.publish import push_artifact

    action = graph.actions[aid]
    for dep in action.deps:
        d = graph.actions[dep]
        push_artifact(cache.client, store, cache.repo, d.kind, d.version, graph.keys[dep], results[dep].tree)
    for role, path in action.files.items():
        p = Path(path)
        cache.client.push_blob(cache.repo, action.inputs[role], p.stat().st_size, p)


def execute_on(engine: Engine, graph: Graph, store: LocalStore, spec_name: str, kinds: KindRegistry, cache,
               registry: str, *, progress: Callable[[str], None] = lambda line: None,
               selected: set[str] | None = None, interrupt: Interrupt | None = None,
               deadline_s: float | None = None, worker_store: str | None = None) -> dict[str, ActionResult]:
    """Run the graph's actions on `engine`; `cache` (compiler/gitops/cache.py RemoteCache for
    `registry`) moves every input and output. Returns the results by action id."""
    from compiler.machines import software_lacking, way_rank
    from compiler.graph.sizes import SMALL

    interrupt = interrupt if interrupt is not None else Interrupt()
    machines = engine.machines()
    results: dict[str, ActionResult] = {}
    total = len(graph.order)
    pending = list(graph.order)
    running: dict = {}  # handle -> (aid, start, way)

    def done(aid: str, res: ActionResult, line: str) -> None:
        results[aid] = res
        progress(f"[{len(results)}/{total}] {line}")

    try:
        while pending or running:
            if interrupt.is_set():
                for handle, (aid, start, _) in running.items():
                    engine.cancel(handle)
                    done(aid, ActionResult(aid, graph.keys[aid], "interrupted", duration_s=time.monotonic() - start,
                                           error="its job was cancelled: the build was interrupted"), f"stopped {aid}")
                running.clear()
                for aid in pending:
                    done(aid, ActionResult(aid, graph.keys[aid], "interrupted",
                                           error="not started: the build was interrupted"), f"stopped {aid}")
                pending = []
                break
            for aid in list(pending):
                action, key = graph.actions[aid], graph.keys[aid]
                if any(results.get(d) is None for d in action.deps):
                    continue
                pending.remove(aid)
                bad = [d for d in action.deps if results[d].status in ("failed", "skipped", "interrupted")]
                if bad:
                    done(aid, ActionResult(aid, key, "skipped", error=f"{bad[0]} did not build"),
                         f"skip   {aid} ({bad[0]} did not build)")
                    continue
                waiting = [d for d in action.deps if results[d].status == "deferred"]
                record = store.get_action(key)
                fetched = record is None and (record := cache(graph, aid, spec_name)) is not None
                if record is not None:
                    done(aid, ActionResult(aid, key, "cached", record.tree, record.duration_s, fetched=fetched),
                         f"{'fetched' if fetched else 'cached'} {aid}")
                    continue
                why = (f"waits for {waiting[0]}" if waiting else
                       "not selected (--only/--skip)" if selected is not None and aid not in selected else None)
                if why is None and on_driver(action):
                    res = run_here(graph, kinds, aid, store, spec_name, results, progress, interrupt,
                                   (action.size or SMALL).ways[0])
                    res.ran_on = DRIVER
                    line = {"built": f"built  {aid} ({res.duration_s:.2f}s on the driver)",
                            "interrupted": f"stopped {aid} ({res.error})"}.get(res.status, f"FAILED {aid}: {res.error}")
                    done(aid, res, line)
                    continue
                choice = None
                if why is None:
                    choice = _choose(kinds, action, machines, way_rank)
                    if choice is None:
                        size = action.size or SMALL
                        lacks = "; ".join(f"{m.name}: {', '.join(software_lacking(kinds, action, m)) or 'too small'}"
                                          for m in machines) or "the cluster has no node"
                        why = (f"no node of the {engine.name} cluster holds it: it needs {size.text()}"
                               + (f" and {', '.join(action.needs)}" if action.needs else "") + f" ({lacks})")
                if why is not None:
                    done(aid, ActionResult(aid, key, "deferred", error=why), f"defer  {aid} ({why})")
                    continue
                machine, way = choice
                try:
                    _share(graph, aid, results, store, cache)
                    job = _job(graph, aid, results, registry, worker_store)
                    job["needs"] = required(kinds, action, machine)
                    job["way"] = way.to_json()  # the action runs in the way its node was chosen for
                    handle = engine.submit(job, way, f"kiln:{aid}", accelerator=accelerator_of(machine, way))
                except Exception as e:  # the registry or the engine refused: this action fails, the build goes on
                    done(aid, ActionResult(aid, key, "failed", error=f"could not submit it: {e}"),
                         f"FAILED {aid}: could not submit it: {e}")
                    continue
                running[handle] = (aid, time.monotonic(), way)
                progress(f"       submitted {aid} to {engine.name} ({way.text()})")
            if not running:
                continue
            for fin in engine.wait(list(running), POLL_S):
                aid, start, way = running.pop(fin.handle)
                _finish(graph, aid, fin, start, store, cache, spec_name, done, engine.name, way)
            if deadline_s is not None:
                now = time.monotonic()
                for handle, (aid, start, _) in list(running.items()):
                    if now - start > deadline_s:
                        engine.cancel(handle)
                        running.pop(handle)
                        error = f"cancelled at its deadline ({deadline_s:g} s)"
                        done(aid, ActionResult(aid, graph.keys[aid], "failed", duration_s=now - start, error=error),
                             f"FAILED {aid}: {error}")
    except KeyboardInterrupt:
        for handle in running:
            engine.cancel(handle)
        raise
    return results


def on_engine(engine: Engine, cache, *, deadline_s: float | None = None, worker_store: str | None = None):
    """The `engine` argument of compiler.build.build_spec that runs the actions on `engine`, moving
    everything through `cache` (a RemoteCache)."""
    def run(graph, store, spec_name, kinds, *, progress, selected, interrupt):
        return execute_on(engine, graph, store, spec_name, kinds, cache, str(cache.registry), progress=progress,
                          selected=selected, interrupt=interrupt, deadline_s=deadline_s, worker_store=worker_store)
    return run


def required(kinds, action, machine) -> list[str]:
    """The software capabilities of `machine` the action cannot do without there (an engine build
    needs tensorrt_llm or docker: whichever of them the chosen machine offers), so the engine runs
    it only on a machine that has them too."""
    from compiler.machines import SOFTWARE, software_lacking

    out = []
    for cap in SOFTWARE:
        if cap in machine.has and software_lacking(kinds, action, replace(machine, has=machine.has - {cap})):
            out.append(cap)
    return out


def accelerator_of(machine, way) -> str | None:
    """The GPU type a job asks for: the chosen machine's, wherever its way needs GPUs (an engine is
    built for their architecture; a calibration's share of the model fits their memory, which the
    engine does not count)."""
    return machine.gpu_name if way.gpus else None


def _choose(kinds, action, machines, way_rank):
    """(machine, way) for the action's most preferred way some machine holds (way_rank: the way
    compiler/graph/sizes.py holds chooses on each), or None."""
    from compiler.graph.sizes import SMALL

    best = None
    for m in machines:
        rank = way_rank(kinds, action, m)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, m)
    if best is None:
        return None
    return best[1], (action.size or SMALL).ways[best[0]]


def _finish(graph: Graph, aid: str, fin, start: float, store: LocalStore, cache, spec_name: str, done,
            engine_name: str, way) -> None:
    """A job's end: its artifact imported from the registry (verified blob by blob) and checked to be
    the tree the worker reported; its log kept in the store, its record saying the way it ran in."""
    key = graph.keys[aid]
    duration = round(time.monotonic() - start, 3)
    if fin.error is not None:
        done(aid, ActionResult(aid, key, "failed", duration_s=duration, error=fin.error.split("\n--- log tail")[0]),
             f"FAILED {aid}: {fin.error.splitlines()[0] if fin.error else ''}")
        _keep_log(store, key, fin.error)
        return
    result = fin.result or {}
    record = cache(graph, aid, spec_name)
    if record is None or record.tree != result.get("tree"):
        error = (f"its artifact is not in the cache after the job reported {result.get('tree')}" if record is None else
                 f"the cache holds tree {record.tree}, the job reported {result.get('tree')}")
        done(aid, ActionResult(aid, key, "failed", duration_s=duration, error=error), f"FAILED {aid}: {error}")
        return
    _keep_log(store, key, result.get("log") or "")
    store.put_action(replace(record, way=way.to_json()))  # imported as fetched; it was built here, in `way`
    res = ActionResult(aid, key, "built", record.tree, result.get("duration_s", duration),
                       ran_on=f"{engine_name} node {result.get('node', '?')}", way=way)
    done(aid, res, f"built  {aid} ({res.duration_s:.2f}s on {result.get('node', '?')}{way_said(graph, res)})")


def _keep_log(store: LocalStore, key: str, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".log", delete=False) as f:
        f.write(text)
    try:
        store.write_log(key, Path(f.name))
    except Exception:  # a log is a convenience; the result is what the user is told about
        pass
    finally:
        Path(f.name).unlink(missing_ok=True)
