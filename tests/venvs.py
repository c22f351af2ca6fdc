"""Packages into the tests' own virtual environments (AIPerf's, a runtime's transformers): with uv
when the test interpreter has it (scripts/install.sh installs it next to Kiln), which downloads and
unpacks in parallel, else with the venv's own pip. A uv failure falls back to pip, so what a
failure says (an unreachable index, a missing version) is always pip's, as the callers expect."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path


# A .pth line runs when the venv's Python starts (site): it undoes PYTHONDONTWRITEBYTECODE, which
# some CI images set, for these venvs only. They are caches of the tests', and without it every
# process (AIPerf starts several a probe) compiles what it imports from source again: seconds each.
KEEP_BYTECODE = ("kiln-tests-keep-bytecode.pth", "import sys; sys.dont_write_bytecode = False\n")


def make(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True, timeout=300)
    keep_bytecode(path)


def keep_bytecode(venv: Path) -> None:
    """The venv's Python keeps the bytecode it compiles (KEEP_BYTECODE); idempotent."""
    name, line = KEEP_BYTECODE
    v = sys.version_info
    site = venv / "lib" / f"python{v.major}.{v.minor}" / "site-packages"
    if site.is_dir() and not (site / name).is_file():
        (site / name).write_text(line, encoding="utf-8")


def install(venv: Path, *requirements: str, timeout: float, pip_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    python = str(venv / "bin" / "python")
    if importlib.util.find_spec("uv") is not None:
        done = subprocess.run([sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", python,
                               *requirements], capture_output=True, text=True, timeout=timeout)
        if done.returncode == 0:
            return done
    return subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pip_args,
                           *requirements], capture_output=True, text=True, timeout=timeout)
