"""How a plan words what applying it disrupts (`kiln plan`, the CI's plan comment): each deploy
target's vocabulary, so the graph that computes the disruptions knows none. A disruption is one
GPU of a host, or (`gpu_index` POOL, `Disruption.pool`) a node pool as a whole; each target's
`disruptions` table (compiler/deploy/: each target's object) orders the kinds one GPU or pool lists.

Imports only the deploy targets' objects (compiler/deploy/, which import nothing): the action kinds, the build and the plan all read it, the graph
(compiler/graph/) none of it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from compiler.deploy import UNDISRUPTIVE

POOL = -1  # `gpu_index` of a disruption that concerns a host of the spec as a whole, not one of its GPUs


@dataclass(frozen=True)
class Disruption:
    """What applying an artifact does to one serving GPU of a host (drain it first), or, with
    `gpu_index` POOL, to the host as a whole. Its `kind` is the vocabulary of the deploy target that
    reports it (compiler/deploy/: each target's `disruptions`, in the order a plan lists them)."""

    host: str
    gpu_index: int
    kind: str
    detail: str

    @property
    def pool(self) -> bool:
        return self.gpu_index == POOL


# How a target words the change of one of its kinds: (old parameters or None, new parameters, the
# dependencies rebuilt since the old build, or None where that is not known) -> its disruptions.
# A dependency's new key tells what its parameters cannot: a pushed image the pods run.
Wording = Callable[[Any, Any, "frozenset[str] | None"], "list[Disruption]"]


def params_only(word: Callable[[Any, Any], list[Disruption]]) -> Wording:
    """The wording of a kind whose parameters carry all it says (its dependencies' changes are
    what consumes it to say)."""
    return lambda old, new, inputs: word(old, new)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def disrupted_phrase(items: list[Disruption]) -> str:
    """"1 host disrupted", "2 hosts and 1 node pool disrupted", "nothing disrupted" (a kind that stops
    or replaces nothing running, listed for what it changes, is not counted)."""
    items = [d for d in items if d.kind not in UNDISRUPTIVE]
    hosts = {d.host for d in items if not d.pool}
    pools = {d.host for d in items if d.pool}
    parts = ([_count(len(hosts), "host")] if hosts else []) + ([_count(len(pools), "node pool")] if pools else [])
    return " and ".join(parts) + " disrupted" if parts else "nothing disrupted"


def render_disruptions(items: list[Disruption], fmt: str) -> str:
    """Which hosts and GPUs applying the plan disrupts (drain those first), and which Kubernetes
    node pools (entries with gpu_index POOL: re-layouts, rolled workloads, replica changes)."""
    if fmt == "json":
        return json.dumps([{"host": d.host, "gpu": None if d.pool else d.gpu_index, "kind": d.kind,
                            "detail": d.detail, **({"node_pool": True} if d.pool else {})} for d in items],
                          indent=2, sort_keys=True)
    if not items:
        return "Disruption: no host or GPU changes" if fmt == "text" else "### Disruption\n\nNo host or GPU changes."
    if fmt == "markdown":
        lines = ["### Disruption", "", "| host | GPU | change | detail |", "|---|---|---|---|"]
        lines += [f"| {d.host} | {'node pool' if d.pool else d.gpu_index} | {d.kind} | "
                  f"{d.detail.replace('|', '/')} |" for d in items]
        return "\n".join(lines)
    gpus = [d for d in items if not d.pool]
    pools = {d.host for d in items if d.pool and d.kind not in UNDISRUPTIVE}
    parts = [f"{len({(d.host, d.gpu_index) for d in gpus})} GPU(s) on {len({d.host for d in gpus})} host(s)"] \
        if gpus else []
    parts += [f"{len(pools)} node pool(s)"] if pools else []
    head = "Disruption: " + ("; ".join(parts) or "none (what is listed replaces no pod)")
    lines = [head]
    lines += [f"  {d.host} (node pool): {d.kind}: {d.detail}" if d.pool else
              f"  {d.host} GPU {d.gpu_index}: {d.kind}: {d.detail}" for d in items]
    return "\n".join(lines)
