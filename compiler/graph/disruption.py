"""What a change of a host's desired state does to the GPUs that serve traffic.

`disruptions(old, new)` compares two `host-plan` documents (host-plan.json) and lists, per
physical GPU, what applying the new one disrupts, so a plan can say which GPUs must be drained
first. Kinds:

  mig-reslice     GPU instances are destroyed or created, or the MIG mode changes. Destroying a
                  GPU instance needs its clients stopped; a MIG mode change needs an idle GPU
                  and may need a GPU reset. Instances that keep their profile and placement are
                  not touched by provision.sh, so a layout that only grows is listed with
                  "creates only" in its detail.
  clocks          locked or application clocks change. They are per physical GPU, shared by all
                  its MIG instances, and apply while serving.
  power           the power limit changes (applies while serving).
  serving-change  the model a GPU, a GPU instance or a tensor-parallel group serves changes, or
                  a GPU joins or leaves the plan: its containers are replaced.

Pure: no I/O. `old` is None for a host that has no previous state (everything is new).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["mig-reslice", "clocks", "power", "serving-change"]
_ORDER = {"mig-reslice": 0, "serving-change": 1, "clocks": 2, "power": 3}


@dataclass(frozen=True)
class Disruption:
    host: str
    gpu_index: int
    kind: Kind
    detail: str


def _instances(gpu: dict | None) -> dict[int, dict]:
    """Placement start -> instance, for a MIG GPU; {} otherwise."""
    if gpu is None or not gpu.get("mig"):
        return {}
    return {i["start"]: i for i in gpu["mig"]["instances"]}


def _label(inst: dict) -> str:
    return f"{inst['profile']}@{inst['start']}"


def _clock_text(gpu: dict | None) -> str:
    if gpu is None:
        return "not managed"
    parts = []
    locked, app = gpu.get("locked_clocks"), gpu.get("application_clocks")
    if locked:
        gr = locked["graphics_mhz"]
        parts.append(f"locked graphics {gr[0]}-{gr[1]} MHz" if gr[0] != gr[1] else f"locked graphics {gr[0]} MHz")
        if locked.get("memory_mhz"):
            parts.append(f"locked memory {locked['memory_mhz']} MHz")
    if app:
        parts.append(f"application clocks {app['memory_mhz']},{app['graphics_mhz']} MHz")
    return ", ".join(parts) or "not locked"


def _serving(gpu: dict | None) -> dict:
    """What the GPU serves: {placement start: model} for MIG, {"gpu": (model, group)} otherwise."""
    if gpu is None:
        return {}
    if gpu.get("mig"):
        return {i["start"]: i["serves"] for i in gpu["mig"]["instances"]}
    if gpu.get("serves"):
        return {"gpu": (gpu["serves"], tuple(gpu.get("group") or [gpu["index"]]))}
    return {}


def _serving_text(serving: dict) -> str:
    if not serving:
        return "nothing"
    if "gpu" in serving:
        model, group = serving["gpu"]
        return model if len(group) == 1 else f"{model} (GPUs {','.join(map(str, group))})"
    return ", ".join(f"{model}@{start}" for start, model in sorted(serving.items()))


def disruptions(old_state: dict | None, new_state: dict) -> list[Disruption]:
    host = new_state["host"]
    old_gpus = {g["index"]: g for g in (old_state or {}).get("gpus", [])}
    new_gpus = {g["index"]: g for g in new_state.get("gpus", [])}
    out: list[Disruption] = []
    for index in sorted(set(old_gpus) | set(new_gpus)):
        old, new = old_gpus.get(index), new_gpus.get(index)

        def add(kind: Kind, detail: str) -> None:
            out.append(Disruption(host, index, kind, detail))

        if new is None:  # provision.sh leaves GPUs outside its plan alone, but their containers go
            if _serving(old):
                add("serving-change", f"leaves the plan: stops serving {_serving_text(_serving(old))}")
            continue

        old_mig, new_mig = bool(old and old.get("mig")), bool(new.get("mig"))
        if old is not None and old_mig != new_mig:
            add("mig-reslice", f"MIG mode {'enabled' if new_mig else 'disabled'}: needs an idle GPU, "
                               "may need a GPU reset")
        elif new_mig or old_mig:
            before, after = _instances(old), _instances(new)
            kept = {s for s in before if s in after and before[s]["profile_id"] == after[s]["profile_id"]}
            destroyed = [_label(before[s]) for s in sorted(before) if s not in kept]
            created = [_label(after[s]) for s in sorted(after) if s not in kept]
            if destroyed or created:
                parts = []
                if destroyed:
                    parts.append("destroys " + ", ".join(destroyed))
                if created:
                    parts.append("creates " + ", ".join(created))
                detail = "; ".join(parts)
                if not destroyed:
                    detail = detail.replace("creates", "creates only", 1)
                add("mig-reslice", detail)

        if _serving(old) != _serving(new):
            add("serving-change", f"{_serving_text(_serving(old))} -> {_serving_text(_serving(new))}")

        if old is None or (old.get("locked_clocks"), old.get("application_clocks")) != (
                new.get("locked_clocks"), new.get("application_clocks")):
            if not (old is None and not new.get("locked_clocks") and not new.get("application_clocks")):
                add("clocks", f"{_clock_text(old)} -> {_clock_text(new)}")

        old_pl = old.get("power_limit_w") if old else None
        if old_pl != new.get("power_limit_w") and not (old is None and new.get("power_limit_w") is None):
            def watts(v: int | None) -> str:
                return "default" if v is None else f"{v} W"
            add("power", f"{watts(old_pl)} -> {watts(new.get('power_limit_w'))}")
    out.sort(key=lambda d: (d.gpu_index, _ORDER[d.kind]))
    return out
