"""A real git repository in a temp directory, with a fixed identity and clock so commit ids (and
the plans and tags that print them) are the same on every run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_ENV = {"GIT_AUTHOR_NAME": "Kiln Test", "GIT_AUTHOR_EMAIL": "test@kiln.invalid",
        "GIT_COMMITTER_NAME": "Kiln Test", "GIT_COMMITTER_EMAIL": "test@kiln.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


class GitRepo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ticks = 0
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        stamp = f"2026-01-01T00:{self.ticks // 60:02d}:{self.ticks % 60:02d}Z"
        env = {**os.environ, **_ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        proc = subprocess.run(["git", *args], cwd=self.root, env=env, capture_output=True, text=True, check=True)
        return proc.stdout.strip()

    def commit(self, message: str) -> str:
        self.ticks += 1
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def edit(self, rel: str, old: str, new: str) -> None:
        path = self.root / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {rel}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
