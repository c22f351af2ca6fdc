"""The analysis passes: each adds one kind of derived fact to the IR, in a fixed order.

Every pass is a pure function `Resolved -> Resolved`. Later passes may read what earlier ones
added (capacity reads formats, units and placements); nothing after `analyse` computes these
facts again. Passes never raise for bad input and produce no diagnostics: a fact that cannot be
derived stays None, and the check that explains why reads the same IR.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable

from compiler import deploy
from compiler.capacity.placement import search_placement, search_preferring
from compiler.capacity.estimate_unit import figures_estimate
from compiler.capacity.report import Sizing, unit_figures
from compiler.capacity.workload import traffic_shape
from compiler.catalog.formats import SIXTEEN_BIT, load_format_table, normalize_activations

from .disaggregated import buffer_tokens
from .measured import batch_limit
from .types import Formats, ModuleFormat, Ports, Resolved, ResolvedHost, ResolvedModel, ServingUnit

Pass = Callable[[Resolved], Resolved]

PORT_STRIDE = 3  # replica n of a model on one host listens on its base ports + 3*n (K908)


# --- measured limits -------------------------------------------------------------------------------
def limits_pass(ir: Resolved) -> Resolved:
    """Each measured `max_batch_size` becomes a number: the record's concurrency, per attention-DP
    rank, rounded down to a CUDA-graph batch size (compiler/ir/measured.py). The number replaces the
    reference in the model's spec (and the IR's spec), so the checks, the capacity figures, the
    plan and every action read one value; the reference stays in `ResolvedModel.measured`."""
    if not any(rm.measured is not None for rm in ir.models.values()):
        return ir
    models = dict(ir.models)
    for name, rm in ir.models.items():
        if rm.measured is None:
            continue
        m = rm.spec
        ranks = m.parallelism.tp if m.parallelism.attention_dp and m.parallelism.tp > 1 else 1
        limit, how = batch_limit(rm.measured.record.result.concurrency, target=ir.target,
                                 cuda_graph_batch_sizes=m.runtime.cuda_graph_batch_sizes, ranks=ranks)
        spec = m.model_copy(update={"limits": m.limits.model_copy(update={"max_batch_size": limit})})
        models[name] = dataclasses.replace(rm, spec=spec,
                                           measured=dataclasses.replace(rm.measured, limit=limit, derivation=how))
    spec = ir.spec.model_copy(update={"models": {n: models[n].spec if n in models else m
                                                 for n, m in ir.spec.models.items()}})
    return dataclasses.replace(ir, spec=spec, models=models)


# --- formats ---------------------------------------------------------------------------------------
def formats_pass(ir: Resolved) -> Resolved:
    """Each model's effective formats from the format table (recipe row, KV row, overrides)."""
    table = load_format_table()
    models = {}
    for name, rm in ir.models.items():
        q, dtype = rm.spec.quantization, rm.spec.dtype
        quantized_weights = q.weights not in SIXTEEN_BIT
        if q.activations is not None:
            acts = q.activations
        else:
            acts = (table.default_activations(q.weights) if quantized_weights else None) or dtype
        act_quant = normalize_activations(acts) if quantized_weights else None
        recipe = table.recipe(q.weights, act_quant if quantized_weights else q.activations)
        overrides = []
        for i, o in enumerate(q.overrides):
            if o.weights is None:
                w, row = (q.weights if quantized_weights else None), recipe
            elif o.weights in SIXTEEN_BIT:
                w, row = None, table.recipe(o.weights, None)
            else:
                w, row = o.weights, table.recipe(o.weights)
            overrides.append(ModuleFormat(o.match, w, o.block_size, row, i))
        formats = Formats(dtype=dtype, weights=q.weights, activations=acts, act_quant=act_quant,
                          kv_cache=q.kv_cache, recipe=recipe, kv=table.kv(q.kv_cache), block_size=q.block_size,
                          exclude=tuple(q.exclude), overrides=tuple(overrides))
        models[name] = dataclasses.replace(rm, formats=formats)
    return dataclasses.replace(ir, models=models)


# --- serving units ---------------------------------------------------------------------------------
def units_pass(ir: Resolved) -> Resolved:
    """One unit per MIG instance, whole-GPU assignment or tensor/pipeline-parallel group; the n-th
    unit of a model on a host (in GPU order) is its replica n."""
    units: list[ServingUnit] = []
    for host in ir.hosts.values():
        units.extend(_number_replicas(_host_units(host)))
    return dataclasses.replace(ir, units=tuple(units))


def _host_units(host: ResolvedHost) -> list[ServingUnit]:
    out: list[ServingUnit] = []
    for a_idx, a in enumerate(host.spec.gpus):
        idx = tuple(a.indexes)
        if a.serves is not None:
            label = f"gpu{idx[0]}" if len(idx) == 1 else f"gpu{'+'.join(map(str, idx))}"
            out.append(ServingUnit(f"{host.name}/{label}", host.name, a.serves, idx, None,
                                   ("hosts", host.name, "gpus", a_idx), role=a.role))
            continue
        slots = host.assignment_slots.get(a_idx, ())
        for gpu_index in idx:
            for slot in slots:
                out.append(ServingUnit(f"{host.name}/gpu{gpu_index}/mig{slot.instance_index}", host.name,
                                       slot.instance.serves, (gpu_index,), slot,
                                       ("hosts", host.name, "gpus", a_idx, "mig", slot.instance_index),
                                       instances_on_gpu=len(slots), role=slot.instance.role))
    return out


def _number_replicas(units: list[ServingUnit]) -> list[ServingUnit]:
    count: dict[str, int] = {}
    out = []
    for u in sorted(units, key=lambda u: (u.gpu_indexes, u.mig.instance_index if u.mig else -1)):
        n = count.get(u.model, 0)
        count[u.model] = n + 1
        out.append(dataclasses.replace(u, replica=n))
    return out


# --- ports -----------------------------------------------------------------------------------------
def ports_pass(ir: Resolved) -> Resolved:
    """Each unit's container ports: its model's `serving.ports` plus PORT_STRIDE per replica. A
    disaggregated model's servers on a host start one stride up: its base ports are the router's,
    so clients keep the model's address (the router runs on one host; the slot stays free on all)."""
    units = []
    for u in ir.units:
        rm = ir.models.get(u.model)
        if rm is None:
            units.append(u)
            continue
        slot = u.replica
        if rm.spec.serving.disaggregated is not None and deploy.of(ir.hosts[u.host].spec).runs_router:
            slot += 1
        p, off = rm.spec.serving.ports, PORT_STRIDE * slot
        units.append(dataclasses.replace(u, ports=Ports(p.http + off, p.grpc + off, p.metrics + off)))
    return dataclasses.replace(ir, units=tuple(units))


# --- MIG placements --------------------------------------------------------------------------------
def layout_within_budget(host: ResolvedHost, a_idx: int) -> bool:
    """Whether a MIG layout's profiles all exist and its counts, instances, slices and media
    extensions fit the GPU (K202-K206 report the rest); only such layouts are placed."""
    gpu, slots = host.gpu, host.assignment_slots.get(a_idx, ())
    if gpu is None or not gpu.mig.supported or any(s.profile is None for s in slots):
        return False
    mig = gpu.mig
    counts = Counter(s.profile.name for s in slots)
    return (len(slots) <= mig.max_instances
            and sum(s.profile.compute_slices for s in slots) <= mig.compute_slices
            and sum(s.profile.has_media_extensions for s in slots) <= 1
            and all(c <= mig.profile(n).max_count for n, c in counts.items()))


def placements_pass(ir: Resolved) -> Resolved:
    """The exact placement (`-cgi <id>:<start>`) of every MIG layout that fits its budget, and per
    physical GPU the placement it gets: the layout's, keeping every instance the lock file places
    (same profile, same model) at its locked start whenever a valid placement allows it."""
    hosts = {}
    starts: dict[tuple[str, int, int], int] = {}  # (host, GPU index, instance index) -> start slot
    for name, host in ir.hosts.items():
        placements, per_gpu, moved = {}, {}, {}
        for a_idx, slots in host.assignment_slots.items():
            if not layout_within_budget(host, a_idx):
                continue
            fixed = {i: s.instance.placement for i, s in enumerate(slots) if s.instance.placement is not None}
            profiles = [s.profile for s in slots]
            result = search_placement(host.gpu.mig, profiles, fixed)
            placements[a_idx] = result
            for g in host.spec.gpus[a_idx].indexes:
                chosen = result
                preferred = _locked_starts(host.locked.get(g, ()), slots)
                if result.ok and preferred:
                    kept = search_preferring(host.gpu.mig, profiles, fixed, preferred)
                    chosen = kept.result
                    if kept.moved:
                        moved[g] = dict(kept.moved)
                per_gpu[g] = chosen
                for p in chosen.placed:
                    starts[(name, g, p.request_index)] = p.start
        hosts[name] = dataclasses.replace(host, placements=placements, gpu_placements=per_gpu, moved=moved)
    units = []
    for u in ir.units:
        if u.mig is not None:
            u = dataclasses.replace(u, mig_start=starts.get((u.host, u.gpu_indexes[0], u.mig.instance_index)))
        units.append(u)
    return dataclasses.replace(ir, hosts=hosts, units=tuple(units))


def _locked_starts(locked, slots) -> dict[int, int]:
    """Request index -> locked start, matching each instance to an unused lock entry of the same
    profile and model (in order)."""
    free = list(locked)
    out = {}
    for i, s in enumerate(slots):
        for k, entry in enumerate(free):
            if entry.profile == s.instance.profile and entry.serves == s.instance.serves:
                out[i] = entry.start
                del free[k]
                break
    return out


# --- capacity --------------------------------------------------------------------------------------
def unsizable_reason(ir: Resolved, unit: ServingUnit) -> str | None:
    """Why a unit gets no capacity figures, or None when it can be sized.

    Units whose shape is itself an error (tensor parallelism on a MIG slice, a GPU count that is
    not tp*pp) are left out: their own diagnostics say why, and figures would mislead."""
    rm = ir.models.get(unit.model)
    host = ir.hosts[unit.host]
    if rm is None or rm.arch is None or rm.formats is None:
        return "its model or architecture is unknown"
    if host.gpu is None:
        return "its GPU is unknown"
    par = rm.spec.parallelism_of(unit.role)
    group = par.tp * par.pp
    if unit.mig is not None and unit.mig.profile is None:
        return "its MIG profile is unknown"
    if unit.mig is not None and group > 1:
        return "a MIG instance cannot hold a parallel group"
    if unit.mig is None and len(unit.gpu_indexes) != group:
        return "its GPU count is not tp*pp"
    return None


def sizing(rm: ResolvedModel, role: str | None = None) -> Sizing:
    """What the capacity figures of a model's units depend on, from its effective formats and spec;
    with a role of disaggregated serving, that role's parallelism, limits and runtime options."""
    f, m = rm.formats, rm.spec
    overrides = tuple((o.match, o.weights, o.block_size) if o.weights is not None or o.block_size is None
                      else (o.match, f.storage_weights, o.block_size) for o in f.overrides)
    weights_fmt = f.storage_weights
    if f.recipe is not None and f.recipe.experts_only:  # e.g. MXFP4 W4A16: the experts only (quantize.EXPERTS)
        overrides = (("*experts*", f.weights, f.block_size),) + overrides
        weights_fmt = f.dtype
    w = m.workload
    shape = None
    if w is not None:
        def lengths(v):
            return v if isinstance(v, int) else tuple((b.tokens, b.share) for b in v)
        shape = traffic_shape(lengths(w.input_tokens), lengths(w.output_tokens))
    par = m.parallelism_of(role)
    d = m.serving.disaggregated
    r = d.role(role) if d is not None and role in ("prefill", "decode") else None

    def pick(role_value, model_value):
        return model_value if role_value is None else role_value

    return Sizing(weights_fmt=weights_fmt, kv_fmt=f.storage_kv, exclude=f.exclude, overrides=overrides,
                  block_size=f.block_size, tp=par.tp, pp=par.pp,
                  attention_dp=par.attention_dp, max_seq_len=m.limits.max_seq_len,
                  max_batch_size=pick(r and r.limits.max_batch_size, m.limits.max_batch_size),
                  max_num_tokens=pick(r and r.limits.max_num_tokens, m.limits.max_num_tokens),
                  kv_cache_memory_fraction=pick(r and r.runtime.kv_cache_memory_fraction,
                                                m.runtime.kv_cache_memory_fraction),
                  tokens_per_block=pick(r and r.runtime.tokens_per_block, m.runtime.tokens_per_block),
                  reserves_whole_request=m.runtime.scheduler == "guaranteed_no_evict", workload=shape,
                  transfer_buffer_tokens=buffer_tokens(m, d) if r is not None else 0, ep=par.ep)


def capacity_pass(ir: Resolved) -> Resolved:
    """Per-unit capacity figures: memory breakdown, KV pool, sequences, decode bound, cost."""
    units = []
    sizings: dict[tuple, Sizing] = {}
    for u in ir.units:
        why = unsizable_reason(ir, u)
        if why is not None:
            units.append(dataclasses.replace(u, unsized=why))
            continue
        rm, host = ir.models[u.model], ir.hosts[u.host]
        key = (u.model, u.role)
        if key not in sizings:
            sizings[key] = sizing(rm, u.role)
        fig = unit_figures(u, sizings[key], rm.arch, host.gpu, host.spec.price_per_gpu_hour)
        fig = dataclasses.replace(fig, estimate=unit_estimate(ir, u, sizings[key], fig))
        units.append(dataclasses.replace(u, figures=fig))
    return dataclasses.replace(ir, units=tuple(units))


def unit_estimate(ir: Resolved, u: ServingUnit, s: Sizing, fig) -> dict | None:
    """The performance estimate beside the ceiling (compiler/capacity/estimate_unit.py)."""
    rm, host = ir.models[u.model], ir.hosts[u.host]
    sla = rm.spec.sla.model_dump() if rm.spec.sla is not None else None
    return figures_estimate(u, s, rm.arch, host.gpu, fig, runtime_version=ir.spec.toolchain.tensorrt_llm,
                            price_per_gpu_hour=host.spec.price_per_gpu_hour, sla=sla)

