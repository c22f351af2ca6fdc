"""`triton-repo`: the Triton model repository of one host (the tree an image copies to
/opt/kiln/repository), for the spec's target: `llmapi` (one LLM-API model per served model) or
`engine` (the five-model inflight_batcher_llm pipeline per served model).

The files come from compiler.serving.triton (pure: parameters -> files); this module adds what
other actions produced: the LLM-API options (`llmapi-options/<model>`, as `<model>/1/model.yaml`)
and the tokenizer files (`tokenizer/<model>`, from the model's source, not its checkpoint: a new
quantization leaves the repository alone), so the repository carries the tokenizer its Python
models load. Before anything is written, every
config.pbtxt is parsed with Triton's own schema and the repository is checked against Triton's
cross-model rules (compiler.serving.rules); a repository Triton would refuse fails the build.

Its key covers the host's serving settings and units (not the rest of the spec), the templates,
and its dependencies: a serving-only change rebuilds this repository and never a checkpoint.
"""

from __future__ import annotations

from compiler.graph.model import Action
from compiler.serving import rules
from compiler.serving import triton as repo

from .base import LowerContext, RunContext
from .source import TOKENIZER_FILES
from .tokenizer import KIND as TOKENIZER

KIND, VERSION = "triton-repo", 1


class RepositoryError(Exception):
    pass


def lower(ctx: LowerContext) -> list[Action]:
    out = []
    for host in sorted(ctx.resolved.hosts):
        params = repository_params(ctx, host)
        if not params["models"]:
            continue  # a host that serves nothing has no repository
        deps = []
        for m in params["models"]:
            deps.append(f"{TOKENIZER}/{m['name']}")
            if params["target"] == "llmapi":
                deps.append(f"llmapi-options/{m['name']}")
        out.append(Action(f"{KIND}/{host}", KIND, VERSION, params, deps=tuple(sorted(deps))))
    return out


def repository_params(ctx: LowerContext, host: str) -> dict:
    params = repo.repository_params(ctx.spec, ctx.resolved, host)
    params["tokenizers"] = {m["name"]: f"{TOKENIZER}/{m['name']}" for m in params["models"]}
    # model.yaml names the TensorRT-LLM pin; the engine target's files do not show it
    params["tensorrt_llm"] = ctx.spec.toolchain.tensorrt_llm if ctx.spec.target == "llmapi" else None
    return params


def _llm_options(params: dict, ctx: RunContext) -> dict[str, dict]:
    from ruamel.yaml import YAML

    out = {}
    for m in params["models"]:
        path = ctx.deps[f"llmapi-options/{m['name']}"] / "llm-api-options.yaml"
        out[m["name"]] = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    return out


def tokenizer_files(directory) -> list:
    """The tokenizer files at the root of a tree (a tokenizer artifact, or a model directory)."""
    return [directory / n for n in TOKENIZER_FILES if (directory / n).is_file()]


def run(params: dict, ctx: RunContext) -> None:
    if repo.template_digests(params["target"]) != params["templates"]:
        raise RepositoryError("a Triton template changed after the plan was made; run the build again")
    options = _llm_options(params, ctx) if params["target"] == "llmapi" else None
    files = repo.render(params, options, params["tensorrt_llm"])
    for where, model in sorted(repo.tokenizer_dirs(params).items()):
        found = tokenizer_files(ctx.deps[params["tokenizers"][model]])
        if not found:
            raise RepositoryError(f"the tokenizer of model {model!r} ({params['tokenizers'][model]}) has no "
                                  "tokenizer files (tokenizer.json, tokenizer.model, vocab files)")
        for f in found:
            files[f"{where}/{f.name}"] = f.read_bytes()
    rules.verify_repository(files)  # nothing is written unless Triton would accept all of it
    for rel, data in sorted(files.items()):
        dest = ctx.out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    ctx.log.info("%s repository: %d models, %d files", params["target"], len(params["models"]), len(files))
