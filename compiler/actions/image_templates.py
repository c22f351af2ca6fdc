"""The serving image's templates (compiler/templates/image/) and its base: what the image context
renders (image_context.py) and what a disaggregated server's or router's digest covers
(compiler/targets/hosts/disaggregated.py), kept apart so neither imports the other."""

from __future__ import annotations

import hashlib
from pathlib import Path

from compiler import resources

TEMPLATE_DIR = resources.template_dir("image")
DOCKERFILE, ENTRYPOINT = "Dockerfile.j2", "serve.sh.j2"
TEMPLATES = (DOCKERFILE, ENTRYPOINT)


def template_digests(template_dir: Path = TEMPLATE_DIR) -> dict[str, str]:
    return {name: "sha256:" + hashlib.sha256((template_dir / name).read_bytes()).hexdigest() for name in TEMPLATES}


def base_image(spec) -> str:
    return spec.image.base if spec.image.base is not None else spec.toolchain.triton_image
