"""`model-source`: the servable checkpoint of a model that is not quantized: its source files
(config, weights, tokenizer; see source.SOURCE_PATTERNS), verified, at the tree root, in the same
layout as `quantize`'s export. A local directory is keyed file by file; a Hugging Face source by
repository, pinned revision and expected digest, and it needs the network unless a local copy exists.

Its config.json is the one the pinned TensorRT-LLM's transformers reads correctly (hf_config.py): the
source's bytes when it is written in that schema, else the source's config rewritten in it (a
config.json saved by transformers 5 states RoPE only in `rope_parameters`, which transformers 4.x
ignores). The schema is part of the key."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from compiler.graph.model import Action
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext
from .hf_config import CONFIG_JSON, ConfigPlan, config_plan, require_plan, source_config_bytes
from .source import SOURCE_PATTERNS, SourceRef, fetch_huggingface, lower_source, source_needs


class ModelSourceParams(Params):
    effect_of_fields = BUILD_INPUT
    model: str
    source: SourceRef
    checkpoint_config: ConfigPlan | None  # the schema the runtime reads config.json in (None: pin not in the table)


class ModelSource(ActionKind[ModelSourceParams]):
    kind, version, Params = "model-source", 2, ModelSourceParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        if ctx.ir.target != "llmapi":
            return []  # engine/<model> reads the source itself
        out = []
        plan = config_plan(ctx.spec.toolchain.tensorrt_llm)
        for name, rm in sorted(ctx.ir.models.items()):
            if rm.formats.quantized:
                continue  # quantize/<model> is its checkpoint
            source, inputs, files = lower_source(ctx, rm.spec)
            params = ModelSourceParams(model=name, source=source, checkpoint_config=plan)
            out.append(self.action(f"{self.kind}/{name}", params, inputs=inputs,
                                   needs=() if source.path else ("network",), files=files))
        return out

    def size(self, action, ir):
        from .sizing import source_size

        return source_size(ir.models[action.params.model])

    def missing(self, params: ModelSourceParams, needs, builder) -> list[str]:
        return source_needs(params.source, builder)

    def preflight(self, params: ModelSourceParams) -> None:
        """The config schema of the pinned runtime is known."""
        require_plan(params.checkpoint_config)

    def run(self, params: ModelSourceParams, ctx: RunContext) -> None:
        plan = require_plan(params.checkpoint_config)
        if params.source.path:
            picked = {role[len("source/"):]: path for role, path in ctx.files.items() if role.startswith("source/")}
        else:
            root = fetch_huggingface(params.source, ctx.log)
            picked = {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}
        picked = {rel: p for rel, p in picked.items()
                  if not any(part.startswith(".") for part in Path(rel).parts)
                  and any(fnmatch.fnmatch(Path(rel).name, pat) for pat in SOURCE_PATTERNS)}
        if CONFIG_JSON not in picked:
            raise FileNotFoundError(f"model {params.model!r}: the source has no config.json")
        for rel, path in sorted(picked.items()):
            dest = ctx.out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if rel == CONFIG_JSON:
                raw = path.read_bytes()
                dest.write_bytes(source_config_bytes(raw, plan))
                if dest.read_bytes() != raw:
                    ctx.log.info("config.json rewritten for transformers %s (schema %s)", plan.transformers or "?",
                                 plan.schema_major)
            else:
                shutil.copyfile(path, dest)
        ctx.log.info("%d files from the source of %s", len(picked), params.model)


KIND = ModelSource()
