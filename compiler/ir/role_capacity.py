"""The capacity of each role of a disaggregated model (pure): the servers placed, and, with
`workload.requests_per_second` and an `sla`, the servers each role needs and the prefill:decode
ratio they make. K462 (compiler/checks/disaggregated.py) warns from these figures and `kiln plan`
shows them (`roles_rows`, rendered by compiler/capacity/roles_render.py), so the two always agree.

prefill: one prompt's prefill time T (alone on the server: prefill servers run no decode) and the
time X its KV cache takes to reach a decode server (transfer_time); a server busy a fraction r of
the time makes a prompt wait r*T / (2*(1 - r)) on average (M/D/1), so TTFT = T + that wait + X
meets ttft_ms up to some r_max, and the role needs rate * T / r_max
servers. decode: the largest batch at which one server's step time meets tpot_ms (within
max_batch_size and the KV cache), and, by Little's law, rate * output_tokens * tpot sequences
running at once; the role needs that many sequences over that batch."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from compiler import deploy

from .disaggregated import ROLES, role_spec
from .passes import sizing


@dataclass(frozen=True)
class RoleFigures:
    role: str
    units: tuple[str, ...]  # the ids of the units serving the role
    placed: int  # servers placed: one per unit on a host, one per node of a node pool
    parallelism: str  # "tp4 x pp1"
    sized: bool  # the sizing reached this role (its servers have figures and an estimate case)
    need: int | None = None  # servers needed; -1: the sla cannot be met at any count; None: not sized
    note: str | None = None  # how `need` was found, one line
    # prefill: one prompt's prefill time and the busy fraction that keeps TTFT within the sla
    prompt_ms: float | None = None
    busy_max: float | None = None
    transfer_ms: float | None = None  # the prompt's KV cache to a decode server, part of TTFT
    # decode: the largest batch within tpot_ms per server, its step time, the sequences running at once
    batch: int | None = None
    step_ms: float | None = None
    running: float | None = None


@dataclass(frozen=True)
class ModelRoles:
    model: str
    rate: float | None  # workload.requests_per_second
    roles: tuple[RoleFigures, ...]

    def role(self, name: str) -> RoleFigures:
        return next(r for r in self.roles if r.role == name)

    @property
    def need(self) -> dict[str, int]:
        return {r.role: r.need for r in self.roles if r.need is not None}

    @property
    def short(self) -> list[str]:
        """The roles with fewer servers placed than needed (or an sla no count meets)."""
        have = {r.role: r.placed for r in self.roles if r.sized}
        return [r for r, n in self.need.items() if n < 0 or n > have.get(r, 0)]

    @property
    def ratio(self) -> tuple[int, int] | None:
        """The recommended prefill:decode server counts, when both roles were sized."""
        need = self.need
        if need.get("prefill", 0) > 0 and need.get("decode", 0) > 0:
            return need["prefill"], need["decode"]
        return None


def replicas(spec, unit) -> int:
    """Servers one unit stands for: one on a host, one per node of a Kubernetes node pool."""
    host = spec.hosts.get(unit.host)
    return deploy.of(host).replicas(host) if host is not None else 1


def _parallelism(m, role: str) -> str:
    p = role_spec(m, role).parallelism
    return f"tp{p.tp} x pp{p.pp}" + (f" x ep{p.ep}" if p.ep > 1 else "") + (" (attention dp)" if p.attention_dp else "")


def transfer_time(spec, ir, name: str, rm, gpu, tokens: float) -> tuple[float, str]:
    """Seconds to move one prompt's KV cache (`tokens` x the model's KV bytes per token, every layer
    and head) from a prefill to a decode server, and the link it is modelled on: within a host the
    GPUs' NVLink (or PCIe), every prefill rank sending its shard at once; across hosts or node
    pools one RDMA NIC per prefill GPU, an assumption (catalog/data/disaggregated.json
    `transfer_time`). A role-pair on one host shares its namespaces, so UCX uses cuda_ipc there."""
    from compiler.capacity.memory import kv_bytes_per_token
    from compiler.catalog import disaggregated as facts

    whole = kv_bytes_per_token(rm.arch, rm.formats.storage_kv, tp=1, pp=1) * tokens
    p = role_spec(rm.spec, "prefill").parallelism
    ranks = p.tp * p.pp
    units = [u for u in ir.units if u.model == name and u.role is not None]
    one_host = len({u.host for u in units}) == 1 and all(replicas(spec, u) == 1 for u in units)
    if one_host:
        gbps = gpu.link_gbps
        link = f"{ranks} x {gbps:g} GB/s {'NVLink' if gpu.nvlink_gbps else 'PCIe'}"
    else:
        gbps = facts.fact("transfer_time")["across_hosts_gbps"]
        link = f"{ranks} x {gbps:g} GB/s RDMA between hosts, assumed"
    return whole / (ranks * gbps * 1e9), link


def role_capacity(spec, ir, name: str) -> ModelRoles | None:
    """The roles of disaggregated model `name` (None when it is not disaggregated)."""
    from compiler.capacity.estimate import cohort_work, prefill_work
    from compiler.capacity.estimate_unit import coefficients_for, unit_case

    m = spec.models.get(name)
    if m is None or m.serving.disaggregated is None:
        return None
    w, sla = m.workload, m.sla
    rate = w.requests_per_second if w is not None else None
    rm = ir.models.get(name)
    can_size = rate is not None and sla is not None and rm is not None and rm.arch is not None \
        and rm.formats is not None
    out: list[RoleFigures] = []
    for role in ROLES:
        units = [u for u in ir.units if u.model == name and u.role == role]
        base = dict(role=role, units=tuple(u.id for u in units), placed=sum(replicas(spec, u) for u in units),
                    parallelism=_parallelism(m, role))
        sized = [u for u in units if u.figures is not None]
        if not can_size or not sized:
            can_size = False  # a role that cannot be sized stops the sizing (as K462 always did)
            out.append(RoleFigures(**base, sized=False))
            continue
        u = sized[0]
        host = ir.hosts[u.host]
        s = sizing(rm, role)
        case = unit_case(u, s, rm.arch, host.gpu, u.figures)
        if case is None:
            can_size = False
            out.append(RoleFigures(**base, sized=False))
            continue
        coef = coefficients_for(host.gpu.arch, s.weights_fmt, spec.toolchain.tensorrt_llm,
                                memory_class=host.gpu.memory_class).coefficients
        if role == "prefill":
            if sla.ttft_ms is None:
                out.append(RoleFigures(**base, sized=True))
                continue
            t = prefill_work(case.shape, case.traffic.mean_input, 0, 0.0).time(coef)
            x, link = transfer_time(spec, ir, name, rm, host.gpu, case.traffic.mean_input)
            moved = f" + {x * 1e3:,.1f} ms to move its KV cache ({link})"
            k = (sla.ttft_ms / 1e3 - x) / t  # TTFT = wait + prefill + the KV transfer
            if k <= 1:
                out.append(RoleFigures(**base, sized=True, need=-1, prompt_ms=t * 1e3, transfer_ms=x * 1e3,
                                       note=f"prefill: one prompt takes {t * 1e3:,.0f} ms alone{moved}, over "
                                            f"ttft_ms {sla.ttft_ms:g} at any server count"))
                continue
            r_max = 2 * (k - 1) / (1 + 2 * (k - 1))
            need = max(1, math.ceil(rate * t / r_max))
            out.append(RoleFigures(**base, sized=True, need=need, prompt_ms=t * 1e3, busy_max=r_max,
                                   transfer_ms=x * 1e3,
                                   note=f"prefill: {t * 1e3:,.0f} ms per prompt{moved}, busy at most {r_max:.0%} "
                                        f"for ttft_ms {sla.ttft_ms:g}: {need} server(s)"))
        else:
            if sla.tpot_ms is None:
                out.append(RoleFigures(**base, sized=True))
                continue
            limit = min(s.max_batch_size if isinstance(s.max_batch_size, int) else case.batch, case.batch)
            best, best_ms = 0, None
            b = 1
            while b <= limit:
                work = cohort_work(case.shape, b, 0.0, case.traffic.mean_output, case.traffic.decode_context)
                step_ms = work.time(coef) / work.steps * 1e3
                if step_ms > sla.tpot_ms:
                    break
                best, best_ms = b, step_ms
                b = b * 2 if b * 2 <= limit or b == limit else limit
            if best == 0:
                out.append(RoleFigures(**base, sized=True, need=-1,
                                       note=f"decode: one sequence alone steps slower than tpot_ms {sla.tpot_ms:g}"))
                continue
            running = rate * case.traffic.mean_output * sla.tpot_ms / 1e3
            need = max(1, math.ceil(running / best))
            out.append(RoleFigures(**base, sized=True, need=need, batch=best, step_ms=best_ms, running=running,
                                   note=f"decode: {running:,.1f} sequences running at once, {best} per server "
                                        f"within tpot_ms {sla.tpot_ms:g}: {need} server(s)"))
    return ModelRoles(name, rate, tuple(out))


# --- as rows for `kiln plan` (JSON data; compiler/capacity/roles_render.py renders them) ------------


def roles_pass(ir):
    """Each disaggregated model's roles, sized once: K462 and `kiln plan` read `ir.roles`."""
    roles = {name: role_capacity(ir.spec, ir, name) for name, m in ir.spec.models.items()
             if m.serving.disaggregated is not None}
    return dataclasses.replace(ir, roles=roles)


def roles_rows(ir) -> list[dict]:
    """One row (JSON data) per disaggregated model, in spec order ([] when there is none)."""
    out = []
    for name, m in ir.spec.models.items():
        sized = ir.roles.get(name)
        if sized is None:
            continue
        out.append({"model": name, "requests_per_second": sized.rate, "router": _router(ir, name, m),
                    "roles": [_role_row(r) for r in sized.roles], "short": sized.short,
                    "recommended": None if sized.ratio is None else
                    {"prefill": sized.ratio[0], "decode": sized.ratio[1]}})
    return out


def _router(ir, name: str, m) -> dict:
    d = m.serving.disaggregated
    host = ir.routers[name]
    if host is None:  # every server on node pools: Dynamo's frontend routes
        return {"host": None, "port": None, "kv_aware": d.router.kv_aware, "runs": "dynamo-frontend"}
    return {"host": host, "port": m.serving.ports.http, "kv_aware": d.router.kv_aware,
            "runs": "trtllm-serve disaggregated"}


def _role_row(r) -> dict:
    def rnd(v: float | None, n: int = 3):
        return None if v is None else round(v, n)

    per_server = None
    if r.prompt_ms is not None:
        per_server = {"prompt_ms": rnd(r.prompt_ms), "busy_max": rnd(r.busy_max, 4), "transfer_ms": rnd(r.transfer_ms),
                      "prompts_per_s": rnd(r.busy_max / (r.prompt_ms / 1e3)) if r.busy_max else None}
    elif r.batch is not None:
        per_server = {"batch": r.batch, "step_ms": rnd(r.step_ms),
                      "tokens_per_s": rnd(r.batch / (r.step_ms / 1e3)), "running": rnd(r.running)}
    return {"role": r.role, "servers": r.placed, "parallelism": r.parallelism, "units": list(r.units),
            "needed": r.need, "per_server": per_server, "basis": r.note}
