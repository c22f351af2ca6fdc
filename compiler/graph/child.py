"""One action of an isolated kind (ActionKind.isolated), in a process of its own that an interrupted
build can kill: compiler/graph/zygote.py forks it, in a new session, and the executor kills that
process group.

`run(job, status_fd, kiln_dir)`: phases and the outcome go back as JSON lines on file descriptor
`status_fd`; stdout and stderr are the action's log, so whatever the kind or native code prints lands
there. `kiln_dir` is where the build's Kiln is imported from: the child refuses to run another one.
Nothing here writes to the store: the parent stores the output directory after the child succeeded.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> bool:
    """Ask Linux to kill this process when the process that forked it dies, however it dies (the
    zygote dies with the build); False when the parent is already gone."""
    import signal

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent still kills the process group
        pass
    return os.getppid() == parent


def run(job: dict, status_fd: int, kiln_dir: str) -> int:
    import compiler
    from compiler.graph.kinds import RunContext
    from compiler.graph.sizes import Way

    status = os.fdopen(status_fd, "w", buffering=1, encoding="utf-8")

    def send(**message) -> None:
        status.write(json.dumps(message) + "\n")
        status.flush()

    here = Path(compiler.__file__).resolve().parents[1]
    if here != Path(kiln_dir).resolve():
        send(error=f"the action's process imports Kiln from {here}, not from {kiln_dir} as the build does")
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
                         {k: Path(v) for k, v in job["deps"].items()}, log, phase,
                         Way.from_json(job["way"]) if job.get("way") else None)
        kind.run(params, ctx)
    except Exception as e:  # reported to the parent, which fails the action with it
        log.exception("failed: %s", e)
        send(error=f"{type(e).__name__}: {e}")
        return 1
    finally:
        handler.close()
    send(ok=True)
    return 0
