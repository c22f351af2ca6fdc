"""`host-plan`: the desired state of one host as JSON: per physical GPU its clocks, power limit and
either the model it serves or its MIG instances with explicit placements (`-cgi <id>:<start>`).
Host provisioning scripts and drift checks are generated from it; it reads only the host's own
section and its GPU's MIG facts, so a change elsewhere never disturbs a host."""

from __future__ import annotations

from compiler.capacity.placement import creation_commands, search_placement
from compiler.catalog.serial import to_data
from compiler.graph.model import Action
from compiler.store.canonical import pretty_json

from .base import LowerContext, RunContext

KIND, VERSION = "host-plan", 1


def desired_state(name: str, host, gpu) -> dict:
    """Pure: the host section plus catalog facts -> the desired state document."""
    gpus = []
    for a in host.gpus:
        clocks = a.clocks or host.clocks
        for index in a.indexes:
            entry: dict = {
                "index": index,
                "locked_clocks": None if clocks is None else {
                    "graphics_mhz": clocks.graphics_mhz if isinstance(clocks.graphics_mhz, list)
                    else [clocks.graphics_mhz, clocks.graphics_mhz],
                    "memory_mhz": clocks.memory_mhz},
                "application_clocks": None if host.application_clocks is None or a.clocks is not None else {
                    "memory_mhz": host.application_clocks.memory_mhz,
                    "graphics_mhz": host.application_clocks.graphics_mhz},
                "power_limit_w": a.power_limit_w or host.power_limit_w,
                "mig": None,
                "serves": a.serves,
                "group": list(a.indexes) if a.serves else None,
            }
            if a.mig is not None:
                profiles = [gpu.mig.profile(i.profile) for i in a.mig]
                fixed = {i: inst.placement for i, inst in enumerate(a.mig) if inst.placement is not None}
                result = search_placement(gpu.mig, profiles, fixed)
                entry["mig"] = {
                    "instances": [{"profile": p.profile.name, "profile_id": p.profile.id, "start": p.start,
                                   "serves": a.mig[p.request_index].serves, "slot": p.request_index}
                                  for p in result.placed],
                    "create": creation_commands(result),
                }
            gpus.append(entry)
    gpus.sort(key=lambda g: g["index"])
    return {"kind": "kiln.host-plan/v1", "host": name, "gpu": gpu.name, "gpu_count": host.count,
            "driver": host.driver, "persistence": host.persistence, "gpus": gpus}


def lower(ctx: LowerContext) -> list[Action]:
    out = []
    for name, rh in sorted(ctx.resolved.hosts.items()):
        gpu = rh.gpu
        params = {"host": name, "spec": rh.spec.model_dump(mode="json"),
                  "mig_profiles": [to_data(p) for p in gpu.mig.profiles],
                  "mig_geometry": {k: v for k, v in to_data(gpu.mig).items() if k != "profiles"},
                  "gpu": gpu.name}
        out.append(Action(f"{KIND}/{name}", KIND, VERSION, params))
    return out


def state_from_params(params: dict) -> dict:
    """The desired state an action with these params writes (the plan compares two of them)."""
    from compiler.catalog.serial import profile_from_data
    from compiler.catalog.types import MigGeometry
    from compiler.spec.models import Host

    host = Host.model_validate(params["spec"])
    geometry = MigGeometry(**params["mig_geometry"],
                           profiles=tuple(profile_from_data(p) for p in params["mig_profiles"]))

    class _Gpu:  # only the facts the plan reads travel in params
        name = params["gpu"]
        mig = geometry

    return desired_state(params["host"], host, _Gpu)


def run(params: dict, ctx: RunContext) -> None:
    (ctx.out / "host-plan.json").write_bytes(pretty_json(state_from_params(params)))
