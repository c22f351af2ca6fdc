"""`tokenizer`: a model's tokenizer files (source.TOKENIZER_FILES), taken from its source.

The Triton repository carries them (its Python models tokenize), and it takes them from here
rather than from the checkpoint: quantizing again (new calibration data, a new recipe) leaves the
tokenizer, and so the repository and its image layer, untouched. A local source enters the key
by the digests of its tokenizer files only; a Hugging Face source by its pinned revision.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from compiler.graph.model import Action
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext
from .source import TOKENIZER_FILES, SourceRef, fetch_huggingface, lower_source, source_needs


class TokenizerParams(Params):
    effect_of_fields = BUILD_INPUT
    model: str
    source: SourceRef


class Tokenizer(ActionKind[TokenizerParams]):
    kind, version, Params = "tokenizer", 1, TokenizerParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        out = []
        keep = {f"source/{n}" for n in TOKENIZER_FILES}
        for name, model in sorted(ctx.spec.models.items()):
            source, inputs, files = lower_source(ctx, model)
            out.append(self.action(f"{self.kind}/{name}", TokenizerParams(model=name, source=source),
                                   inputs={r: d for r, d in inputs.items() if r in keep},
                                   needs=() if source.path else ("network",),
                                   files={r: p for r, p in files.items() if r in keep}))
        return out

    def missing(self, params: TokenizerParams, needs, builder) -> list[str]:
        return source_needs(params.source, builder)

    def run(self, params: TokenizerParams, ctx: RunContext) -> None:
        if params.source.path:
            found = {role[len("source/"):]: Path(p) for role, p in ctx.files.items()}
        else:
            root = fetch_huggingface(params.source, ctx.log)
            found = {n: root / n for n in TOKENIZER_FILES if (root / n).is_file()}
        if not found:
            raise FileNotFoundError(f"model {params.model!r}: its source has no tokenizer files "
                                    f"({', '.join(TOKENIZER_FILES[:3])}, ...)")
        for name, path in sorted(found.items()):
            shutil.copyfile(path, ctx.out / name)
        ctx.log.info("tokenizer of %s: %s", params.model, ", ".join(sorted(found)))


KIND = Tokenizer()
