"""`host-plan`: the desired state of one host as JSON: per physical GPU its clocks, power limit and
either the model it serves or its MIG instances with explicit placements (`-cgi <id>:<start>`).
Host provisioning scripts and drift checks are generated from it.

The state is computed when the spec is lowered, from the host's section of the IR and the
placements the analysis found; it is the action's parameters, so its key changes exactly when
the state does (a price or a model's settings elsewhere never disturb a host), and comparing two
builds' parameters says what applying the new state disrupts (`disruptions`)."""

from __future__ import annotations

from typing import Annotated

from compiler.actions.base import ActionKind, Disruption, LowerContext, Params, RunContext
from compiler.actions.gpustate import GpuState, HostState, MigInstanceState, desired_state
from compiler.deploy.hosts import TARGET
from compiler.graph.model import Action
from compiler.params import Effect, changed_kinds, worded
from compiler.store.canonical import pretty_json

OUTPUT = "host-plan.json"


class HostPlanParams(Params):
    # each GPU's fields (GpuState) declare what their change does: the kinds disruptions() words
    state: Annotated[HostState, Effect("re-layout", "the GPUs' clocks, power, MIG layout and what they serve: each "
                                                    "GpuState field declares its own",
                                       ("mig-reslice", "serving-change", "clocks", "power"))]


class HostPlan(ActionKind[HostPlanParams]):
    kind, version, Params = "host-plan", 2, HostPlanParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        # Node pools (deploy: kubernetes) get the GPU Operator node layer instead (k8s-node-layer).
        return [self.action(f"{self.kind}/{name}", HostPlanParams(state=desired_state(host)),
                            cause={"hosts": {name: host.spec.model_dump(mode="json")}})
                for name, host in sorted(ctx.ir.hosts.items()) if host.spec.deploy == "host"]

    def run(self, params: HostPlanParams, ctx: RunContext) -> None:
        (ctx.out / OUTPUT).write_bytes(pretty_json(params.state.to_json()))


KIND = HostPlan()


def plan_disruptions(old: HostPlanParams | None, new: HostPlanParams) -> list[Disruption]:
    return disruptions(old.state if old is not None else None, new.state)


# --- what a change of desired state disrupts --------------------------------------------------------
# Kinds, per physical GPU:
#   mig-reslice     GPU instances are destroyed or created, or the MIG mode changes. Destroying a GPU
#                   instance needs its clients stopped; a MIG mode change needs an idle GPU and may
#                   need a GPU reset. Instances that keep their profile and placement are not touched
#                   by provision.sh, so a layout that only grows says "creates only".
#   clocks          locked or application clocks change (per physical GPU, shared by its MIG
#                   instances; applied while serving).
#   power           the power limit changes (applied while serving).
#   serving-change  the model a GPU, a GPU instance or a parallel group serves changes, or a GPU
#                   joins or leaves the plan: its containers are replaced.
# (their order: the target's `disruptions`, compiler/deploy/hosts.py)


def _instances(gpu: GpuState | None) -> dict[int, MigInstanceState]:
    """Placement start -> instance, for a MIG GPU; {} otherwise."""
    if gpu is None or gpu.mig is None:
        return {}
    return {i.start: i for i in gpu.mig.instances}


def _label(inst: MigInstanceState) -> str:
    return f"{inst.profile}@{inst.start}"


def _clock_text(gpu: GpuState | None) -> str:
    if gpu is None:
        return "not managed"
    parts = []
    locked, app = gpu.locked_clocks, gpu.application_clocks
    if locked:
        gr = locked.graphics_mhz
        parts.append(f"locked graphics {gr[0]}-{gr[1]} MHz" if gr[0] != gr[1] else f"locked graphics {gr[0]} MHz")
        if locked.memory_mhz:
            parts.append(f"locked memory {locked.memory_mhz} MHz")
    if app:
        parts.append(f"application clocks {app.memory_mhz},{app.graphics_mhz} MHz")
    return ", ".join(parts) or "not locked"


def _serving(gpu: GpuState | None) -> dict:
    """What the GPU serves: {placement start: model} for MIG, {"gpu": (model, group)} otherwise;
    a model is "model (role)" under disaggregated serving (a role change replaces the server)."""
    if gpu is None:
        return {}
    if gpu.mig is not None:
        return {i.start: _with_role(i.serves, i.role) for i in gpu.mig.instances}
    if gpu.serves:
        return {"gpu": (_with_role(gpu.serves, gpu.role), tuple(gpu.group or [gpu.index]))}
    return {}


def _reslice(old: GpuState | None, new: GpuState) -> str | None:
    """The instances destroyed and created, or the MIG mode change; None where the layout stays."""
    old_mig, new_mig = bool(old and old.mig), new.mig is not None
    if old is not None and old_mig != new_mig:
        return f"MIG mode {'enabled' if new_mig else 'disabled'}: needs an idle GPU, may need a GPU reset"
    before, after = _instances(old), _instances(new)
    kept = {s for s in before if s in after and before[s].profile_id == after[s].profile_id}
    destroyed = [_label(before[s]) for s in sorted(before) if s not in kept]
    created = [_label(after[s]) for s in sorted(after) if s not in kept]
    if not destroyed and not created:
        return None
    parts = (["destroys " + ", ".join(destroyed)] if destroyed else []) + \
        ([("creates " if destroyed else "creates only ") + ", ".join(created)] if created else [])
    return "; ".join(parts)


def _serving_change(old: GpuState | None, new: GpuState) -> str | None:
    before, after = _serving(old), _serving(new)
    return None if before == after else f"{_serving_text(before)} -> {_serving_text(after)}"


def _clocks_change(old: GpuState | None, new: GpuState) -> str:
    return f"{_clock_text(old)} -> {_clock_text(new)}"


def _power_change(old: GpuState | None, new: GpuState) -> str:
    def watts(v: int | None) -> str:
        return "default" if v is None else f"{v} W"
    return f"{watts(old.power_limit_w if old else None)} -> {watts(new.power_limit_w)}"


# how this target words each kind a GpuState field declares (compiler/actions/gpustate.py)
_WORDS = {"mig-reslice": _reslice, "serving-change": _serving_change, "clocks": _clocks_change,
          "power": _power_change}


def _with_role(model: str, role: str | None) -> str:
    return model if role is None else f"{model} ({role})"


def _serving_text(serving: dict) -> str:
    if not serving:
        return "nothing"
    if "gpu" in serving:
        model, group = serving["gpu"]
        return model if len(group) == 1 else f"{model} (GPUs {','.join(map(str, group))})"
    return ", ".join(f"{model}@{start}" for start, model in sorted(serving.items()))


def disruptions(old_state: HostState | None, new_state: HostState) -> list[Disruption]:
    """Per physical GPU, what applying `new_state` over `old_state` (None: nothing applied before)
    disrupts, so a plan can say which GPUs to drain first: the kinds its changed fields declare
    (GpuState, compiler/actions/gpustate.py), each worded here where it changes anything. Pure."""
    host = new_state.host
    old_gpus = {g.index: g for g in (old_state.gpus if old_state is not None else [])}
    new_gpus = {g.index: g for g in new_state.gpus}
    out: list[Disruption] = []
    for index in sorted(set(old_gpus) | set(new_gpus)):
        old, new = old_gpus.get(index), new_gpus.get(index)
        if new is None:  # provision.sh leaves GPUs outside its plan alone, but their containers go
            if _serving(old):
                out.append(Disruption(host, index, "serving-change",
                                      f"leaves the plan: stops serving {_serving_text(_serving(old))}"))
            continue
        out += [Disruption(host, index, kind, detail) for kind, detail in worded(changed_kinds(old, new), _WORDS, old, new)]
    out.sort(key=lambda d: (d.gpu_index, TARGET.disruptions[d.kind]))
    return out
