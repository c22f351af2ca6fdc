"""tests/warm_caches.py writes pytest's rewritten modules where PYTHONDONTWRITEBYTECODE is set, and
the test run (with the variable still set) reads them instead of rewriting its files again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.warm_caches import rewritten_modules


def _collect(root: Path) -> str:
    """pytest's own trace of a collection (PYTEST_DEBUG): which modules it rewrote, which it read,
    with PYTHONDONTWRITEBYTECODE set as on CI images that set it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KILN_"))}
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=root, capture_output=True, text=True, timeout=300,
                         env=env | {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DEBUG": "1"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout + run.stderr


def test_the_run_reads_the_rewritten_modules_written_beforehand(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # its own root: not this suite
    (tmp_path / "test_probe.py").write_text("def test_probe():\n    assert 1 == 1\n", encoding="utf-8")
    probe = tmp_path / "test_probe.py"
    # with the variable set, nothing is written: every run rewrites the file again
    assert f"rewriting {probe!r}" in _collect(tmp_path)
    assert not list(tmp_path.rglob("*.pyc"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert rewritten_modules(tmp_path) == "pytest's rewritten modules"
    assert len(list((tmp_path / "__pycache__").glob("test_probe.*-pytest-*.pyc"))) == 1
    trace = _collect(tmp_path)
    assert f"found cached rewritten pyc for {probe}" in trace and f"rewriting {probe!r}" not in trace
