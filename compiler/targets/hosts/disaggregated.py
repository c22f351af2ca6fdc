"""Disaggregated serving on the host target's hosts, beside each server's own command (pure): the
router each host runs (`trtllm-serve disaggregated`, compiler/runtimes/trtllm_disaggregated.py),
the UCX environment of a server's container, and the digest of what a server or router reads
from the host's serving image.

That digest is how a plan understands roles. Every file of the host is in one image, so any
change gives a new image; provision.sh recreates a server or router of a disaggregated model when
its digest changes, not whenever the image does. A server's digest covers the model's spec
without the other role, the router (but whether it is KV-aware, which sets the servers' KV-cache
events) and the planner (its options file and checkpoint come from the rest), the measurement records its limits read, the toolchain, the base image and the image's
entrypoint template; the router's covers its config file, the toolchain, the base image and the
entrypoint template. A prefill-only edit then restarts the prefill servers alone, and the router
restarts only when its config does.
"""

from __future__ import annotations

import hashlib

from compiler.catalog import disaggregated as facts
from compiler.deploy.hosts import TARGET
from compiler.ir.disaggregated import ROLES
from compiler.runtimes import ROUTER, Unit
from compiler.store.canonical import canonical_json

from compiler.actions import disaggregated, llmapi
from compiler.actions.base import LowerContext, Params
from compiler.actions.image_templates import ENTRYPOINT, base_image, template_digests
from compiler.actions.runtimes import UnitServing


class HostRouter(Params):
    """The router of one disaggregated model on the host it runs on (no GPU)."""

    id: str  # "<host>/<model>-router"
    model: str
    port: int  # the model's serving.ports.http
    serving: UnitServing
    inputs: str  # digest of its config, toolchain, base image and entrypoint (restart when it changes)
    # (host, GPU) of every server of the model: a router restart interrupts the model's requests
    # on each, wherever the router runs
    interrupts: list[tuple[str, int]]


def _ours(ctx: LowerContext, host: str) -> bool:
    """Whether this target deploys `host` (the routers serve only servers it runs)."""
    return ctx.spec.hosts[host].deploy == TARGET.deploy


def _digest(value: object) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def _image_facts(ctx: LowerContext) -> dict:
    # without `image:` the operator's image is built elsewhere: its base is the toolchain's
    base = base_image(ctx.spec) if ctx.spec.image is not None else None
    return {"toolchain": ctx.spec.toolchain.model_dump(mode="json"), "base": base,
            "entrypoint": template_digests()[ENTRYPOINT]}


def is_disaggregated(ctx: LowerContext, model: str) -> bool:
    return ctx.ir.target == "llmapi" and ctx.ir.models[model].spec.serving.disaggregated is not None


def server_inputs(ctx: LowerContext, model: str, role: str) -> str:
    """Digest of what one `role` server of `model` reads beside its command."""
    # not the SLA and workload: what a server runs changes by them only through a measured record's
    # limits (`measured` below) and the roles' sizing, which changes the units themselves
    spec = ctx.spec.models[model].model_dump(mode="json", exclude={"sla", "workload"})
    d = spec["serving"]["disaggregated"]
    for other in ("router", "planner", *(r for r in ROLES if r != role)):
        d.pop(other, None)
    # a KV-aware router needs the servers' KV-cache events (their options' event buffer)
    d["kv_aware_router"] = ctx.spec.models[model].serving.disaggregated.router.kv_aware
    return _digest({"role": role, "model": spec, "measured": ctx.limit_inputs([model]), **_image_facts(ctx)})


def shares_host_namespaces(ctx: LowerContext, model: str, host: str) -> bool:
    """Whether the servers of `model` on `host` join the host's IPC and PID namespaces: when the
    host runs both a prefill and a decode server of it, so that UCX's cuda_ipc can map the peer's
    GPU memory (private namespaces send the KV cache over tcp through host memory).

    Upstream runs a host's context and generation servers as processes of one container
    (TensorRT-LLM examples/disaggregated/README.md; Dynamo launch/disagg.sh), started with
    `--ipc host`. Kiln keeps a container per server (its own GPUs, health check and restart) and
    gives them the namespaces that single container would share: they then see and can signal the
    host's processes and share its /dev/shm (catalog/data/disaggregated.json `same_host`)."""
    roles = {u.role for u in ctx.ir.units if u.model == model and u.host == host}
    return set(ROLES) <= roles


def namespace_options(options: list[str]) -> list[str]:
    """A server's docker run options in the host's IPC and PID namespaces: --shm-size, which sizes
    a private /dev/shm, has no meaning there and is dropped."""
    out, skip = [], False
    for word in options:
        if skip:
            skip = False
        elif word == "--shm-size":
            skip = True
        else:
            out.append(word)
    return list(facts.fact("same_host")["docker_options"]) + out


def environment(ctx: LowerContext, model: str) -> dict[str, str]:
    """The UCX environment of every server of a disaggregated model (disagg-options' environment.json)."""
    return disaggregated.ucx_environment(ctx.ir.models[model])


def routers(ctx: LowerContext, host: str) -> list[HostRouter]:
    """The routers `host` runs: one per disaggregated model whose router host it is, in model order."""
    out = []
    for model in sorted(ctx.ir.models):
        if not is_disaggregated(ctx, model) or ctx.ir.routers[model] != host:
            continue
        if not any(u.model == model and _ours(ctx, u.host) for u in ctx.ir.units):
            continue  # no server on hosts: no config (disagg-options writes none)
        port = ctx.ir.models[model].spec.serving.ports.http
        serving = ROUTER.serve(Unit(model=model, target=ctx.ir.target, ports={"http": port}))
        config = disaggregated.server_config(ctx.ir, model)
        servers = {(u.host, g) for u in ctx.ir.units
                   if u.model == model and _ours(ctx, u.host) for g in u.gpu_indexes}
        out.append(HostRouter(id=f"{host}/{model}-router", model=model, port=port, serving=serving,
                              inputs=_digest({"config": config, **_image_facts(ctx)}),
                              interrupts=sorted(servers)))
    return out


# --- what the host target adds to a host's serving image (compiler/actions/base.py ImageAdditions,
# registered in compiler/targets/registry.py): the common image kinds know no target -----------------
def unit_inputs(ctx: LowerContext, unit) -> str:
    """A disaggregated server's digest of what it reads (provision.sh restarts it when it changes); ""."""
    return server_inputs(ctx, unit.model, unit.role) if is_disaggregated(ctx, unit.model) else ""


def carries_options(ctx: LowerContext, model: str) -> bool:
    """A disaggregated model's options come with its disaggregated files (each role's), not llmapi-options."""
    return is_disaggregated(ctx, model)


def image_files(ctx: LowerContext, host: str, host_routers) -> dict[str, tuple[str, list[str]]]:
    """Disaggregated model -> (its disagg-options action, the files of it this host's image holds):
    each role's options where a server of the role runs here, the router's config where it does."""
    files: dict[str, set[str]] = {}
    for u in ctx.ir.host_units(host):
        if is_disaggregated(ctx, u.model):
            files.setdefault(u.model, set()).add(f"{u.role}/{llmapi.OUTPUT}")
    for r in host_routers:
        files.setdefault(r.model, set()).add(disaggregated.CONFIG)
    return {m: (f"{disaggregated.KIND.kind}/{m}", sorted(f)) for m, f in sorted(files.items())}
