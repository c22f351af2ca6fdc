"""The real `aiperf` for tests, in a virtual environment of its own.

AIPerf pins versions of packages the test interpreter already has at others (rich, ruamel.yaml,
among more), and `kiln tune` only ever runs it as a subprocess, so it gets an environment of its
own: the `aiperf` named by $KILN_AIPERF, else one on PATH at the pinned version, else a venv made
once under the user's cache directory ($XDG_CACHE_HOME or ~/.cache, `kiln/aiperf-<version>`)
with aiperf==<version> from the package index (tests/venvs.py: uv, else pip). Only an index that
cannot be reached skips the tests that need it; a failing install fails them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from tests import venvs

VERSION = "0.13.0"  # compiler/tune/aiperf.py VERSION_TESTED; pyproject's `tune` extra pins the same


class Unavailable(Exception):
    """The package index cannot be reached, so AIPerf cannot be installed here."""


def _version(exe: str) -> str | None:
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = proc.stdout.split()
    return words[-1] if proc.returncode == 0 and words else None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kiln" / f"aiperf-{VERSION}"


def aiperf_executable() -> str:
    explicit = os.environ.get("KILN_AIPERF")
    if explicit:
        return explicit
    on_path = shutil.which("aiperf")
    if on_path and _version(on_path) == VERSION:
        return on_path
    venv = cache_dir()
    exe = venv / "bin" / "aiperf"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".aiperf-{VERSION}.lock", "w") as lock:  # one installer at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").is_file() and exe.is_file():
            venvs.keep_bytecode(venv)  # a venv cached before it was made so
            return str(exe)
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
        # made in place: a venv's scripts name their interpreter by absolute path, so it cannot move
        venvs.make(venv)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        proc = venvs.install(venv, f"aiperf=={VERSION}", timeout=1800)
        if proc.returncode != 0:
            reach = subprocess.run(pip + ["index", "versions", "aiperf"], capture_output=True, text=True,
                                   timeout=300)
            shutil.rmtree(venv, ignore_errors=True)
            if reach.returncode != 0:
                raise Unavailable(f"the package index cannot be reached to install aiperf=={VERSION}: "
                                  f"{(reach.stderr or reach.stdout).strip()[-300:]}")
            raise RuntimeError(f"pip install aiperf=={VERSION} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        if _version(str(exe)) != VERSION:
            raise RuntimeError(f"{exe} does not report version {VERSION}")
        (venv / ".complete").write_text(VERSION + "\n", encoding="utf-8")
    return str(exe)
