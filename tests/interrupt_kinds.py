"""Action kinds for the interrupt and progress tests (tests/test_interrupts.py): an isolated one,
which the executor runs in a child process that imports this module, and one run in a thread.
One told to `record` writes what its process sees (its ids, this module's state, the environment).

Each writes its process id to `pid_file` and announces its phases; one told to `hold` waits until
the file `release` exists (at most two minutes), so that a test can interrupt it while it runs
without relying on how long anything takes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from compiler.graph.kinds import ActionKind, Params, RunContext

HOLD_LIMIT_S = 120.0


class ChildParams(Params):
    name: str
    phases: list[str] = []
    pid_file: str | None = None
    hold: bool = False
    release: str | None = None
    fail: bool = False
    record: str | None = None


_RAN: list[str] = []  # the actions that ran in this process


def _run(params: ChildParams, ctx: RunContext) -> None:
    if params.record:
        Path(params.record).write_text(json.dumps({
            "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "ran_before": list(_RAN),
            "probe": os.environ.get("KILN_TEST_PROBE")}), encoding="utf-8")
    _RAN.append(params.name)
    if params.pid_file:
        Path(params.pid_file).write_text(str(os.getpid()), encoding="utf-8")
    for phase in params.phases:
        ctx.phase(phase)
        ctx.log.info("in %s", phase)
    if params.fail:
        raise ValueError(f"{params.name} was told to fail")
    if params.hold:
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not (params.release and Path(params.release).exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
    (ctx.out / "out.txt").write_text(params.name, encoding="utf-8")


class ChildStep(ActionKind[ChildParams]):
    kind, version, Params = "child-step", 1, ChildParams
    isolated = True

    def run(self, params: ChildParams, ctx: RunContext) -> None:
        _run(params, ctx)


class SlowImportStep(ChildStep):
    """An isolated kind whose preloaded module takes as long to import as the test wants."""

    kind = "slow-import-step"
    preload = ("tests.slow_import",)


class ThreadStep(ActionKind[ChildParams]):
    kind, version, Params = "thread-step", 1, ChildParams

    def run(self, params: ChildParams, ctx: RunContext) -> None:
        _run(params, ctx)
