"""`triton-repo`: the Triton model repository of one host (the tree an image copies to
/opt/kiln/repository), for the spec's target: `llmapi` (one LLM-API model per served model) or
`engine` (the five-model inflight_batcher_llm pipeline per served model).

The files come from compiler.serving.triton (pure: parameters -> files); this module adds what
other actions produced: the LLM-API options (`llmapi-options/<model>`, as `<model>/1/model.yaml`)
and the tokenizer files (`tokenizer/<model>`, from the model's source, not its checkpoint: a new
quantization leaves the repository alone), so the repository carries the tokenizer its Python
models load. Before anything is written, every config.pbtxt is parsed with Triton's own schema
and the repository is checked against Triton's cross-model rules (compiler.serving.rules); a
repository Triton would refuse fails the build.

Its key covers the host's serving settings and units (not the rest of the spec), the templates,
and its dependencies: a serving-only change rebuilds this repository and never a checkpoint.
"""

from __future__ import annotations

from compiler.graph.model import Action
from compiler.runtimes import serving_image_needs
from compiler.serving import rules
from compiler.serving import triton as repo
from compiler.serving.triton import RepositoryParams

from . import image_context, llmapi, tokenizer
from .base import ActionKind, LowerContext, RunContext
from .source import TOKENIZER_FILES


class RepositoryError(Exception):
    pass


def repository_params(ctx: LowerContext, host: str) -> RepositoryParams:
    params = repo.repository_params(ctx.ir, host)
    # only the models whose runtime reads the repository: another model would sit in it without
    # any server ever loading it
    models = [m for m in params.models
              if "repository" in serving_image_needs([ctx.ir.models[m.name].spec.serving.runtime])]
    return params.model_copy(update={"models": models,
                                     "tokenizers": {m.name: f"{tokenizer.KIND.kind}/{m.name}" for m in models}})


def tokenizer_files(directory) -> list:
    """The tokenizer files at the root of a tree (a tokenizer artifact, or a model directory)."""
    return [directory / n for n in TOKENIZER_FILES if (directory / n).is_file()]


class TritonRepo(ActionKind[RepositoryParams]):
    kind, version, Params = "triton-repo", 2, RepositoryParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        out = []
        for host in sorted(ctx.ir.hosts):
            whole = repository_params(ctx, host)
            if not whole.models:
                continue  # a host that serves nothing has no repository
            # a node pool's pods each load their own model (--load-model), from their model's serving
            # image (image_context.parts): one repository per model, so that another model joining,
            # leaving or changing rebuilds no image this model's pods run
            parts = ([(image_context.part(host, m.name), whole.model_copy(update={
                "models": [m], "tokenizers": {m.name: whole.tokenizers[m.name]}})) for m in whole.models]
                if host in ctx.ir.pools else [(host, whole)])
            for name, params in parts:
                deps = []
                for m in params.models:
                    deps.append(params.tokenizers[m.name])
                    if params.target == "llmapi":
                        deps.append(f"{llmapi.KIND.kind}/{m.name}")
                out.append(self.action(f"{self.kind}/{name}", params, deps=sorted(deps),
                                       inputs=ctx.limit_inputs(m.name for m in params.models)))
        return out

    def run(self, params: RepositoryParams, ctx: RunContext) -> None:
        if repo.template_digests(params.target) != params.templates:
            raise RepositoryError("a Triton template changed after the plan was made; run the build again")
        options = _llm_options(params, ctx) if params.target == "llmapi" else None
        files = repo.render(params, options)
        for where, model in sorted(repo.tokenizer_dirs(params).items()):
            found = tokenizer_files(ctx.deps[params.tokenizers[model]])
            if not found:
                raise RepositoryError(f"the tokenizer of model {model!r} ({params.tokenizers[model]}) has no "
                                      "tokenizer files (tokenizer.json, tokenizer.model, vocab files)")
            for f in found:
                files[f"{where}/{f.name}"] = f.read_bytes()
        rules.verify_repository(files)  # nothing is written unless Triton would accept all of it
        for rel, data in sorted(files.items()):
            dest = ctx.out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        ctx.log.info("%s repository: %d models, %d files", params.target, len(params.models), len(files))


def _llm_options(params: RepositoryParams, ctx: RunContext) -> dict[str, dict]:
    from ruamel.yaml import YAML

    out = {}
    for m in params.models:
        path = ctx.deps[f"{llmapi.KIND.kind}/{m.name}"] / llmapi.OUTPUT
        out[m.name] = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    return out


KIND = TritonRepo()
