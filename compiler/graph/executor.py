"""Runs the actions that are not cached, in dependency order, independent ones in parallel.

Only this module (and the actions it calls) touches the outside world. A failed action leaves no
output in the store, its dependents are skipped, and its log stays in the store's logs/.

Actions run in threads, except those of isolated kinds (ActionKind.isolated: quantization, engine
builds), which run in a child process of their own (compiler/graph/child.py, forked by
compiler/graph/zygote.py). An `Interrupt` stops a build: nothing starts after it, isolated actions'
processes are killed at once, the others are left to finish their step (a thread cannot be
stopped), and their results are recorded as usual, so the store stays consistent; what was stopped
or never started is "interrupted".
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from compiler.store.local import ActionRecord, LocalStore, StoreError

from .builder import Builder, describe
from .kinds import ActionKind, KindRegistry, RunContext
from .model import Graph
from .sizes import SMALL, Way
from .progress import estimate, phase_line, running_line
from .zygote import Forked, Zygote, ZygoteGone, zygote_for

Progress = Callable[[str], None]
TICK_S = 15.0  # how often a long action reports that it is still running
INDENT = "       "


@dataclass
class ActionResult:
    id: str
    key: str
    status: str  # "cached", "built", "failed", "skipped" (a dependency failed), "deferred" (see builder.py),
    #              "interrupted" (stopped, or not started, by an Interrupt)
    tree: str | None = None
    duration_s: float = 0.0
    log: Path | None = None
    error: str | None = None
    fetched: bool = False  # "cached" from the registry cache (`--cache`), not from the local store
    ran_on: str | None = None  # a distributed build's: where it was built (compiler/distributed/driver.py)
    way: Way | None = None  # the way it ran in, as its placement chose it (RunContext.way)


class InputChanged(Exception):
    """An input file changed between planning and running."""


class ChildFailed(Exception):
    """An isolated action's process reported a failure, or ended without reporting an outcome."""


class Stopped(Exception):
    """An isolated action's process was killed by an Interrupt."""


@dataclass
class Running:
    """An action under way: what an interrupt stops and the progress lines describe."""

    aid: str
    start: float
    estimate: Callable[[], tuple[float | None, str]]  # progress.estimate for this action
    isolated: bool
    phase: str | None = None
    proc: Forked | None = None  # an isolated action's process, once started
    zygote: Zygote | None = None  # what forks it (compiler/graph/zygote.py)
    _expected: tuple[float | None, str] | None = field(default=None, init=False, repr=False)

    def expected(self) -> tuple[float | None, str]:
        """(seconds, what they come from), looked up when a progress line first needs them: most
        actions end before their first one, and for an action new to the store the lookup reads
        the records of every action of its kind (a fleet's first build did that for each action)."""
        if self._expected is None:
            self._expected = self.estimate()
        return self._expected

    def kill(self) -> None:
        proc, zygote = self.proc, self.zygote
        if proc is not None:
            proc.kill()  # the whole process group: the tools the action started die with it
        elif zygote is not None:  # still importing what the action needs: it has no process yet
            zygote.kill()


class Interrupt:
    """Stops a build (the CLI calls `stop` on the first SIGINT or SIGTERM). Safe to call from a
    signal handler: it takes no lock the interrupted thread could hold."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.running: dict[str, Running] = {}
        self.active = False  # an executor is running the build (the CLI raises KeyboardInterrupt otherwise)
        # the action whose registry cache fetch the executor's own thread is in (the signal handler
        # raises KeyboardInterrupt into it: a transfer stops where it is, not at the cache's budget)
        self.fetching: str | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    def stop(self) -> tuple[list[str], list[str]]:
        """Stop the build: (ids of actions whose processes are killed, ids left to finish their step)."""
        self._event.set()
        killed, left = [], []
        for r in dict(self.running).values():  # a copy made without running Python code: no lock
            if r.isolated:
                r.kill()
                killed.append(r.aid)
            else:
                left.append(r.aid)
        return sorted(killed), sorted(left)

    def kill_all(self) -> None:
        for r in dict(self.running).values():
            r.kill()


def execute(graph: Graph, store: LocalStore, spec_name: str, kinds: KindRegistry, *, jobs: int = 2,
            progress: Progress = lambda line: None, digest_of: Callable[[Path], str] | None = None,
            builder: Builder | None = None, selected: set[str] | None = None,
            remote: Callable[[Graph, str, str], ActionRecord | None] | None = None,
            interrupt: Interrupt | None = None) -> dict[str, ActionResult]:
    """Run the graph. Actions outside `selected` (default: all) and actions whose needs `builder`
    lacks are deferred unless the store already holds them; so are their dependents. `remote`
    (compiler/gitops/cache.py): on a store miss, may import the action's output from a registry
    cache and return its record; the action then counts as cached. `interrupt` stops the build
    (see the module docstring)."""
    builder = builder if builder is not None else Builder()
    interrupt = interrupt if interrupt is not None else Interrupt()
    results: dict[str, ActionResult] = {}
    total = len(graph.order)
    with store.lock(exclusive=False), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending = list(graph.order)
        running: dict[Future, str] = {}
        busy: set[str] = set()  # exclusive kinds with an action running
        stop = threading.Event()
        try:
            while pending or running:
                if interrupt.is_set():
                    for aid in pending:
                        results[aid] = ActionResult(aid, graph.keys[aid], "interrupted",
                                                    error="not started: the build was interrupted")
                    pending = []
                for aid in list(pending):
                    if interrupt.is_set():
                        break  # the while loop marks what is left "interrupted"
                    deps = graph.actions[aid].deps
                    if any(results.get(d) is None for d in deps):
                        continue  # a dependency is still running or waiting
                    kind = kinds[graph.actions[aid].kind]
                    if kind.exclusive and kind.kind in busy:
                        continue  # one of its kind at a time
                    pending.remove(aid)
                    key = graph.keys[aid]
                    bad = [d for d in deps if results[d].status in ("failed", "skipped", "interrupted")]
                    if bad:
                        results[aid] = ActionResult(aid, key, "skipped", error=f"{bad[0]} did not build")
                        progress(f"[{len(results)}/{total}] skip   {aid} ({bad[0]} did not build)")
                        continue
                    waiting = [d for d in deps if results[d].status == "deferred"]
                    record = store.get_action(key)
                    fetched = False
                    if record is None and remote is not None:  # a registry cache (compiler/gitops/cache.py)
                        interrupt.fetching = aid  # in this thread: an interrupt stops it where it is
                        try:
                            record = remote(graph, aid, spec_name)
                        except KeyboardInterrupt:
                            if not interrupt.is_set():
                                raise
                            results[aid] = ActionResult(aid, key, "interrupted",
                                                        error="its fetch from the registry cache was stopped")
                            progress(f"[{len(results)}/{total}] stopped {aid} (fetch from the registry cache)")
                            continue
                        finally:
                            interrupt.fetching = None
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
                    if kind.exclusive:
                        busy.add(kind.kind)
                    state = Running(aid, time.monotonic(), functools.partial(estimate, store, spec_name, graph, aid),
                                    kind.isolated)
                    # placed here: the way this builder's machine holds, which the action is told
                    way = builder.way(graph.actions[aid].size)
                    running[pool.submit(_run_one, graph, kinds, aid, store, spec_name, results, stop, progress,
                                        digest_of, state, interrupt, way)] = aid
                if not running:
                    continue
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    aid = running.pop(fut)
                    interrupt.running.pop(aid, None)
                    busy.discard(graph.actions[aid].kind)
                    res = fut.result()
                    results[aid] = res
                    if res.status == "built":
                        progress(f"[{len(results)}/{total}] built  {aid} ({res.duration_s:.2f}s{way_said(graph, res)})")
                    elif res.status == "interrupted":
                        progress(f"[{len(results)}/{total}] stopped {aid} ({res.error})")
                    else:
                        progress(f"[{len(results)}/{total}] FAILED {aid}: {res.error} (log: {res.log})")
        except KeyboardInterrupt:
            stop.set()
            interrupt.stop()
            for fut in running:
                fut.cancel()
            raise
        finally:
            stop.set()
    return results


def run_here(graph: Graph, kinds: KindRegistry, aid: str, store: LocalStore, spec_name: str, results: dict,
             progress: Progress, interrupt: Interrupt, way: Way | None = None) -> ActionResult:
    """Run one action in this process in `way`, as `execute` does, and wait for it (a distributed
    build's small actions: compiler/distributed/driver.py)."""
    kind = kinds[graph.actions[aid].kind]
    state = Running(aid, time.monotonic(), functools.partial(estimate, store, spec_name, graph, aid), kind.isolated)
    stop = threading.Event()
    try:
        return _run_one(graph, kinds, aid, store, spec_name, results, stop, progress, None, state, interrupt, way)
    finally:
        stop.set()
        interrupt.running.pop(aid, None)


def way_said(graph: Graph, res: ActionResult) -> str:
    """", on the CPU" for a built action's progress line, where its placement chose among ways (a
    calibration on GPUs, offloading or on the CPU) or gave it GPUs; nothing for the others."""
    size = graph.actions[res.id].size or SMALL
    return f", {res.way.short()}" if res.way is not None and (len(size.ways) > 1 or res.way.gpus) else ""


def _lacking(kinds: KindRegistry, builder: Builder, action) -> str | None:
    missing = kinds.missing(action, builder)
    return f"needs {describe(missing, builder)}" if missing else builder.too_small(action.size)


def _run_one(graph: Graph, kinds: KindRegistry, aid: str, store: LocalStore, spec_name: str, results: dict,
             stop: threading.Event, progress: Progress, digest_of, state: Running,
             interrupt: Interrupt, way: Way | None = None) -> ActionResult:
    action = graph.actions[aid]
    key = graph.keys[aid]
    kind = kinds[action.kind]
    # Running from here (it may have waited for a worker): registered, then the interrupt checked,
    # so that a stop either sees it or it sees the stop.
    state.start = time.monotonic()
    interrupt.running[aid] = state
    if interrupt.is_set():
        return ActionResult(aid, key, "interrupted", error="not started: the build was interrupted")
    log_path = store.log_path(key)
    logger = logging.getLogger(f"kiln.action.{aid}.{key[7:19]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    start = state.start
    done = threading.Event()
    ticker = threading.Thread(target=_tick, args=(state, done, stop, progress), daemon=True)

    def phase(name: str, log: bool = True) -> None:
        state.phase = name
        if log:
            logger.info("phase: %s", name)
        progress(INDENT + phase_line(aid, name, time.monotonic() - start))

    with store.workdir() as work:
        handler = logging.FileHandler(work / "action.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        try:
            logger.info("action %s\nkind %s v%d\nkey %s", aid, action.kind, action.version, key)
            if way is not None:
                logger.info("way %s (%s)", way.short(), way.text())
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
            if kind.isolated:
                _run_isolated(kind, action.params, RunContext(out, files, deps, logger, way=way), work / "action.log",
                              state, interrupt, lambda name: phase(name, log=False))
            else:
                kind.run(action.params, RunContext(out, files, deps, logger, phase, way))
            tree = store.put_tree(out)
            duration = round(time.monotonic() - start, 3)
            logger.info("done in %.3fs, tree %s", duration, tree)
            handler.close()
            log_digest = store.put_file(work / "action.log")
            store.write_log(key, work / "action.log")  # before the record: a failure here leaves no record
            store.put_action(ActionRecord(key, action.kind, aid, tree, duration, log_digest,
                                          way.to_json() if way is not None else None))
            store.set_ref(spec_name, aid, key, action.record(graph.keys))
            return ActionResult(aid, key, "built", tree, duration, log_path, way=way)
        except Stopped:
            logger.info("stopped: the build was interrupted")
            handler.close()
            try:
                store.write_log(key, work / "action.log")
            except StoreError:  # the interrupt is what the user is told about; the log is a convenience
                pass
            return ActionResult(aid, key, "interrupted", None, round(time.monotonic() - start, 3), log_path,
                                "its process was killed: the build was interrupted")
        except Exception as e:  # an action's failure is reported, never raised past the build
            logger.exception("failed: %s", e)
            handler.close()
            error = str(e) if isinstance(e, ChildFailed) else f"{type(e).__name__}: {e}"
            try:
                store.write_log(key, work / "action.log")
            except StoreError as log_error:  # a full disk must not hide the action's own error
                error += f" (and its log was not kept: {log_error})"
            return ActionResult(aid, key, "failed", None, round(time.monotonic() - start, 3), log_path, error)
        finally:
            done.set()
            logger.removeHandler(handler)


def _run_isolated(kind: ActionKind, params, ctx: RunContext, log_file: Path, state: Running,
                  interrupt: Interrupt, on_phase: Callable[[str], None]) -> None:
    """Run `kind` in a process of its own (compiler/graph/child.py), forked by the zygote that has
    imported what the kind needs (compiler/graph/zygote.py), in a session of its own: the terminal's
    Ctrl-C reaches only the build, which decides what to stop."""
    job = {"module": type(kind).__module__, "class": type(kind).__qualname__, "params": params.to_json(),
           "out": os.path.abspath(ctx.out), "files": {k: os.path.abspath(v) for k, v in ctx.files.items()},
           "deps": {k: os.path.abspath(v) for k, v in ctx.deps.items()}, "log": os.path.abspath(log_file),
           "logger": ctx.log.name, "way": ctx.way.to_json() if ctx.way is not None else None}
    zygote = state.zygote = zygote_for((type(kind).__module__, *kind.preload))
    read_fd, write_fd = os.pipe()
    try:
        if interrupt.is_set():  # stopped while the zygote was starting
            raise Stopped()
        with open(log_file, "ab") as log:
            proc = zygote.fork(job, write_fd, log.fileno())
    except ZygoteGone as e:
        os.close(read_fd)
        if interrupt.is_set():
            raise Stopped() from None
        raise ChildFailed(f"the {kind.kind} process did not start: {e}") from None
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    state.proc = proc
    if interrupt.is_set():  # stopped while it was starting
        state.kill()
    outcome: dict = {}
    with os.fdopen(read_fd, encoding="utf-8", errors="replace") as status:
        for line in status:  # ends when the process exits
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if isinstance(message.get("phase"), str):
                on_phase(message["phase"][:200])
            elif "error" in message or "ok" in message:
                outcome = message
    try:
        code = proc.wait()
    except ZygoteGone as e:
        if interrupt.is_set() and not outcome:
            raise Stopped() from None
        raise ChildFailed(f"the {kind.kind} process's exit is unknown: {e}") from None
    if interrupt.is_set() and code != 0 and not outcome:
        raise Stopped()
    if outcome.get("ok") is True and code == 0:
        return
    if isinstance(outcome.get("error"), str):
        raise ChildFailed(outcome["error"])
    how = f"was killed by signal {-code}" if code < 0 else f"exited {code}"
    raise ChildFailed(f"the {kind.kind} process {how} without reporting an outcome (see the log)")


def _tick(state: Running, done: threading.Event, stop: threading.Event, progress: Progress) -> None:
    while not done.wait(TICK_S):
        if stop.is_set():
            return
        expected_s, basis = state.expected()
        progress(INDENT + running_line(state.aid, time.monotonic() - state.start, state.phase, expected_s, basis))
