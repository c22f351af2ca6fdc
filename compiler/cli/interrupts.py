"""Ctrl-C (SIGINT) and SIGTERM during `kiln build`. The first one says at once what it stops and
stops it (compiler/graph/executor.py: Interrupt): no action starts any more, the processes of
isolated actions (quantization, engine builds) are killed, and the build ends with exit 130 once
the actions running in threads have finished their step, recording no release. A second one exits
130 at once. Before the executor runs (validating, lowering) the first one interrupts as usual, and
so it does a registry cache fetch (it runs in the executor's own thread: it stops where it is).

The handlers write with os.write: a signal can arrive while the main thread is inside a print to
the same stream, and Python's buffered streams refuse a reentrant write."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (text + "\n").encode("utf-8", "replace"))


def stop_message(killed: list[str], left: list[str], fetching: str | None = None) -> str:
    """What the first interrupt stops, in one line."""
    parts = [f"stopping the fetch of {fetching} from the registry cache"] if fetching else []
    if killed:
        parts.append(f"stopping {', '.join(killed)} (killing its process{'es' if len(killed) > 1 else ''})")
    if left:
        parts.append(f"waiting for {', '.join(left)} to finish {'their' if len(left) > 1 else 'its'} current step "
                     "(a step run in-process cannot be stopped midway; the store keeps what it finishes)")
    if not parts:
        parts.append("stopping the build")
    return f"kiln: interrupted: {'; '.join(parts)}; no further action starts. Interrupt again to exit at once."


@contextlib.contextmanager
def stopping_on_signals(interrupt) -> Iterator[None]:
    """SIGINT and SIGTERM stop `interrupt`'s build while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    count = 0

    def handler(signum, frame) -> None:
        nonlocal count
        count += 1
        if count > 1:
            interrupt.kill_all()
            _say("kiln: interrupted again: exiting now (the store stays consistent; what a step left in its tmp/ "
                 "is removed by `kiln store gc`)")
            os._exit(130)
        if not interrupt.active:
            raise KeyboardInterrupt
        fetching = interrupt.fetching
        _say(stop_message(*interrupt.stop(), fetching=fetching))
        if fetching is not None:  # the executor's thread is in a registry transfer: stop it there
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
