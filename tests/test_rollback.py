"""Rolling a spec back with git restores the earlier release from the store: nothing is rebuilt and
the manifest is the first one, byte for byte."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "b200-mig-three-models"
RELEASE_LINE = re.compile(r"^release (sha256:[0-9a-f]{64}): (\d+) executed, (\d+) cached\b", re.M)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

@pytest.fixture(autouse=True)
def _bare_builder(monkeypatch):
    """These tests are about the store and the graph: build as a builder without torch, a GPU or the
    network on every machine (model actions are then deferred; tests/test_quantize.py runs them)."""
    monkeypatch.setenv("KILN_BUILDER_HAS", "")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    proc = subprocess.run(["git", "-c", "user.name=Kiln Test", "-c", "user.email=kiln-test@example.invalid",
                           "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args],
                          cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def kiln_build(repo: Path, store: Path, manifest: Path) -> tuple[str, int, int]:
    """`kiln build` as a user runs it; returns (release digest, executed, cached)."""
    proc = subprocess.run([sys.executable, "-m", "compiler", "build", "kiln.yaml", "--store", str(store),
                           "--manifest", str(manifest), "-q", "--allow-partial"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = RELEASE_LINE.search(proc.stdout)
    assert m, proc.stdout
    return m.group(1), int(m.group(2)), int(m.group(3))


def test_revert_rebuilds_nothing_and_restores_the_manifest(tmp_path: Path) -> None:
    repo, store, out = tmp_path / "repo", tmp_path / "store", tmp_path / "out"
    shutil.copytree(EXAMPLE, repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "spec A")
    digest_a, executed, cached = kiln_build(repo, store, out / "a.json")
    assert (executed, cached) == (10, 0)

    # spec B: a limit of one model and the content of one calibration file
    spec = repo / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    assert text.count("limits: {max_batch_size: 32") == 1
    spec.write_text(text.replace("limits: {max_batch_size: 32", "limits: {max_batch_size: 24"), encoding="utf-8")
    with open(repo / "data" / "calib-code.jsonl", "a", encoding="utf-8") as f:
        f.write('{"text": "print(42)"}\n')
    git(repo, "commit", "-q", "-am", "spec B")
    digest_b, executed, cached = kiln_build(repo, store, out / "b.json")
    assert digest_b != digest_a
    # llmapi-options/intent, capacity-report/b200-a, calibration-set/coder, spec-snapshot
    assert (executed, cached) == (4, 6)

    git(repo, "revert", "--no-edit", "HEAD")
    assert git(repo, "status", "--porcelain") == ""
    digest_c, executed, cached = kiln_build(repo, store, out / "c.json")
    assert (executed, cached) == (0, 10)
    assert digest_c == digest_a
    assert (out / "c.json").read_bytes() == (out / "a.json").read_bytes()
    assert (out / "b.json").read_bytes() != (out / "a.json").read_bytes()
    # the store's release history records the rollback as a new entry
    history = (store / "releases" / "chat-prod.jsonl").read_text(encoding="utf-8").split()
    assert [h.strip('"') for h in history] == [digest_a, digest_b, digest_a]
