"""STAND-IN (branch f6-triton): `model-source`, the checkpoint of an unquantized model: the verified
source files at the tree root. The lead's own module replaces this file at merge; it exists only
so that `checkpoint_action_id` names an action for unquantized models while the Triton repository
depends on it."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from compiler.graph.model import Action

from .base import LowerContext, RunContext
from .quantize import SOURCE_PATTERNS, fetch_huggingface

KIND, VERSION = "model-source", 1


def lower(ctx: LowerContext) -> list[Action]:
    from compiler.graph.inputs import tree_digests

    out = []
    for name, model in sorted(ctx.spec.models.items()):
        if model.quantization.quantized:
            continue
        src = model.source
        inputs: dict[str, str] = {}
        files: dict[str, str] = {}
        if src.path is not None:
            base = ctx.base_dir / src.path
            for rel, digest in tree_digests(base, ctx.digests).items():
                if any(fnmatch.fnmatch(Path(rel).name, p) for p in SOURCE_PATTERNS):
                    inputs[f"source/{rel}"] = digest
                    files[f"source/{rel}"] = str(base / rel)
            params = {"model": name, "source": {"path": True}}
            needs: tuple[str, ...] = ()
        else:
            params = {"model": name, "source": {"huggingface": src.huggingface, "revision": src.revision,
                                                "digest": src.digest}}
            needs = ("network",)
        out.append(Action(f"{KIND}/{name}", KIND, VERSION, params, inputs=inputs, needs=needs, files=files))
    return out


def run(params: dict, ctx: RunContext) -> None:
    if params["source"].get("huggingface"):
        root = fetch_huggingface(params["source"], ctx.log)
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root)
            if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in SOURCE_PATTERNS):
                (ctx.out / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, ctx.out / rel)
        return
    for role, path in sorted(ctx.files.items()):
        dest = ctx.out / role[len("source/"):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
