"""What lowering and running an action see."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compiler.graph.inputs import DigestCache
from compiler.spec.loader import Document
from compiler.spec.models import Spec


@dataclass
class LowerContext:
    spec: Spec
    document: Document
    resolved: object  # compiler.resolve.Resolved
    base_dir: Path
    digests: DigestCache

    def file_digest(self, rel: str) -> str:
        return self.digests.digest(self.base_dir / rel)


@dataclass
class RunContext:
    """Where an action writes its output, and what it may read."""

    out: Path  # empty directory; everything written here becomes the artifact
    files: dict[str, Path]  # role -> input file (its digest was checked before the run)
    deps: dict[str, Path]  # upstream action id -> its materialized output directory
    log: logging.Logger


Runner = Callable[[dict, RunContext], None]
