"""Derived facts of disaggregated serving that checks and emitters share (pure, from the spec):
each role's KV-cache block size, the transfer buffer both roles carry, and the router's host."""

from __future__ import annotations

from compiler.spec.models import Disaggregated, Model, Spec


def tokens_per_block(m: Model, role: str) -> int:
    """The KV-cache block size of one role's servers: the role's, else the model's."""
    return m.serving.disaggregated.role(role).runtime.tokens_per_block or m.runtime.tokens_per_block


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
        if host.deploy != "host":
            continue
        for a in host.gpus:
            if a.serves == name or any(i.serves == name for i in a.mig or ()):
                return hname
    return None
