"""What disaggregated serving writes (pure): each role's LLM-API options, the servers of each role
with their addresses, and the config of TensorRT-LLM's disaggregated server
(`trtllm-serve disaggregated -c <file>`). The host runtime and the Kubernetes target render these;
the field names are the pinned TensorRT-LLM's (compiler/catalog/data/disaggregated.json and
compiler/actions/data/trtllm_llmapi.json), which tests/test_disaggregated_emit.py holds them to.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from compiler import deploy
from compiler.catalog import disaggregated as facts
from compiler.graph.model import Action
from compiler.ir import Resolved, ResolvedModel
from compiler.ir.disaggregated import ROLES, buffer_tokens
from compiler.ir.disaggregated import role_spec as _role_spec
from compiler.runtimes import FRONTEND
from compiler.serving.yamlout import dump_yaml
from compiler.store.canonical import pretty_json
from compiler.params import BUILD_INPUT

from . import llmapi
from .base import ActionKind, LowerContext, Params, RunContext

#: the disaggregated server's section per role (tensorrt_llm/llmapi/disagg_utils.py)
SECTIONS = {"prefill": "context_servers", "decode": "generation_servers"}
LISTEN = "0.0.0.0"


def role_spec(rm: ResolvedModel, role: str):
    """The model as one role's servers run it (compiler/ir/disaggregated.py)."""
    return _role_spec(rm.spec, role)


def overlap_disabled(rm: ResolvedModel, role: str, tensorrt_llm: str) -> bool:
    """Whether the role's servers run with disable_overlap_scheduler: as the spec says, else off on
    prefill where the pinned version needs it (K662) and on elsewhere."""
    said = rm.spec.serving.disaggregated.role(role).runtime.overlap_scheduler
    if said is not None:
        return not said
    return role == "prefill" and bool(facts.context_needs_overlap_off(tensorrt_llm))


def transceiver_config(rm: ResolvedModel) -> dict:
    """cache_transceiver_config, the same for both roles. The backend is always written: without
    one TensorRT-LLM disables the transfer; the buffer is always written: without one NIXL may
    fall back to a dynamic buffer and fail (catalog/data/disaggregated.json)."""
    m = rm.spec
    d = m.serving.disaggregated
    out: dict = {"backend": d.kv_transfer.backend, "max_tokens_in_buffer": buffer_tokens(m, d)}
    if d.kv_transfer.timeout_ms is not None:
        out["kv_transfer_timeout_ms"] = d.kv_transfer.timeout_ms
    return out


def role_options(rm: ResolvedModel, role: str, tensorrt_llm: str) -> dict:
    """The LLM-API options file of one role's servers (trtllm-serve --config; Dynamo's
    --extra-engine-args)."""
    spec = role_spec(rm, role)
    opts = llmapi.options(dataclasses.replace(rm, spec=spec))
    opts["cache_transceiver_config"] = transceiver_config(rm)
    if overlap_disabled(rm, role, tensorrt_llm):
        opts["disable_overlap_scheduler"] = True
    if rm.spec.serving.disaggregated.router.kv_aware:
        # the KV-aware router learns the servers' blocks from their KV-cache events, which a
        # server buffers only with an event buffer (upstream's cache-aware test configs: 1024)
        events = facts.fact("kv_events", "host")
        section, key = events["options_key"]
        opts[section][key] = events["value"]
    if role == "decode" and spec.runtime.cuda_graph_batch_sizes is None:
        opts["cuda_graph_config"] = decode_cuda_graphs(spec.limits.max_batch_size)
    return opts


def decode_cuda_graphs(max_batch_size: int) -> dict:
    """A generation server's CUDA graphs when the spec lists no sizes: captured up to the server's
    batch and padded to the next captured size, as upstream's generation-server configs capture
    them (Dynamo's decode.yaml: cuda_graph_config {max_batch_size}; catalog/data/disaggregated.json
    `decode_cuda_graphs`). Generation steps are small and memory-bound, where graphs pay most;
    prefill servers keep the model's setting (long prompts, few steps)."""
    return {"max_batch_size": max_batch_size, "enable_padding": True}


def ucx_environment(rm: ResolvedModel) -> dict[str, str]:
    """The UCX environment of every server of the model (empty: UCX's own choice), and the network
    interface whose address the cache transceiver advertises to its peers (TRTLLM_UCX_INTERFACE,
    and TRTLLM_NIXL_INTERFACE for newer NIXL builds: catalog/data/disaggregated.json `interface`)."""
    ucx = rm.spec.serving.disaggregated.kv_transfer.ucx
    env: dict[str, str] = {}
    if ucx is not None and ucx.tls is not None:
        env["UCX_TLS"] = ",".join(ucx.tls)
    if ucx is not None and ucx.net_devices is not None:
        env["UCX_NET_DEVICES"] = ",".join(ucx.net_devices)
    if ucx is not None and ucx.interface is not None:
        for name in facts.fact("interface")["env"]:
            env[name] = ucx.interface
    return env


@dataclass(frozen=True)
class Server:
    """One prefill or decode server of a model on hosts: a serving unit and where it is reached."""

    unit: str  # the serving unit's id
    host: str
    role: str
    port: int
    url: str  # host:port, as the router reaches it


def servers(ir: Resolved, model: str) -> list[Server]:
    """The model's servers on `deploy: host` hosts, prefill first, in unit order. The router reaches
    a server on its own host at localhost, one on another host by the host's name (the spec's
    host names are the machines' names on the network)."""
    where = ir.routers[model]
    out = []
    for role in ROLES:
        for u in ir.units:
            if u.model != model or u.role != role or u.ports is None \
                    or not deploy.of(ir.spec.hosts[u.host]).runs_router:
                continue
            addr = "localhost" if u.host == where else u.host
            out.append(Server(u.id, u.host, role, u.ports.http, f"{addr}:{u.ports.http}"))
    return out


def server_config(ir: Resolved, model: str) -> dict:
    """The config file of `trtllm-serve disaggregated -c` for one model on hosts."""
    rm = ir.models[model]
    m = rm.spec
    d = m.serving.disaggregated
    block = role_spec(rm, "prefill").runtime.tokens_per_block  # equal for both roles (K661)
    router: dict = {"type": "kv_cache_aware", "tokens_per_block": block} if d.router.kv_aware \
        else {"type": "round_robin"}
    config: dict = {"hostname": LISTEN, "port": m.serving.ports.http}
    listed = servers(ir, model)
    for role in ROLES:
        urls = [s.url for s in listed if s.role == role]
        args = dict(router)
        if d.router.kv_aware:
            # the router scores a server's load against its batch, its own default 64 unless the
            # section says (extract_router_config takes these keys into the router's arguments)
            lim = role_spec(rm, role).limits
            for key in facts.fact("router_load")["server_keys"]:
                args[key] = getattr(lim, key)
        config[SECTIONS[role]] = {"num_instances": len(urls), "urls": urls, "router": args}
    return config


# --- Dynamo (Kubernetes) -------------------------------------------------------------------------
def component_type(role: str) -> str:
    """A role's DGD component type (v1beta1: prefill or decode, which the planner scales)."""
    return facts.fact("dynamo")["role_component_type_v1beta1"][role]


def frontend_args(rm: ResolvedModel) -> list[str]:
    """Dynamo frontend arguments for a disaggregated model: KV-aware routing in the workers' block
    size (the frontend's own default would differ from a tokens_per_block the spec sets)."""
    kv = rm.spec.serving.disaggregated.router.kv_aware
    return FRONTEND.routing_args(role_spec(rm, "prefill").runtime.tokens_per_block if kv else None)


def planner_config(rm: ResolvedModel) -> dict:
    """The JSON the planner's --config takes: SLA-driven scaling of this model's two roles."""
    m = rm.spec
    d = m.serving.disaggregated
    p = d.planner
    gpus = {role: role_spec(rm, role).parallelism.tp * role_spec(rm, role).parallelism.pp for role in ROLES}
    config: dict = {"environment": "kubernetes", "backend": "trtllm", "mode": "disagg", "optimization_target": "sla",
                    "ttft_ms": m.sla.ttft_ms, "itl_ms": m.sla.tpot_ms, "min_endpoint": p.min_replicas,
                    "enable_throughput_scaling": True, "enable_load_scaling": True,
                    "prefill_engine_num_gpu": gpus["prefill"], "decode_engine_num_gpu": gpus["decode"]}
    if p.max_gpus is not None:
        config["max_gpu_budget"] = p.max_gpus
    if p.adjustment_interval_s is not None:
        config["throughput_adjustment_interval_seconds"] = p.adjustment_interval_s
    return config


# --- the action: `disagg-options/<model>` ---------------------------------------------------------
CONFIG = "disagg-config.yaml"  # the router's (trtllm-serve disaggregated --config_file)


class DisaggOptionsParams(Params):
    effect_of_fields = BUILD_INPUT
    model: str
    tensorrt_llm: str
    options: dict[str, dict[str, Any]]  # role -> its LLM-API options
    config: dict[str, Any] | None  # the router's config (None: the model is on no `deploy: host` host)
    environment: dict[str, str]  # UCX settings of every server of the model


class DisaggOptions(ActionKind[DisaggOptionsParams]):
    """The files of one disaggregated model: `prefill/llm-api-options.yaml` and
    `decode/llm-api-options.yaml` (each role's servers' --config) and `disagg-config.yaml` (the
    router's) with `environment.json` (the UCX settings the servers' containers get)."""

    kind, version, Params = "disagg-options", 1, DisaggOptionsParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        if ctx.ir.target != "llmapi":
            return []
        version = ctx.spec.toolchain.tensorrt_llm
        out = []
        for name, rm in sorted(ctx.ir.models.items()):
            if rm.spec.serving.disaggregated is None:
                continue
            on_hosts = any(u.model == name and deploy.of(ctx.spec.hosts[u.host]).runs_router for u in ctx.ir.units)
            params = DisaggOptionsParams(model=name, tensorrt_llm=version,
                                         options={r: role_options(rm, r, version) for r in ROLES},
                                         config=server_config(ctx.ir, name) if on_hosts else None,
                                         environment=ucx_environment(rm))
            out.append(self.action(f"{self.kind}/{name}", params, inputs=ctx.limit_inputs([name])))
        return out

    def run(self, params: DisaggOptionsParams, ctx: RunContext) -> None:
        header = (f"# {{what}} of {params.model} (TensorRT-LLM {params.tensorrt_llm}, disaggregated serving); "
                  "generated by kiln\n")
        for role, opts in sorted(params.options.items()):
            where = ctx.out / role
            where.mkdir()
            text = header.format(what=f"LLM-API options of the {role} servers") + dump_yaml(opts)
            (where / llmapi.OUTPUT).write_text(text, encoding="utf-8")
        if params.config is not None:
            text = header.format(what="trtllm-serve disaggregated config") + dump_yaml(params.config)
            (ctx.out / CONFIG).write_text(text, encoding="utf-8")
        (ctx.out / "environment.json").write_bytes(pretty_json(params.environment))


KIND = DisaggOptions()
