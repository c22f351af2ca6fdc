"""Disaggregated prefill/decode serving (`serving.disaggregated`): the roles, their placement, the
KV transfer and the router checked against each other and against the pinned TensorRT-LLM.

The rules take the tens digit 6 of the family each belongs to (K16x spec structure, K46x memory
and capacity, K66x kernels and runtime, K86x toolchain); no other rule uses it. MIG roles at
tp = pp = 1 are K706's (compiler/checks/parallelism.py), which reads each role's parallelism.
The facts, with their sources and the release lines they apply to, are
compiler/catalog/data/disaggregated.json.
"""

from __future__ import annotations

from typing import Iterable

from compiler import deploy
from compiler import runtimes as serving_runtimes
from compiler.catalog import disaggregated as facts
from compiler.diagnostics import Diagnostic, Rule, Severity
from compiler.spec.models import Disaggregated, Model

from compiler.ir.disaggregated import served, tokens_per_block

from .base import Check, CheckContext, once_per_entry

ROLES = ("prefill", "decode")


def _source(*fact: str) -> tuple[str]:
    """The note of a diagnostic that rests on a fact of the table: where it was read, and how sure."""
    return (f"source: {facts.source_of(*fact)}",)


def _line_source(line: facts.TransceiverLine) -> tuple[str]:
    """The note of a diagnostic that rests on a release line's transceiver facts, worded as _source's."""
    return (f"source: {line.source} [{line.status}]",)


def _dpath(name: str, *rest) -> tuple:
    return ("models", name, "serving", "disaggregated") + rest


def _disaggregated(ctx: CheckContext) -> Iterable[tuple[str, Model, Disaggregated]]:
    for name, m in ctx.models():
        if m.serving.disaggregated is not None:
            yield name, m, m.serving.disaggregated


def _role_units(ctx: CheckContext, model: str, role: str) -> list:
    return [u for u in ctx.ir.units if u.model == model and u.role == role]


def _replicas(ctx: CheckContext, unit) -> int:
    """Servers one unit stands for: one on a host, one per node of a Kubernetes node pool."""
    host = ctx.host(unit.host)
    return deploy.of(host).replicas(host) if host is not None else 1


def _attention(m: Model, d: Disaggregated, role: str) -> str:
    return d.role(role).attention or m.kernels.attention


def _tokens_per_block(m: Model, d: Disaggregated, role: str) -> int:
    return tokens_per_block(m, role)


class _DisaggregatedCheck(Check):
    """The common base of disaggregated serving's rules, K16x, K46x, K66x and K86x (no `code`: not a
    rule itself): the family's place in the order checks run and report in, said once."""

    order = 90


class DisaggregatedPlacement(_DisaggregatedCheck):
    """The GPUs of a disaggregated model do not say which role they serve, or a role has none.

    Under `serving.disaggregated`, every GPU assignment (`serves`) or MIG instance that serves the
    model names its `role: prefill` or `role: decode`; each is one server of that role (a node
    pool of N nodes runs N of it). Both roles need at least one server: the router sends every
    request to a prefill server and then to a decode server. A `role` on the GPUs of a model
    that is not disaggregated has no meaning and is refused.
    """

    code = "K161"
    name = "disaggregated-placement"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for u in once_per_entry(ctx.ir.units):
            m = ctx.model(u.model)
            if m is None:
                continue
            d = m.serving.disaggregated
            if d is not None and u.role is None:
                yield ctx.diag(self, u.path + ("serves",),
                               f"model {u.model!r} is served disaggregated, but this entry does not say which role "
                               "it serves",
                               help="add `role: prefill` or `role: decode` next to `serves`")
            elif d is None and u.role is not None:
                yield ctx.diag(self, u.path + ("role",),
                               f"`role: {u.role}` applies only to a model with `serving.disaggregated`, and model "
                               f"{u.model!r} has none",
                               help=f"remove `role`, or declare models.{u.model}.serving.disaggregated")
        for name, _m, _d in _disaggregated(ctx):
            if name in ctx.ir.set_aside.get("models", frozenset()):
                continue
            placed = {u.role for u in ctx.ir.units if u.model == name}
            if not placed:
                continue  # a model served nowhere is not this rule's business
            for role in ROLES:
                if role not in placed:
                    yield ctx.diag(self, _dpath(name), f"model {name!r} has no {role} server: no GPU assignment or "
                                   f"MIG instance serves it with `role: {role}`", key=True,
                                   help=f"give some GPUs `serves: {name}, role: {role}` in `hosts`")


class DisaggregatedRuntime(_DisaggregatedCheck):
    """Disaggregated serving is declared where the runtime cannot run it.

    The roles are LLM-API servers (context and generation servers of TensorRT-LLM): they need the
    `llmapi` target, `serving.runtime: trtllm-serve` on hosts (one `trtllm-serve` per server and
    `trtllm-serve disaggregated` in front), and `kubernetes.runtime: dynamo` on node pools
    (prefill and decode workers of a DynamoGraphDeployment, Dynamo's frontend in front). Dynamo's
    planner exists only there, and it scales the workers it finds by their component types
    (prefill and decode), so a planner needs both roles placed on node pools; it scales them
    against TTFT and ITL targets, so it needs the model's `sla` with ttft_ms and tpot_ms.
    """

    code = "K162"
    name = "disaggregated-runtime"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, d in _disaggregated(ctx):
            if ctx.target != "llmapi":
                yield ctx.diag(self, _dpath(name), "disaggregated serving needs the llmapi target "
                               f"(the spec's target is {ctx.target})", key=True,
                               help="set `target: llmapi`; TensorRT-LLM's disaggregated servers load the checkpoint")
                continue
            units = [u for u in ctx.ir.units if u.model == name]
            deploys = {deploy.of(ctx.host(u.host)) for u in units if u.host in ctx.ir.hosts}
            runtime = serving_runtimes.get(m.serving.runtime)
            if any(t.runs_router for t in deploys) and not runtime.serves_roles:
                able = [n for n, r in serving_runtimes.REGISTRY.items() if r.serves_roles]
                yield ctx.diag(self, ("models", name, "serving", "runtime"),
                               f"on hosts, disaggregated serving runs {' or '.join(able)} servers, but model "
                               f"{name!r} says runtime {m.serving.runtime}",
                               help=f"set `serving.runtime: {able[0]}`")
            k8s = ctx.ir.kubernetes
            if any(t.node_pool for t in deploys) and (k8s is None or k8s.runtime != "dynamo"):
                yield ctx.diag(self, _dpath(name), "on Kubernetes, disaggregated serving runs Dynamo prefill and "
                               "decode workers, which needs `kubernetes.runtime: dynamo`", key=True,
                               help="set kubernetes: {runtime: dynamo, dynamo: {version: ...}}")
            if d.planner is not None and (m.sla is None or m.sla.ttft_ms is None or m.sla.tpot_ms is None):
                yield ctx.diag(self, _dpath(name, "planner"), "Dynamo's planner scales the roles against TTFT and "
                               f"ITL targets, and model {name!r} has no `sla` with both ttft_ms and tpot_ms", key=True,
                               help="add sla: {ttft_ms: ..., tpot_ms: ...} to the model")
            if d.planner is not None:
                pool_roles = {u.role for u in units if u.host in ctx.ir.hosts
                              and deploy.of(ctx.host(u.host)).node_pool}
                if k8s is None or k8s.runtime != "dynamo" or not set(ROLES) <= pool_roles:
                    yield ctx.diag(self, _dpath(name, "planner"), "Dynamo's planner scales prefill and decode "
                                   "workers (component types prefill and decode) on Kubernetes: it needs "
                                   "`kubernetes.runtime: dynamo` and both roles placed on node pools", key=True,
                                   help="place both roles on `deploy: kubernetes` hosts with runtime dynamo, "
                                        "or remove `planner`",
                                   notes=_source("dynamo"))


class RouterPlacement(_DisaggregatedCheck):
    """The router of a disaggregated model cannot run where the spec puts it.

    On hosts, `trtllm-serve disaggregated` runs on `router.host` (default: the first host with a
    server of the model) and listens on the model's `serving.ports.http`; the model's servers
    start one port stride above it. `router.host` must name a `deploy: host` host, and no other
    model's server there may listen on the router's port.
    """

    code = "K163"
    name = "router-placement"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, d in _disaggregated(ctx):
            named = d.router.host
            if named is not None:
                host = ctx.host(named)
                if host is None or not deploy.of(host).runs_router:
                    why = "is not a host of the spec" if host is None else "is a Kubernetes node pool"
                    yield ctx.diag(self, _dpath(name, "router", "host"),
                                   f"router.host {named!r} {why}; the router runs on a `deploy: host` host",
                                   help=f"name one of: {', '.join(h for h, x in ctx.hosts() if deploy.of(x).runs_router) or '(none)'}")
                    continue
            where = ctx.ir.routers[name]
            if where is None:
                continue
            from .refs import _listening_kinds

            port = m.serving.ports.http
            for u in ctx.ir.units:
                if u.host != where or u.model == name or u.ports is None or u.model not in ctx.ir.models:
                    continue
                listens = _listening_kinds(ctx.model(u.model).serving.runtime)
                if port in [p for kind, p in u.ports.as_dict().items() if kind in listens]:
                    yield ctx.diag(self, ("models", name, "serving", "ports"),
                                   f"the router of model {name!r} listens on port {port} of host {where!r}, where "
                                   f"{u.id} (model {u.model!r}) listens too", key=True,
                                   help=f"give model {name!r} or {u.model!r} other `serving.ports`")
                    break


class TransferBufferTooSmall(_DisaggregatedCheck):
    """The KV-transfer buffer holds fewer tokens than the longest prompt.

    `cache_transceiver_config.max_tokens_in_buffer` sizes the buffer a prompt's KV cache is staged
    in; TensorRT-LLM's disaggregated-serving guide asks for at least the longest input sequence
    (here `limits.max_input_len`, the longest prompt a server accepts); a smaller buffer splits
    or stalls the transfer of long prompts. Leave it unset to take max_input_len.
    """

    code = "K461"
    name = "transfer-buffer-too-small"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, d in _disaggregated(ctx):
            buf = d.kv_transfer.max_tokens_in_buffer
            if buf is not None and buf < m.limits.max_input_len:
                yield ctx.diag(self, _dpath(name, "kv_transfer", "max_tokens_in_buffer"),
                               f"max_tokens_in_buffer ({buf}) is below the longest prompt (limits.max_input_len = "
                               f"{m.limits.max_input_len})",
                               help=f"raise it to {m.limits.max_input_len} or more, or leave it unset",
                               notes=_source("transceiver", "buffer"))


class TransferBufferNotBlockMultiple(_DisaggregatedCheck):
    """The KV-transfer buffer is not a whole number of KV-cache blocks.

    TensorRT-LLM's cache-transfer buffer manager sizes the buffer in blocks and refuses a
    `max_tokens_in_buffer` that is not a multiple of the KV cache's tokens_per_block. (Left
    unset, Kiln writes max_input_len rounded up to a whole block.)
    """

    code = "K463"
    name = "transfer-buffer-not-block-multiple"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, d in _disaggregated(ctx):
            buf = d.kv_transfer.max_tokens_in_buffer
            block = _tokens_per_block(m, d, "prefill")
            if buf is None or buf % block == 0:
                continue
            up = -(-buf // block) * block
            yield ctx.diag(self, _dpath(name, "kv_transfer", "max_tokens_in_buffer"),
                           f"max_tokens_in_buffer ({buf}) is not a multiple of tokens_per_block ({block})",
                           help=f"use {up}", notes=_source("transceiver", "buffer_block_multiple"))


class RoleCapacity(_DisaggregatedCheck):
    """The prefill or decode servers placed are too few for the declared arrival rate and sla.

    With `workload.requests_per_second` and an `sla`, each role is sized from the capacity
    estimate (compiler/capacity/estimate.py) of one of its servers:
    prefill: one prompt's prefill time T (alone on the server: prefill servers run no decode);
    a server busy a fraction r of the time makes a prompt wait r*T / (2*(1 - r)) on average
    (M/D/1), so TTFT = T + that wait meets ttft_ms up to some r_max, and the role needs
    rate * T / r_max servers. decode: the largest batch at which one server's step time meets
    tpot_ms (within max_batch_size and the KV cache), and, by Little's law, rate * output_tokens
    * tpot sequences running at once; the role needs that many sequences over that batch. The
    message gives both counts and the prefill:decode ratio they make. The estimate has no tail,
    so with a p99 sla the counts are a lower bound. A warning: the figures are modelled.
    """

    code = "K462"
    name = "role-capacity"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, _m, _d in _disaggregated(ctx):
            sized = ctx.ir.roles[name]
            short = sized.short
            if not short:
                continue
            ratio = (f"; recommended: {sized.ratio[0]} prefill to {sized.ratio[1]} decode"
                     if sized.ratio is not None else "")
            placed = ", ".join(f"{r.placed if r.sized else 0} {r.role}" for r in sized.roles)
            yield ctx.diag(self, _dpath(name), f"at {sized.rate:g} requests/s, model {name!r} needs more "
                           f"{' and '.join(short)} servers than placed ({placed}){ratio}", key=True,
                           help="place more servers of the short role, or lower the rate the spec declares",
                           notes=tuple(r.note for r in sized.roles if r.note is not None))


class TokensPerBlockDiffer(_DisaggregatedCheck):
    """The prefill and decode servers page the KV cache in different block sizes.

    The KV cache moves block by block from a prefill to a decode server, and a KV-aware router
    hashes prompts in blocks of the workers' tokens_per_block (`trtllm-serve disaggregated`'s
    kv_cache_aware router, Dynamo's `--kv-cache-block-size`); Kiln writes the router's block size
    from the workers', so the two roles must agree. A router whose block size differs from the
    workers' finds no prefix hits. The KV-cache format and the quantization are the model's (one
    checkpoint for both roles), so they cannot differ between the roles.
    """

    code = "K661"
    name = "tokens-per-block-differ"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m, d in _disaggregated(ctx):
            p, dec = _tokens_per_block(m, d, "prefill"), _tokens_per_block(m, d, "decode")
            if p == dec:
                continue
            role = "decode" if d.decode.runtime.tokens_per_block is not None else "prefill"
            yield ctx.diag(self, _dpath(name, role, "runtime", "tokens_per_block"),
                           f"prefill servers page the KV cache in blocks of {p} tokens, decode servers in {dec}; "
                           "the transfer and the router need one block size",
                           help="set tokens_per_block once, in the model's `runtime`, and remove the role's",
                           notes=_source("router_block_size"))


class OverlapSchedulerOnContext(_DisaggregatedCheck):
    """The prefill (context) servers run the overlap scheduler where the pinned TensorRT-LLM does
    not support it there.

    TensorRT-LLM before the 1.3 line refuses context-only requests on a PyTorch-backend server with
    the overlap scheduler ("Context only requests are not supported in pytorch backend when
    overlap is enabled"); its disaggregated examples set `disable_overlap_scheduler: true` on
    context servers. Kiln does so by default; this rule fires when the spec turns it on.
    """

    code = "K662"
    name = "overlap-scheduler-on-context"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        version = ctx.ir.toolchain.tensorrt_llm
        if not facts.context_needs_overlap_off(version):
            return
        for name, _m, d in _disaggregated(ctx):
            if d.prefill.runtime.overlap_scheduler:
                yield ctx.diag(self, _dpath(name, "prefill", "runtime", "overlap_scheduler"),
                               f"TensorRT-LLM {version} does not run the overlap scheduler on context servers "
                               "(context-only requests are refused)",
                               help="remove `overlap_scheduler: true` from the prefill role (Kiln turns it off there)",
                               notes=_source("overlap_scheduler"))


class AsymmetricTpAttention(_DisaggregatedCheck):
    """The roles use different tensor parallelism with an attention backend that gives wrong
    output when the KV cache is re-split between them.

    With tp differing between prefill and decode, the transfer splits and concatenates the KV
    cache across ranks; those kernels assume the TRTLLM attention backend's cache layout, and the
    FlashInfer backend's layout differs (TensorRT-LLM issue #6507: wrong outputs). Use the same
    tp for both roles, or the trtllm attention backend on both.
    """

    code = "K663"
    name = "asymmetric-tp-attention"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        ok = set(facts.fact("asymmetric_tp")["attention_backends_ok"])
        for name, m, d in _disaggregated(ctx):
            if d.prefill.parallelism.tp == d.decode.parallelism.tp:
                continue
            for role in ROLES:
                backend = _attention(m, d, role)
                if backend in ok:
                    continue
                path = (_dpath(name, role, "attention") if d.role(role).attention is not None
                        else ("models", name, "kernels", "attention"))
                yield ctx.diag(self, path,
                               f"prefill runs tp={d.prefill.parallelism.tp} and decode tp={d.decode.parallelism.tp}; "
                               f"the {role} servers' attention backend {backend} gives wrong output when the KV "
                               "cache is re-split between different tp",
                               help="use attention: trtllm, or the same tp for both roles",
                               notes=_source("asymmetric_tp"))


class UcxEnvironmentUnsafe(_DisaggregatedCheck):
    """The UCX environment of the KV transfer moves GPU memory wrongly or picks an arbitrary NIC.

    `ucx.tls` (UCX_TLS) without a CUDA transport (cuda, cuda_copy, cuda_ipc, or all) makes UCX
    treat GPU memory as host memory: KV transfers stage through the host or fail (an error).
    When the roles run on different hosts (or node pools of several nodes), an unset
    `ucx.net_devices` (UCX_NET_DEVICES) lets UCX pick any device, which may not reach the peer or
    not be the RDMA one: garbage tokens were reported (a warning).
    """

    code = "K664"
    name = "ucx-environment"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        cuda = set(facts.fact("ucx", "tls_needs_cuda")["cuda_transports"])
        for name, _m, d in _disaggregated(ctx):
            ucx = d.kv_transfer.ucx
            if ucx is not None and ucx.tls is not None and not cuda & set(ucx.tls):
                yield ctx.diag(self, _dpath(name, "kv_transfer", "ucx", "tls"),
                               f"UCX_TLS ({','.join(ucx.tls)}) has no CUDA transport: UCX would treat the KV "
                               "cache's GPU memory as host memory",
                               help="add cuda_copy and cuda_ipc (same host), and rc or an RDMA transport across hosts",
                               notes=_source("ucx", "tls_needs_cuda"))
            units = [u for u in ctx.ir.units if u.model == name and u.role is not None]
            hosts = {u.host for u in units}
            spread = len(hosts) > 1 or any(_replicas(ctx, u) > 1 for u in units)
            if not spread:
                continue
            unset, helps, notes = [], [], []
            if ucx is None or ucx.net_devices is None:
                unset.append("UCX_NET_DEVICES is unset: UCX may send KV traffic over a device that does not "
                             "reach the peer")
                helps.append("kv_transfer.ucx.net_devices to the RDMA devices, e.g. [mlx5_0:1]")
                notes += _source("ucx", "net_devices_across_hosts")
            if ucx is None or ucx.interface is None:
                unset.append(f"{facts.fact('interface')['env'][0]} is unset: each server advertises the address "
                             "of the first interface it finds, which may be docker0 or link-local, the same on "
                             "every node")
                helps.append("kv_transfer.ucx.interface to the interface the hosts reach each other on, e.g. eth0")
                notes += _source("interface")
            if unset:
                yield ctx.diag(self, _dpath(name, "kv_transfer"),
                               f"the servers of model {name!r} run on {_across(hosts, units, ctx)}, and "
                               + "; ".join(unset), key=True, severity=Severity.WARNING,
                               help="set " + ", and ".join(helps), notes=tuple(notes))


def _across(hosts: set[str], units: list, ctx: CheckContext) -> str:
    if len(hosts) > 1:
        return f"{len(hosts)} hosts ({', '.join(sorted(hosts))})"
    return f"the nodes of pool {next(iter(hosts))!r}"


class MpiTransferBetweenServers(_DisaggregatedCheck):
    """The KV cache is to move over MPI between servers that are not one MPI world.

    TensorRT-LLM's MPI transfer backend needs every executor process of both roles in one MPI
    world communicator, launched together by MPI. Kiln starts each prefill and decode server on
    its own (one `trtllm-serve` container per server on hosts, one Dynamo worker pod each on
    Kubernetes), so each is its own world and no KV cache would reach a decode server: no request
    completes. Use UCX or NIXL, which connect separately started servers.
    """

    code = "K665"
    name = "kv-transfer-mpi-separate-servers"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        mpi = facts.fact("mpi_backend")
        for name, _m, d in _disaggregated(ctx):
            if d.kv_transfer.backend.upper() != mpi["backend"]:
                continue
            yield ctx.diag(self, _dpath(name, "kv_transfer", "backend"),
                           f"the MPI KV-transfer backend needs both roles' servers in one MPI world, and Kiln "
                           f"starts each server of model {name!r} as its own process (a container or pod each): "
                           "no KV cache would reach a decode server",
                           help="use backend: UCX or NIXL",
                           notes=_source("mpi_backend"))


class KvRouterWithoutBlockReuse(_DisaggregatedCheck):
    """A KV-aware router routes by the servers' cached prompt blocks, and a role keeps none.

    `router.kv_aware` sends a request where the most of its prompt's KV-cache blocks are already
    held; a server with `runtime.block_reuse: false` frees a sequence's blocks when it ends, so
    there is nothing to match on it and the router only adds tokenization to least-load routing.
    Turn block reuse on for both roles, or route round robin (`kv_aware: false`).
    """

    code = "K666"
    name = "kv-router-without-block-reuse"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        seen: set[tuple] = set()
        for name, m, d in _disaggregated(ctx):
            if not d.router.kv_aware:
                continue
            for v in served(name, m):
                if v.spec.runtime.block_reuse:
                    continue
                path = v.where("runtime", "block_reuse")
                if path in seen:
                    continue
                seen.add(path)
                who = v.label if "disaggregated" in path else f"the servers of model {name!r}"
                yield ctx.diag(self, path,
                               f"the router of model {name!r} is KV-aware, but {who} run without block reuse: "
                               "they keep no prompt blocks for the router to match",
                               help="set block_reuse: true, or router: {kv_aware: false}",
                               notes=_source("kv_events", "host"))


def _transfer_backends(ctx: CheckContext):
    """(pinned TensorRT-LLM, its transceiver facts, model, the KV-transfer backend it names) of each
    disaggregated model, where the catalog knows the pinned release's transceiver."""
    version = ctx.ir.toolchain.tensorrt_llm
    line = facts.transceiver(version)
    if line is None:
        return
    for name, _m, d in _disaggregated(ctx):
        yield version, line, name, d.kv_transfer.backend


class TransportUnsupported(_DisaggregatedCheck):
    """The KV-transfer backend is not one the pinned TensorRT-LLM knows.

    `cache_transceiver_config.backend` is a closed set that changed between releases (1.2:
    DEFAULT, UCX, NIXL, MPI; 1.3 adds MOONCAKE); the LLM-API options are a strict model, so an
    unknown backend stops every server at startup. From the 1.4 line the default transceiver is
    the Python one, which runs on NIXL only: another backend is refused there too.
    """

    code = "K861"
    name = "transport-unsupported"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for version, line, name, backend in _transfer_backends(ctx):
            if backend in line.backends or backend.upper() in {b.upper() for b in line.backends}:
                needs = line.python_runtime_needs
                if needs and backend.upper() not in (needs, "DEFAULT"):
                    yield ctx.diag(self, _dpath(name, "kv_transfer", "backend"),
                                   f"TensorRT-LLM {version} transfers the KV cache with its Python transceiver by "
                                   f"default, which needs {needs}, not {backend}",
                                   help=f"use backend: {needs} (or DEFAULT)",
                                   notes=_line_source(line))
                continue
            yield ctx.diag(self, _dpath(name, "kv_transfer", "backend"),
                           f"TensorRT-LLM {version} has no KV-transfer backend {backend!r} "
                           f"(it knows {', '.join(line.backends)})",
                           help=f"use one of {', '.join(line.backends)}",
                           notes=_line_source(line))


class TransportMisspelled(_DisaggregatedCheck):
    """The KV-transfer backend is spelled otherwise than the pinned TensorRT-LLM spells it.

    The 1.0 line accepts lower-case names (ucx, nixl); 1.1 and later only upper-case ones (UCX,
    NIXL). The options file carries the backend as written, and a strict model refuses the other
    spelling at startup.
    """

    code = "K862"
    name = "transport-misspelled"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for version, line, name, backend in _transfer_backends(ctx):
            if backend in line.backends:
                continue
            spelled = [b for b in line.backends if b.upper() == backend.upper()]
            if spelled:
                yield ctx.diag(self, _dpath(name, "kv_transfer", "backend"),
                               f"TensorRT-LLM {version} spells this backend {spelled[0]!r}, not {backend!r}",
                               help=f"write backend: {spelled[0]}",
                               notes=_line_source(line))


class DisaggregatedNotBuilt(Rule):
    """Retired: no target refuses disaggregated serving any more, and nothing raises this code.

    Until both emitters existed, `kiln build` refused a disaggregated model on `deploy: host` hosts
    with this code (provision.sh did not start the role servers and the router yet). Hosts now get
    one container per prefill and decode server and the router's container (provision.sh), and
    Kubernetes a DynamoGraphDeployment. The code stays registered so `kiln explain K164` still
    answers for old outputs; it is never given to another rule.
    """

    code = "K164"
    name = "disaggregated-not-built"

