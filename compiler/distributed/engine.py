"""The protocol a distributed engine implements for `kiln build --executor`.

An engine says what its machines have (each a compiler.graph.sizes.Machine: GPUs of which
architecture and memory, host memory, the software capabilities its nodes advertise), runs a job
(compiler/distributed/worker.py: one action, by digest) on a machine that holds the chosen way, and
reports, waits for and cancels its jobs. Retrying a job whose machine was lost is the engine's own
business (Ray retries a task whose worker died); Kiln cancels a job at its deadline or on Ctrl-C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from compiler.graph.sizes import Machine, Way


class EngineError(Exception):
    """The engine cannot be reached or refused the build (a usage error for the CLI)."""


@dataclass
class Finished:
    """A job's end: its result (worker.run_job's dict) or the error it ended with."""

    handle: Any
    result: dict | None = None
    error: str | None = None


class Engine(Protocol):
    name: str

    def machines(self) -> list[Machine]:
        """What the engine's machines have, one entry per node (or node type)."""

    def submit(self, job: dict, way: Way, label: str, accelerator: str | None = None) -> Any:
        """Start `job` on a machine that holds `way` (with GPUs of type `accelerator`, the chosen
        machine's, wherever the way needs GPUs: their memory or architecture is what holds it); a
        handle for wait and cancel."""

    def wait(self, handles: list, timeout_s: float) -> list[Finished]:
        """The jobs among `handles` that ended within `timeout_s` (possibly none)."""

    def cancel(self, handle: Any) -> None:
        """Stop a job (its process is killed; nothing it had not pushed whole is kept)."""

    def close(self) -> None:
        """Let go of the engine (the jobs this build submitted are cancelled first)."""
