"""The exit codes of `kiln`: every command handler returns one of these (the README lists them)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # no errors (warnings allowed)
    ERRORS = 1  # the spec has errors, or a build action failed
    USAGE = 2  # bad command-line use
    INTERNAL = 3  # a bug in kiln (KILN_DEBUG=1 shows the traceback)
    INCOMPLETE = 4  # `kiln build` deferred some actions (`--allow-partial` makes that OK)
    CHANGES = 5  # `kiln plan --base` found changes
    INTERRUPTED = 130  # Ctrl-C
    BROKEN_PIPE = 141  # the reader of kiln's output went away before the command finished (128 + SIGPIPE)
