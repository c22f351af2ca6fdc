"""STAND-IN for `model-source/<model>` (the lead adds the real kind in main): the servable checkpoint
of an unquantized model, i.e. its verified source files at the tree root. Only local `path`
sources are handled here; the image needs nothing but the output layout. Dropped at merge."""

from __future__ import annotations

import shutil

from compiler.graph.inputs import tree_digests
from compiler.graph.model import Action

from .base import LowerContext, RunContext

KIND, VERSION = "model-source", 0


def lower(ctx: LowerContext) -> list[Action]:
    out = []
    for name, model in sorted(ctx.spec.models.items()):
        if model.quantization.quantized:
            continue
        src, inputs, files = model.source, {}, {}
        if src.path is not None:
            base = ctx.base_dir / src.path
            for rel, digest in tree_digests(base, ctx.digests).items():
                inputs[f"source/{rel}"] = digest
                files[f"source/{rel}"] = str(base / rel)
            source: dict = {"path": True}
        else:
            source = {"huggingface": src.huggingface, "revision": src.revision}
        out.append(Action(f"{KIND}/{name}", KIND, VERSION, {"model": name, "source": source}, inputs=inputs,
                          files=files))
    return out


def run(params: dict, ctx: RunContext) -> None:
    if not params["source"].get("path"):
        raise RuntimeError("model-source stand-in: Hugging Face sources are not fetched by this stand-in")
    for role, path in sorted(ctx.files.items()):
        dest = ctx.out / role.split("/", 1)[1]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
