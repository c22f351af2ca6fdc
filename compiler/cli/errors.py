"""Errors the command line reports itself."""

from __future__ import annotations


class UsageError(Exception):
    """Bad command-line use (exit 2, ExitCode.USAGE)."""
