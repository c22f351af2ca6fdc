"""One action of an isolated kind (ActionKind.isolated), in a process of its own that an interrupted
build can kill (compiler/graph/executor.py starts it in a new session and kills that process group).

`main([KILN_DIR, FD])` (the executor's bootstrap line calls it): the job comes as one JSON object on
stdin; phases and the outcome go back as JSON lines on file descriptor FD; stdout and stderr are the
action's log, so whatever the kind or native code prints lands there. KILN_DIR is where the build's
Kiln is imported from: the child refuses to run another one. Nothing here writes to the store: the parent stores the
output directory after the child succeeded.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> bool:
    """Ask Linux to kill this process when the build that started it dies, however it dies (a
    second Ctrl-C ends it with os._exit); False when the parent is already gone."""
    import signal

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent still kills the process group
        pass
    return os.getppid() == parent


def main(argv: list[str]) -> int:
    import compiler
    from compiler.graph.kinds import RunContext

    status = os.fdopen(int(argv[1]), "w", buffering=1, encoding="utf-8")

    def send(**message) -> None:
        status.write(json.dumps(message) + "\n")
        status.flush()

    job = json.loads(sys.stdin.read())
    if not _die_with_parent(job["parent"]):
        return 1
    here = Path(compiler.__file__).resolve().parents[1]
    if here != Path(argv[0]).resolve():
        send(error=f"the action's process imports Kiln from {here}, not from {argv[0]} as the build does")
        return 1
    log = logging.getLogger(job["logger"])
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(job["log"], mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)

    def phase(name: str) -> None:
        log.info("phase: %s", name)
        send(phase=name)

    try:
        kind = getattr(importlib.import_module(job["module"]), job["class"])()
        params = kind.Params.model_validate(job["params"])
        ctx = RunContext(Path(job["out"]), {k: Path(v) for k, v in job["files"].items()},
                         {k: Path(v) for k, v in job["deps"].items()}, log, phase)
        kind.run(params, ctx)
    except Exception as e:  # reported to the parent, which fails the action with it
        log.exception("failed: %s", e)
        send(error=f"{type(e).__name__}: {e}")
        return 1
    finally:
        handler.close()
    send(ok=True)
    return 0
