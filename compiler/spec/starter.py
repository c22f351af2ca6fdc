"""The commented starter spec `kiln init --example FILE` writes (compiler/templates/starter/kiln.yaml):
one model on one whole GPU, validating clean, with the next steps in its comments."""

from __future__ import annotations

import os
from pathlib import Path

from compiler import resources


def starter_text() -> str:
    return (resources.template_dir("starter") / "kiln.yaml").read_text(encoding="utf-8")


def write_starter(path: Path) -> Path:
    """Write the starter spec to `path`, never over an existing file (FileExistsError)."""
    data = starter_text().encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return path
