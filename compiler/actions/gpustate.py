"""The desired state of a host's GPUs (clocks, power limit, what each serves, MIG instances with
explicit placements), computed from the host's section of the IR and the placements the analysis
found. Both deploy targets read it: the host plan writes it (compiler/targets/hosts/hostplan.py)
and a Kubernetes node pool's node layer is derived from it (compiler/targets/kubernetes/k8s_nodes.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from compiler.capacity.placement import creation_commands
from compiler.ir import ResolvedHost
from compiler.params import Effect

from .base import Params


def _absent(value: object) -> bool:
    """A role is written only under disaggregated serving, so other hosts' states stay as they were."""
    return value is None


class LockedClocks(Params):
    graphics_mhz: tuple[int, int]  # min, max (equal for a fixed lock)
    memory_mhz: int | None


class AppClocks(Params):
    memory_mhz: int
    graphics_mhz: int


class MigInstanceState(Params):
    profile: str
    profile_id: int
    start: int
    serves: str
    slot: int  # position in the spec's `mig` list
    role: str | None = Field(default=None, exclude_if=_absent)  # disaggregated serving: prefill or decode


class MigState(Params):
    instances: list[MigInstanceState]
    create: list[str]  # `<id>:<start>` in creation order


# What a change of each field does to a serving GPU (provision.sh applies the state; the host plan's
# disruptions, compiler/targets/hosts/hostplan.py, word it)
_CLOCKS = Effect("reload", "nvidia-smi -lgc/-lmc or -ac, applied while serving (shared by a GPU's MIG instances)",
                 ("clocks",))
_POWER = Effect("reload", "nvidia-smi -pl, applied while serving", ("power",))
_LAYOUT = Effect("re-layout", "GPU instances destroyed or created (their clients stopped first); a MIG mode change "
                              "needs an idle GPU and may need a reset; what the instances serve changes with them",
                 ("mig-reslice", "serving-change"))
_SERVING = Effect("restart", "the GPU's serving containers are replaced", ("serving-change",))


class GpuState(Params):
    """Each field declares what its change does to the GPU (compiler/params.py Effect)."""

    index: Annotated[int, Effect("replace", "names the GPU: another index is another GPU")]
    locked_clocks: Annotated[LockedClocks | None, _CLOCKS]
    application_clocks: Annotated[AppClocks | None, _CLOCKS]
    power_limit_w: Annotated[int | None, _POWER]
    mig: Annotated[MigState | None, _LAYOUT]
    serves: Annotated[str | None, _SERVING]
    group: Annotated[list[int] | None, _SERVING]  # the tensor/pipeline-parallel group a whole GPU belongs to
    # disaggregated serving: prefill or decode
    role: Annotated[str | None, _SERVING] = Field(default=None, exclude_if=_absent)


class HostState(Params):
    kind: Literal["kiln.host-plan/v1"] = "kiln.host-plan/v1"
    host: str
    gpu: str
    gpu_count: int
    driver: str | None
    persistence: bool
    gpus: list[GpuState]



def desired_state(host: ResolvedHost) -> HostState:
    """Pure: the host section of the IR (with its placements) -> the desired state."""
    spec = host.spec
    gpus = []
    for a_idx, a in enumerate(spec.gpus):
        clocks = a.clocks or spec.clocks
        for index in a.indexes:
            mig = None
            if a.mig is not None:
                result = host.gpu_placements[index]
                mig = MigState(instances=[MigInstanceState(profile=p.profile.name, profile_id=p.profile.id,
                                                           start=p.start, serves=a.mig[p.request_index].serves,
                                                           slot=p.request_index, role=a.mig[p.request_index].role) for p in result.placed],
                               create=creation_commands(result))
            g = clocks.graphics_mhz if clocks is not None else None
            gpus.append(GpuState(
                index=index,
                locked_clocks=None if clocks is None else LockedClocks(
                    graphics_mhz=(g[0], g[-1]) if isinstance(g, list) else (g, g), memory_mhz=clocks.memory_mhz),
                application_clocks=None if spec.application_clocks is None or a.clocks is not None else AppClocks(
                    memory_mhz=spec.application_clocks.memory_mhz, graphics_mhz=spec.application_clocks.graphics_mhz),
                power_limit_w=a.power_limit_w or spec.power_limit_w,
                mig=mig, serves=a.serves, group=list(a.indexes) if a.serves else None,
                role=a.role if a.serves else None))
    gpus.sort(key=lambda g: g.index)
    return HostState(host=host.name, gpu=host.gpu.name, gpu_count=spec.count, driver=spec.driver,
                     persistence=spec.persistence, gpus=gpus)
