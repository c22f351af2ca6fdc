"""Runs the actions that are not cached, in dependency order, independent ones in parallel.

Only this module (and the actions it calls) touches the outside world. A failed action leaves no
output in the store, its dependents are skipped, and its log stays in the store's logs/.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compiler.store.local import ActionRecord, LocalStore, StoreError

from .builder import Builder, describe
from .kinds import KindRegistry, RunContext
from .model import Graph

Progress = Callable[[str], None]
TICK_S = 15.0  # how often a long action reports that it is still running


@dataclass
class ActionResult:
    id: str
    key: str
    status: str  # "cached", "built", "failed", "skipped" (a dependency failed), "deferred" (see builder.py)
    tree: str | None = None
    duration_s: float = 0.0
    log: Path | None = None
    error: str | None = None
    fetched: bool = False  # "cached" from the registry cache (`--cache`), not from the local store


class InputChanged(Exception):
    """An input file changed between planning and running."""


def execute(graph: Graph, store: LocalStore, spec_name: str, kinds: KindRegistry, *, jobs: int = 2,
            progress: Progress = lambda line: None, digest_of: Callable[[Path], str] | None = None,
            builder: Builder | None = None, selected: set[str] | None = None,
            remote: Callable[[Graph, str, str], ActionRecord | None] | None = None) -> dict[str, ActionResult]:
    """Run the graph. Actions outside `selected` (default: all) and actions whose needs `builder`
    lacks are deferred unless the store already holds them; so are their dependents. `remote`
    (compiler/gitops/cache.py): on a store miss, may import the action's output from a registry
    cache and return its record; the action then counts as cached."""
    builder = builder if builder is not None else Builder()
    results: dict[str, ActionResult] = {}
    total = len(graph.order)
    with store.lock(exclusive=False), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending = list(graph.order)
        running: dict[Future, str] = {}
        stop = threading.Event()
        try:
            while pending or running:
                for aid in list(pending):
                    deps = graph.actions[aid].deps
                    if any(results.get(d) is None for d in deps):
                        continue  # a dependency is still running or waiting
                    pending.remove(aid)
                    key = graph.keys[aid]
                    bad = [d for d in deps if results[d].status in ("failed", "skipped")]
                    if bad:
                        results[aid] = ActionResult(aid, key, "skipped", error=f"{bad[0]} did not build")
                        progress(f"[{len(results)}/{total}] skip   {aid} ({bad[0]} did not build)")
                        continue
                    waiting = [d for d in deps if results[d].status == "deferred"]
                    record = store.get_action(key)
                    fetched = False
                    if record is None and remote is not None:  # a registry cache (compiler/gitops/cache.py)
                        record = remote(graph, aid, spec_name)
                        fetched = record is not None
                    if record is not None:
                        results[aid] = ActionResult(aid, key, "cached", record.tree, record.duration_s,
                                                    fetched=fetched)
                        progress(f"[{len(results)}/{total}] {'fetched' if fetched else 'cached'} {aid}")
                        continue
                    why = (f"waits for {waiting[0]}" if waiting else
                           "not selected (--only/--skip)" if selected is not None and aid not in selected else
                           _lacking(kinds, builder, graph.actions[aid]))
                    if why:
                        results[aid] = ActionResult(aid, key, "deferred", error=why)
                        progress(f"[{len(results)}/{total}] defer  {aid} ({why})")
                        continue
                    running[pool.submit(_run_one, graph, kinds, aid, store, spec_name, results, stop, progress,
                                        digest_of)] = aid
                if not running:
                    continue
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    aid = running.pop(fut)
                    res = fut.result()
                    results[aid] = res
                    if res.status == "built":
                        progress(f"[{len(results)}/{total}] built  {aid} ({res.duration_s:.2f}s)")
                    else:
                        progress(f"[{len(results)}/{total}] FAILED {aid}: {res.error} (log: {res.log})")
        except KeyboardInterrupt:
            stop.set()
            for fut in running:
                fut.cancel()
            raise
    return results


def _lacking(kinds: KindRegistry, builder: Builder, action) -> str | None:
    missing = kinds.missing(action, builder)
    return f"needs {describe(missing, builder)}" if missing else None


def _run_one(graph: Graph, kinds: KindRegistry, aid: str, store: LocalStore, spec_name: str, results: dict,
             stop: threading.Event, progress: Progress, digest_of) -> ActionResult:
    action = graph.actions[aid]
    key = graph.keys[aid]
    kind = kinds[action.kind]
    log_path = store.log_path(key)
    logger = logging.getLogger(f"kiln.action.{aid}.{key[7:19]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    start = time.monotonic()
    done = threading.Event()
    ticker = threading.Thread(target=_tick, args=(aid, start, done, stop, progress), daemon=True)
    with store.workdir() as work:
        handler = logging.FileHandler(work / "action.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        try:
            logger.info("action %s\nkind %s v%d\nkey %s", aid, action.kind, action.version, key)
            files = {}
            for role, path in action.files.items():
                p = Path(path)
                if digest_of is not None and digest_of(p) != action.inputs.get(role):
                    raise InputChanged(f"{p.name} changed after the plan was made; run the build again")
                files[role] = p
            deps = {}
            for dep in action.deps:
                target = work / "deps" / dep.replace("/", "__")
                store.materialize(results[dep].tree, target)
                deps[dep] = target
            out = work / "out"
            out.mkdir()
            ticker.start()
            kind.run(action.params, RunContext(out, files, deps, logger))
            tree = store.put_tree(out)
            duration = round(time.monotonic() - start, 3)
            logger.info("done in %.3fs, tree %s", duration, tree)
            handler.close()
            log_digest = store.put_file(work / "action.log")
            store.write_log(key, work / "action.log")  # before the record: a failure here leaves no record
            store.put_action(ActionRecord(key, action.kind, aid, tree, duration, log_digest))
            store.set_ref(spec_name, aid, key, action.record(graph.keys))
            return ActionResult(aid, key, "built", tree, duration, log_path)
        except Exception as e:  # an action's failure is reported, never raised past the build
            logger.exception("failed: %s", e)
            handler.close()
            error = f"{type(e).__name__}: {e}"
            try:
                store.write_log(key, work / "action.log")
            except StoreError as log_error:  # a full disk must not hide the action's own error
                error += f" (and its log was not kept: {log_error})"
            return ActionResult(aid, key, "failed", None, round(time.monotonic() - start, 3), log_path, error)
        finally:
            done.set()
            logger.removeHandler(handler)


def _tick(aid: str, start: float, done: threading.Event, stop: threading.Event, progress: Progress) -> None:
    while not done.wait(TICK_S):
        if stop.is_set():
            return
        progress(f"       still running {aid} ({time.monotonic() - start:.0f}s)")
