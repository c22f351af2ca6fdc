"""Derived facts of disaggregated serving that checks and emitters share (pure, from the spec):
the model as each role's servers run it, each role's KV-cache block size, the transfer buffer
both roles carry, and the router's host."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from compiler import deploy
from compiler.spec.models import Disaggregated, Model, Spec

ROLES = ("prefill", "decode")


def role_spec(m: Model, role: str) -> Model:
    """The model as one role's servers run it: the role's parallelism, and its limits, runtime
    options and attention backend where it sets them (the rest is the model's)."""
    r = m.serving.disaggregated.role(role)
    limits = {k: v for k, v in r.limits.model_dump().items() if v is not None}
    runtime = {k: v for k, v in r.runtime.model_dump().items() if v is not None and k != "overlap_scheduler"}
    kernels = {"attention": r.attention} if r.attention is not None else {}
    return m.model_copy(update={"parallelism": r.parallelism,
                                "limits": m.limits.model_copy(update=limits),
                                "runtime": m.runtime.model_copy(update=runtime),
                                "kernels": m.kernels.model_copy(update=kernels)})


@dataclass(frozen=True)
class Served:
    """One way a model's servers run it: the model itself, or one role of a disaggregated model."""

    label: str  # "model 'chat'" or "the prefill servers of model 'chat'"
    spec: Model
    where: Callable[[str, str], tuple]  # (section, field) -> the spec path the value comes from
    role: str | None = None  # the role of a disaggregated model's servers (None: not disaggregated)


def served(name: str, m: Model) -> list[Served]:
    """The model as its servers run it: itself, or under disaggregated serving each role (a role's
    value is written where the role sets it, else at the model's field). A check that walks
    these reports a value shared by both roles once, at the model's field (dedupe by path)."""
    d = m.serving.disaggregated
    if d is None:
        return [Served(f"model {name!r}", m, lambda section, field: ("models", name, section, field))]
    out = []
    for role in ROLES:
        r = d.role(role)

        def where(section: str, field: str, role=role, r=r) -> tuple:
            own = getattr(r, section, None)
            if own is not None and getattr(own, field, None) is not None:
                return ("models", name, "serving", "disaggregated", role, section, field)
            return ("models", name, section, field)

        out.append(Served(f"the {role} servers of model {name!r}", role_spec(m, role), where, role))
    return out


def tokens_per_block(m: Model, role: str) -> int:
    """The KV-cache block size of one role's servers: the role's, else the model's."""
    return role_spec(m, role).runtime.tokens_per_block


def buffer_tokens(m: Model, d: Disaggregated) -> int:
    """The max_tokens_in_buffer both roles' options carry: the spec's, or the longest prompt rounded
    up to a whole KV-cache block."""
    if d.kv_transfer.max_tokens_in_buffer is not None:
        return d.kv_transfer.max_tokens_in_buffer
    block = tokens_per_block(m, "prefill")
    return -(-m.limits.max_input_len // block) * block


def router_host(spec: Spec, name: str) -> str | None:
    """The host the router of a disaggregated model runs on (hosts target): `router.host`, else
    the first `deploy: host` host, in spec order, with a server of the model."""
    d = spec.models[name].serving.disaggregated
    if d.router.host is not None:
        return d.router.host
    for hname, host in spec.hosts.items():
        if not deploy.of(host).runs_router:
            continue
        for a in host.gpus:
            if a.serves == name or any(i.serves == name for i in a.mig or ()):
                return hname
    return None


def routers_pass(ir):
    """Where each disaggregated model's router runs, decided once (`router_host`)."""
    routers = {name: router_host(ir.spec, name) for name, m in ir.spec.models.items()
               if m.serving.disaggregated is not None}
    return dataclasses.replace(ir, routers=routers)
