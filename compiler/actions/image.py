"""`image/<host>`: build the host's serving image from `image-context/<host>` with the Docker Engine
and push it to `image.repository`; image.json records the pushed manifest digest, which the release
manifest lists. Needs a Docker daemon (`needs=("docker",)`): where none runs, the executor defers
it and run() refuses with one line.

The image is the content image built from the context, tagged locally by its Dockerfile's digest
and reused while the daemon still has it (the context only changes when weights, repository or
entrypoint do), with its config normalized (fixed times) so the same context pushes the same digest.

Its labels name its content (io.kiln.content.digest, recomputable from the image-context artifact
the manifest lists), the spec's name and the host, not the spec's digest: a spec digest label
would give the image a new digest on every spec edit, clocks or MIG layout included, and every
serving container would restart for a change that does not concern it. The spec digest ->
image digest link is in the release manifest and its provenance statement instead. Nor can the
release manifest's digest be a label: the manifest lists this image's digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

from typing import Annotated

from pydantic import Field

from compiler.graph.model import Action
from compiler.params import Effect
from compiler.store.canonical import pretty_json

from . import dockerbuild, image_context
from .base import ActionKind, Disruption, LowerContext, Params, RunContext

OUTPUT = "image.json"


class UnitGpus(Params):
    id: str
    gpus: list[int]
    # a disaggregated server's (LowerContext.additions: the host target's server_inputs): restarts
    # only when it changes; left out
    # of the parameters when empty, so an image that has none keeps its key
    inputs: str = Field(default="", exclude_if=lambda v: not v)


# provision.sh replaces a container whose image changed (restarts below words it)
_RESTARTS = Effect("restart", "provision.sh replaces each container whose image changed, but a disaggregated "
                              "server whose inputs did not (UnitGpus.inputs)", ("container-restart",))


class ImageParams(Params):
    host: Annotated[str, Effect("replace", "another host's image")]
    repository: Annotated[str, _RESTARTS]
    # the serving units whose containers run this image (their ids are in the image's entrypoint
    # already, so listing them here rebuilds nothing more): a new image restarts them
    units: Annotated[list[UnitGpus], _RESTARTS] = []
    # a node pool's: the model whose pods run it (image_context.part); left out for a host's image
    model: Annotated[str | None, Effect("replace", "another model's image")] = Field(
        default=None, exclude_if=lambda v: v is None)


def local_content_tag(host: str, context) -> str:
    """The daemon-local tag of the content image: the Dockerfile's digest, which names the base and
    (by its content-digest label) every file the layers copy."""
    digest = hashlib.sha256((context / "Dockerfile").read_bytes()).hexdigest()
    return f"kiln-content-{host}:{digest[:16]}"


def run(params: ImageParams, ctx: RunContext) -> None:
    with contextlib.closing(dockerbuild.connect()) as client:
        _build_and_push(client, params, ctx)


def _build_and_push(client, params: ImageParams, ctx: RunContext) -> None:
    host, repository = params.host, params.repository
    context = ctx.deps[f"{image_context.KIND.kind}/{image_context.part(host, params.model)}"]
    meta = json.loads((context / image_context.METADATA).read_text(encoding="utf-8"))
    content_tag = local_content_tag(host, context)
    content_hex = content_tag.rsplit(":", 1)[1]
    try:
        content_id = client.images.get(content_tag).id
        ctx.log.info("content image %s already on this daemon: %s", content_tag, content_id)
    except Exception:  # docker.errors.ImageNotFound, or an image removed meanwhile: build it
        names = ["Dockerfile"] + sorted({layer["dir"].split("/")[0] for layer in meta["layers"]})
        content_id, tar_digest = dockerbuild.build_dir(client, context, names, content_tag, ctx.log)
        ctx.log.info("built content image %s from a context tar %s", content_id, tar_digest)

    tag = f"{host}-{content_hex}"
    image_id = dockerbuild.normalize(client, content_id, meta["base"], f"{repository}:{tag}", ctx.log)
    result = dockerbuild.push(client, repository, tag, ctx.log)
    ctx.log.info("pushed %s@%s: %d layers uploaded, %d already there", repository, result.digest,
                 len(result.pushed), len(result.existing))
    attrs = client.images.get(image_id).attrs
    doc = {
        "host": host,
        "repository": repository,
        "tag": tag,
        "digest": result.digest,
        "reference": f"{repository}@{result.digest}",
        "image_id": image_id,
        "content_digest": meta["content_digest"],
        "labels": attrs["Config"]["Labels"] or {},
        "layers": attrs["RootFS"]["Layers"],
        "entrypoint": meta["entrypoint"],
        "repository_path": meta["repository"],
    }
    (ctx.out / OUTPUT).write_bytes(pretty_json(doc))


class Image(ActionKind[ImageParams]):
    kind, version, Params = "image", 2, ImageParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        return [self.action(f"{self.kind}/{image_context.part(c.params.host, c.params.model)}",
                            ImageParams(host=c.params.host, repository=ctx.spec.image.repository,
                                        # a node pool has no container of provision.sh's to restart
                                        units=[] if c.params.host in ctx.ir.pools else
                                        [_unit(ctx, u) for u in ctx.ir.host_units(c.params.host)],
                                        model=c.params.model),
                            deps=(c.id,), needs=("docker",))
                for c in image_context.KIND.lower(ctx)]

    def size(self, action: Action, ir):
        """The image carries its context's checkpoints: as much disk."""
        from compiler.ir.pools import mounts_weights

        from .sizing import image_size

        models = [] if mounts_weights(ir, action.params.host) else \
            sorted({u.model for u in ir.host_units(action.params.host)} & set(ir.models)
                   & ({action.params.model} if action.params.model else set(ir.models)))
        return image_size([ir.models[m] for m in models], f"checkpoints of {', '.join(models) or 'no model'}")

    def run(self, params: ImageParams, ctx: RunContext) -> None:
        run(params, ctx)

    def manifest_entry(self, params: ImageParams, tree) -> tuple[str, str, dict] | None:
        """The release manifest lists the image by reference and digest."""
        entry = dockerbuild.pushed_entry(tree, OUTPUT)
        return None if entry is None else ("images", image_context.part(params.host, params.model), entry)


def _unit(ctx: LowerContext, u) -> UnitGpus:
    add = ctx.additions(u.host)  # the host target: a disaggregated server's own inputs
    return UnitGpus(id=u.id, gpus=list(u.gpu_indexes), inputs=add.unit_inputs(ctx, u) if add is not None else "")


KIND = Image()


def restarts(old: ImageParams | None, new: ImageParams) -> list[Disruption]:
    """A rebuilt serving image restarts every container of the host (provision.sh replaces a
    container whose image changed), but a disaggregated server whose inputs are unchanged
    (provision.sh keeps it). Nothing restarts when no image was built before: the first one
    starts the containers. A router's restart is the host script's to say (its config)."""
    if old is None:
        return []
    out = []
    by_gpu: dict[int, list[str]] = {}
    kept = {u.id for u in old.units if u.inputs}
    for u in new.units:
        if u.inputs and u.id in kept and u in old.units:
            continue
        for g in u.gpus:
            by_gpu.setdefault(g, []).append(u.id.split("/", 1)[-1])
    for gpu, units in sorted(by_gpu.items()):
        out.append(Disruption(new.host, gpu, "container-restart",
                              f"serving image rebuilt: {', '.join(units)} restart{'s' * (len(units) == 1)}"))
    return out
