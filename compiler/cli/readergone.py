"""Output whose reader went away (`kiln build | head`, `kiln plan | grep -m1 ...`).

Python turns the closed pipe into a BrokenPipeError at whatever print comes next: in a build that is
a progress line, so the build stopped part-way, recorded no release, and the exit code said 0. Here
the command's stdout and stderr are wrapped for its run: the first write that finds the reader gone
marks the stream cut and sends the rest to /dev/null, so the command runs to its end (a build
records its release, a failed action still fails it) and its own exit code stands. A
BrokenPipeError that escapes anyway (binary output, another pipe) means the command stopped before
it finished: exit 141 (128 + SIGPIPE, what a shell reports for a writer a closed pipe killed).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Iterator, TextIO


class _Guarded:
    """A text stream that swallows what is written after its reader went away."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.cut = False

    def write(self, text: str) -> int:
        if not self.cut:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.cut:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.cut = True
        with contextlib.suppress(OSError, ValueError):  # what is still buffered goes nowhere, silently
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_output() -> Iterator[list[_Guarded]]:
    """Wrap sys.stdout and sys.stderr (real streams only) for the duration; yields the wrappers."""
    saved = sys.stdout, sys.stderr
    wrapped = [(_Guarded(s) if isinstance(s, io.TextIOWrapper) else s) for s in saved]
    sys.stdout, sys.stderr = wrapped
    try:
        yield [w for w in wrapped if isinstance(w, _Guarded)]
    finally:
        for w in wrapped:  # what is buffered goes now: a reader gone by then does not change the exit code
            with contextlib.suppress(OSError, ValueError):
                w.flush()
        sys.stdout, sys.stderr = saved
