"""`image-context/<host>`: the Docker build context of one host's serving image. Pure: it needs no
daemon, so it is produced on every builder; `image/<host>` builds and pushes it where Docker runs.
A node pool has one per model it serves (`image-context/<pool>/<model>`, `part`): a pool's pods
each run their own model, so its image holds that model's files alone.

Output (the context itself, usable with a plain `docker build` too):
  Dockerfile                        compiler/templates/image/Dockerfile.j2
  layers/model-<m>/opt/kiln/models/<m>/...   the checkpoint of each model served on the host (not on
                                             a node pool that mounts weights images: weights_image.py)
  layers/repository/opt/kiln/repository/...  the host's Triton model repository (triton-repo/<host>),
                                             when a model on the host is served by Triton
  layers/llmapi/opt/kiln/llmapi/<m>/llm-api-options.yaml  the LLM-API options (llmapi-options/<m>)
                                             of each model served by trtllm-serve: the file the
                                             Triton llmapi model reads as model.yaml, unchanged
  layers/llmapi/opt/kiln/llmapi/<m>/<role>/llm-api-options.yaml, .../<m>/disagg-config.yaml
                                             a disaggregated model's files (disagg-options/<m>):
                                             each role's options where its servers run here, the
                                             router's config where its router runs here
  layers/entrypoint/opt/kiln/bin/serve       compiler/templates/image/serve.sh.j2
  image-context.json                what the image action reads: base, content digest, labels, layers

Each layer directory is a tree rooted at `/` and copied with `COPY <dir>/ /`: then every directory
in the layer, `/opt` included, comes from the context with the fixed times and modes the image
action gives it, instead of being created by the builder at build time (measured: same context,
`--no-cache` rebuild, same layer digests; with `COPY dir /opt/kiln/...` the parents differ).

The content digest (a label, and the image tag) covers every file of the context but the
Dockerfile and image-context.json, so it names exactly what the layers hold.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from compiler.graph.model import Action
from compiler.ir.pools import mounts_weights
from compiler.serving import layout
from compiler.store.canonical import canonical_json, pretty_json
from compiler.params import BUILD_INPUT
from compiler.templating import only_quoted, strict_environment

from . import llmapi, runtimes
from .base import ActionKind, LowerContext, Params, RunContext, checkpoint_action_id
from .image_templates import DOCKERFILE, ENTRYPOINT, TEMPLATE_DIR, base_image, template_digests
from .runtimes import UnitServing, ir_unit_serving
from .shell import Shell, shell_quote, words

if TYPE_CHECKING:  # jinja2 loads when a template is rendered: plan and validate never need it
    from jinja2 import Environment

ENTRYPOINT_PATH = f"{layout.IMAGE_ROOT}/bin/serve"
METADATA = "image-context.json"
REPO_ACTION = "triton-repo"


class Label(str):
    """A Dockerfile value already quoted (a JSON string is a valid double-quoted Dockerfile word)."""


def _label(value: object) -> Label:
    return Label(json.dumps(str(value)))


@functools.lru_cache(maxsize=16)  # compiled templates are kept: an action per host or model
def environment(template_dir: Path = TEMPLATE_DIR) -> Environment:
    return strict_environment(template_dir, only_quoted((Shell, Label), "an image template", "|q or |label"),
                              {"q": shell_quote, "label": _label}, trim_blocks=True, lstrip_blocks=True)


class ImageUnit(Params):
    id: str
    model: str
    ports: dict[str, int]
    serving: UnitServing  # the unit's server command (the host script's) and readiness paths


class ImageContextParams(Params):
    effect_of_fields = BUILD_INPUT
    host: str
    spec_name: str
    base: str  # base image, pinned by digest
    units: list[ImageUnit]
    checkpoints: dict[str, str]  # model -> the action whose tree is its servable checkpoint
    templates: dict[str, str]
    options: dict[str, str] = {}  # model served by trtllm-serve -> its llmapi-options action
    # disaggregated model -> its disagg-options action and the files of it the host's units read
    disaggregated: dict[str, tuple[str, list[str]]] = Field(default={}, exclude_if=lambda v: not v)
    repository: bool = True  # a model on the host is served by Triton: the image carries the repository
    # a node pool's: the one model whose pods run this image (part); left out for a host's image
    model: str | None = Field(default=None, exclude_if=lambda v: v is None)


def part(host: str, model: str | None) -> str:
    """What names a serving image's actions after their kind: the host, or on a node pool the pool
    and the model (`image/<pool>/<model>`): the pods of a pool run one model each, so another model
    taking or freeing a GPU there, joining, leaving or changing its files rebuilds no image of this
    one and rolls none of its pods."""
    return host if model is None else f"{host}/{model}"


def entrypoint_context(host: str, units: list[ImageUnit]) -> dict:
    """Values of serve.sh.j2 (pure). A unit answers to its id, and to its model's name when it is
    that model's only unit on the host."""
    per_model: dict[str, int] = {}
    for u in units:
        per_model[u.model] = per_model.get(u.model, 0) + 1
    rendered = []
    for u in units:
        names = [u.id] + ([u.model] if per_model[u.model] == 1 else [])
        rendered.append({"id": u.id, "pattern": Shell(" | ".join(shell_quote(n) for n in names)), "model": u.model,
                         "command": words(u.serving.command), "files": words(u.serving.files)})
    return {"host": host, "units": rendered,
            "unit_list": Shell(" ".join(shell_quote(u.id) for u in units))}


def content_digest(root: Path, exclude: tuple[str, ...] = ("Dockerfile", METADATA)) -> str:
    """sha256 over the sorted (path, file digest, executable) of every file under `root`."""
    listing = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in exclude:
            listing.append([rel, "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest(), bool(p.stat().st_mode & 0o111)])
    return "sha256:" + hashlib.sha256(canonical_json(listing)).hexdigest()


def _copy_tree(src: Path, dest: Path) -> None:
    """Copy a materialized dependency (compiler/store/local.py materialize: regular files and
    directories only, every path inside it) into the context. A symbolic link cannot come from the
    store; one found here is refused rather than followed out of the tree."""
    for p in sorted(src.rglob("*")):
        if p.is_symlink():
            raise RuntimeError(f"{p.relative_to(src)}: a symbolic link in a dependency's tree")
        if p.is_file():
            target = dest / p.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
            target.chmod(0o755 if p.stat().st_mode & 0o111 else 0o644)


def run(params: ImageContextParams, ctx: RunContext) -> None:
    if template_digests() != params.templates:
        raise RuntimeError("an image template changed after the plan was made; run the build again")
    host, env = params.host, environment()
    layers = []
    for model, action_id in sorted(params.checkpoints.items()):
        rel = f"layers/model-{model}"
        _copy_tree(ctx.deps[action_id], ctx.out / rel / layout.model_dir(model).lstrip("/"))
        layers.append({"dir": rel, "path": layout.model_dir(model), "from": action_id})
    repo_rel = "layers/repository"
    if params.repository:
        repo = f"{REPO_ACTION}/{part(host, params.model)}"
        _copy_tree(ctx.deps[repo], ctx.out / repo_rel / layout.REPOSITORY_DIR.lstrip("/"))
        layers.append({"dir": repo_rel, "path": layout.REPOSITORY_DIR, "from": repo})
    options_rel = "layers/llmapi"
    for model, action_id in sorted(params.options.items()):
        dest = ctx.out / options_rel / runtimes.options_path(model).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ctx.deps[action_id] / llmapi.OUTPUT, dest)  # byte for byte: one artifact, two runtimes
        dest.chmod(0o644)
    for model, (action_id, files) in sorted(params.disaggregated.items()):
        for rel in files:  # <role>/llm-api-options.yaml, disagg-config.yaml
            dest = ctx.out / options_rel / layout.OPTIONS_DIR.lstrip("/") / model / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ctx.deps[action_id] / rel, dest)
            dest.chmod(0o644)
    if params.options or params.disaggregated:
        layers.append({"dir": options_rel, "path": runtimes.OPTIONS_DIR,
                       "from": sorted([*params.options.values(), *(a for a, _ in params.disaggregated.values())])})
    entry_rel = "layers/entrypoint"
    serve = ctx.out / entry_rel / ENTRYPOINT_PATH.lstrip("/")
    serve.parent.mkdir(parents=True)
    serve.write_text(env.get_template(ENTRYPOINT).render(**entrypoint_context(host, params.units)),
                     encoding="utf-8")
    serve.chmod(0o755)
    layers.append({"dir": entry_rel, "path": ENTRYPOINT_PATH, "from": "templates/image/serve.sh.j2"})

    content = content_digest(ctx.out)
    base = params.base
    labels = {
        "org.opencontainers.image.title": f"{params.spec_name}/{host}",
        "org.opencontainers.image.base.name": base,
        "org.opencontainers.image.base.digest": base.rsplit("@", 1)[1],
        "io.kiln.spec.name": params.spec_name,
        "io.kiln.host": host,
        "io.kiln.content.digest": content,
    }
    dockerfile = env.get_template(DOCKERFILE).render(
        host=Label(host), spec_name=Label(params.spec_name), base=Label(base),  # names: [a-z0-9-]
        model_layers=[{"dir": Label(layer["dir"])} for layer in layers
                      if layer["path"] not in (layout.REPOSITORY_DIR, runtimes.OPTIONS_DIR, ENTRYPOINT_PATH)],
        repository_layer=Label(repo_rel) if params.repository else None,
        options_layer=Label(options_rel) if params.options or params.disaggregated else None,
        entrypoint_layer=Label(entry_rel), entrypoint=ENTRYPOINT_PATH,
        labels={Label(k): v for k, v in labels.items()})
    (ctx.out / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    meta = {"host": host, "base": base, "content_digest": content, "labels": labels, "layers": layers,
            "entrypoint": ENTRYPOINT_PATH, "repository": layout.REPOSITORY_DIR if params.repository else None}
    (ctx.out / METADATA).write_bytes(pretty_json(meta))
    ctx.log.info("context for %s: %d layers, content %s", host, len(layers), content)


class ImageContext(ActionKind[ImageContextParams]):
    kind, version, Params = "image-context", 2, ImageContextParams

    def size(self, action: Action, ir):
        from .sizing import image_size

        models = sorted(action.params.checkpoints)
        return image_size([ir.models[m] for m in models], f"checkpoints of {', '.join(models) or 'no model'}")

    def lower(self, ctx: LowerContext) -> list[Action]:
        if ctx.spec.image is None:
            return []  # serving images only when the spec names a repository
        out = []
        digests = template_digests()
        for host in sorted(ctx.ir.hosts):
            units = [ImageUnit(id=u.id, model=u.model, ports=u.ports.as_dict(), serving=ir_unit_serving(ctx.ir, u))
                     for u in ctx.ir.host_units(host)]
            models = sorted({u.model for u in units})
            add = ctx.additions(host)  # the host target: routers and disaggregated files (node pools: the DGD's)
            routers = add.routers(ctx, host) if add is not None else []
            if not models and not routers:
                continue  # a host that serves nothing has no serving image
            # a node pool that mounts each model's weights image (weights_image.py) gets none:
            # its serving image is the runtime alone
            checkpoints = {} if mounts_weights(ctx.ir, host) else {m: checkpoint_action_id(ctx.ir, m) for m in models}
            runtime = {u.model: u.serving.runtime for u in units}
            options = {m: f"{llmapi.KIND.kind}/{m}" for m in models
                       if "options" in runtimes.serving_image_needs([runtime[m]])
                       and not (add is not None and add.carries_options(ctx, m))}
            disagg = add.image_files(ctx, host, routers) if add is not None else {}
            # a disaggregated model's role servers are never Triton models (triton-repo leaves them out)
            triton = {u.model for u in ctx.ir.host_units(host) if u.role is None
                      and "repository" in runtimes.serving_image_needs([runtime[u.model]])}
            units += [ImageUnit(id=r.id, model=r.model, ports={"http": r.port}, serving=r.serving) for r in routers]
            if host not in ctx.ir.pools:
                out.append(self._context(ctx, host, None, units, checkpoints, digests, options, disagg, triton))
                continue
            # a node pool's pods name their own command (a Deployment's container, a DGD's worker),
            # never the entrypoint's units, and load their own model: one image per model (part), so
            # another model taking or freeing one of its GPUs rebuilds none of this model's
            for m in models:
                def mine(d: dict) -> dict:
                    return {k: v for k, v in d.items() if k == m}

                out.append(self._context(ctx, host, m, [], mine(checkpoints), digests, mine(options), mine(disagg),
                                         triton & {m}))
        return out

    def _context(self, ctx: LowerContext, host: str, model: str | None, units, checkpoints, digests, options,
                 disagg, triton: set) -> Action:
        params = ImageContextParams(host=host, spec_name=ctx.spec.name, base=base_image(ctx.spec), units=units,
                                    checkpoints=checkpoints, templates=digests, options=options,
                                    repository=bool(triton), disaggregated=disagg, model=model)
        deps = sorted(set(checkpoints.values()) | set(options.values()) | {a for a, _ in disagg.values()}
                      | ({f"{REPO_ACTION}/{part(host, model)}"} if triton else set()))
        return self.action(f"{self.kind}/{part(host, model)}", params, deps=deps)

    def run(self, params: ImageContextParams, ctx: RunContext) -> None:
        run(params, ctx)


KIND = ImageContext()
