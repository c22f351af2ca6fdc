"""What the machine running a build can do, and which actions it therefore cannot run.

An action lists what it needs (`Action.needs`): "torch" (torch, transformers and ModelOpt
importable), "gpu" (a CUDA device), "docker" (a reachable Docker Engine), "network" (it downloads).
An action whose needs this builder lacks is *deferred*: not run, not failed, and named in the plan
and the manifest with what it waits for, so a GPU builder (CI's GPU job) can complete the release
from the same store or cache. Detection is lazy: a build that needs nothing never imports torch.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Iterable

from .sizes import Machine, holds, lacking

NEED_TEXT = {
    "torch": "torch, transformers and nvidia-modelopt",
    "gpu": "a GPU builder (a CUDA device)",
    "docker": "a reachable Docker Engine",
    "network": "network access to the model hub (or a local copy verified by source.digest)",
    "tensorrt_llm": "TensorRT-LLM importable with CUDA (else a Docker Engine runs the release container)",
}


TORCH_MODULES = ("torch", "transformers", "modelopt")
INSTALL_HINT = ("bash scripts/install.sh in a checkout; or pip install torch==2.13.0, then the quantize extra "
                "kiln-compiler[quantize]")


def _missing_torch_modules() -> list[str]:
    return [m for m in TORCH_MODULES if importlib.util.find_spec(m) is None]


def _has_torch() -> bool:
    return not _missing_torch_modules()


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None or not _has_torch():
        return False
    import torch

    return bool(torch.cuda.is_available())


def _has_docker() -> bool:
    docker = os.environ.get("KILN_DOCKER", "docker")
    if shutil.which(docker) is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _has_network() -> bool:
    if os.environ.get("HF_HUB_OFFLINE") or os.environ.get("KILN_OFFLINE"):
        return False
    host = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").split("://", 1)[-1].split("/", 1)[0]
    try:
        socket.getaddrinfo(host.split(":")[0], 443)
        return True
    except OSError:
        return False


PROBES = {"torch": _has_torch, "gpu": _has_gpu, "docker": _has_docker, "network": _has_network}


ENV_FIXED = "KILN_BUILDER_HAS"  # e.g. "torch,docker": pin the capabilities instead of probing ("" = none)


def _fixed_from_env() -> frozenset[str] | None:
    raw = os.environ.get(ENV_FIXED)
    if raw is None:
        return None
    return frozenset(n.strip() for n in raw.split(",") if n.strip())


@dataclass
class Builder:
    """The builder's capabilities. `fixed` pins them (tests; $KILN_BUILDER_HAS for a CI job that
    must not attempt what another job does); otherwise each is probed the first time an action
    asks for it. `machine`: its GPUs, memory and disk (compiler/machines.py: probed by the
    build, or a declared class); an action whose size it does not hold is deferred. None: sizes
    are not checked (planning without a builder)."""

    fixed: frozenset[str] | None = field(default_factory=_fixed_from_env)
    _probed: dict[str, bool] = field(default_factory=dict)
    machine: Machine | None = None

    def way(self, size):
        """The way an action of `size` runs here (compiler/graph/sizes.py holds), or None where the
        machine is unknown (the action then decides from what it sees) or holds no way."""
        return None if self.machine is None else holds(size, self.machine)

    def too_small(self, size) -> str | None:
        """What this builder's machine lacks to hold `size`, or None when it holds it (or is unknown)."""
        if self.machine is None or self.way(size) is not None:
            return None
        return f"more machine than {self.machine.name} has: {lacking(size, self.machine)} (it needs {size.text()})"

    def has(self, need: str) -> bool:
        if self.fixed is not None:
            return need in self.fixed
        if need not in self._probed:
            probe = PROBES.get(need)
            self._probed[need] = bool(probe and probe())
        return self._probed[need]



def describe(needs: Iterable[str], builder=None) -> str:
    """What the needs are, and for torch why this builder lacks it: the modules that are not
    installed (with how to install them), or, when they are, the KILN_BUILDER_HAS pin that leaves
    it out (only the cheap torch probe runs here; the others may take seconds)."""
    parts = []
    for n in needs:
        text = NEED_TEXT.get(n, n)
        if n == "torch":
            gone = _missing_torch_modules()
            if gone:
                text += f" ({', '.join(gone)} not installed: {INSTALL_HINT})"
            elif getattr(builder, "fixed", None) is not None:
                text += f" (installed, but {ENV_FIXED}={','.join(sorted(builder.fixed))!r} leaves it out)"
        parts.append(text)
    return "; ".join(parts)


@dataclass(frozen=True)
class Selection:
    """`--only` / `--skip`: glob patterns over action ids (or kinds). Dependencies of a selected
    action are still built: a selected action cannot run without them."""

    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()

    @staticmethod
    def _match(aid: str, kind: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(aid, p) or fnmatch.fnmatchcase(kind, p) for p in patterns)

    def chosen(self, graph) -> set[str]:
        """The action ids this selection builds."""
        ids = set(graph.order)
        if self.only:
            wanted = {a for a in ids if self._match(a, graph.actions[a].kind, self.only)}
            frontier = list(wanted)
            while frontier:  # close over dependencies
                for dep in graph.actions[frontier.pop()].deps:
                    if dep not in wanted:
                        wanted.add(dep)
                        frontier.append(dep)
            ids = wanted
        if self.skip:
            ids = {a for a in ids if not self._match(a, graph.actions[a].kind, self.skip)}
        return ids

    def unmatched(self, graph) -> list[str]:
        """Patterns that select nothing: a typo must not silently build nothing."""
        return [p for p in (*self.only, *self.skip)
                if not any(self._match(a, graph.actions[a].kind, (p,)) for a in graph.order)]
