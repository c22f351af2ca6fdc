"""Makes what the test run would otherwise make in its first minutes, while scripts/test.sh's serial
steps (the wheel smoke test: one core busy, the other idle) run beside it:

- pytest's rewritten modules (the test files and its plugins' modules, tests/__pycache__ and
  site-packages), written by one collection here. Where PYTHONDONTWRITEBYTECODE is set (some CI
  images), pytest never writes them, and each worker rewrites them all again: seconds of CPU a worker.
  pytest reads them whatever that variable says.
- the tests' own venvs: AIPerf's (tests/aiperf_env.py) and the runtime's transformers
  (tests/runtime_transformers.py).

Only a cache: a test that finds nothing here makes it itself, under the same locks, and reports what
fails. So nothing here fails the test command; it says what it could not do, and goes on.

Run: python -m tests.warm_caches
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rewritten_modules(root: Path = ROOT) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    return "pytest's rewritten modules" if proc.returncode == 0 else \
        f"pytest --collect-only exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-300:]}"


def aiperf_venv() -> str:
    from tests.aiperf_env import aiperf_executable

    return f"aiperf: {aiperf_executable()}"


def runtime_transformers_venv() -> str:
    from tests.runtime_transformers import RuntimeTransformers, runtime_version

    version = runtime_version()
    return f"transformers {version}: {RuntimeTransformers(version).ensure().dir}"


def main() -> int:
    for step in (rewritten_modules, aiperf_venv, runtime_transformers_venv):
        try:
            said = step()
        except Exception as e:  # the test that needs it tries again and says why it failed
            said = f"{step.__name__}: not made ({type(e).__name__}: {str(e)[:300]}); the tests that need it will try"
        print(f"warm-caches: {said}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
