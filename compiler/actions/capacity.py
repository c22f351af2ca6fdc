"""`capacity-report`: the capacity figures of one host's serving units (`kiln plan` shows the
same), as JSON and markdown. It reads the host section, the GPU facts, and for each model served
there its quantization, limits, runtime and parallelism and architecture; nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.capacity.render import render_capacity
from compiler.capacity.report import unit_figures
from compiler.catalog.serial import arch_from_data, gpu_from_data, profile_from_data, to_data
from compiler.graph.model import Action
from compiler.spec.models import Model

from .base import LowerContext, RunContext

KIND, VERSION = "capacity-report", 1

# Exactly what the sizing reads (compiler.capacity.report): anything more would rebuild the
# report on changes that cannot move a figure (calibration data, the scheduler, ...).
_READS = {"dtype": True, "parallelism": True,
          "quantization": {"weights", "kv_cache", "exclude", "overrides", "block_size"},
          "limits": {"max_seq_len", "max_batch_size", "max_num_tokens"},
          "runtime": {"kv_cache_memory_fraction"}}


@dataclass(frozen=True)
class _Slot:
    instance_index: int
    profile: object


@dataclass(frozen=True)
class _Unit:
    id: str
    host: str
    model: str
    gpu_indexes: tuple[int, ...]
    mig: _Slot | None
    instances_on_gpu: int


def lower(ctx: LowerContext) -> list[Action]:
    out = []
    resolved = ctx.resolved
    for name, rh in sorted(resolved.hosts.items()):
        units = [u for u in resolved.units if u.host == name]
        models = sorted({u.model for u in units})
        params = {
            "host": name,
            "gpu": to_data(rh.gpu),
            "price_per_gpu_hour": rh.spec.price_per_gpu_hour,
            "units": [{"id": u.id, "model": u.model, "gpus": list(u.gpu_indexes),
                       "profile": to_data(u.mig.profile) if u.mig else None,
                       "instance": u.mig.instance_index if u.mig else None,
                       "instances_on_gpu": u.instances_on_gpu} for u in units],
            "models": {m: {"spec": ctx.spec.models[m].model_dump(mode="json", include=_READS),
                           "arch": to_data(resolved.models[m].arch)} for m in models},
        }
        out.append(Action(f"{KIND}/{name}", KIND, VERSION, params))
    return out


def run(params: dict, ctx: RunContext) -> None:
    gpu = gpu_from_data(params["gpu"])
    figures = []
    for u in params["units"]:
        m = params["models"][u["model"]]
        spec = dict(m["spec"], limits=dict(m["spec"]["limits"]))
        # max_input_len is not read by the sizing and not in the key; any value the limits accept will do.
        spec["limits"].setdefault("max_input_len", spec["limits"]["max_seq_len"])
        model = Model.model_validate({"source": {"path": "."}, **spec})
        arch = arch_from_data(m["arch"])
        slot = _Slot(u["instance"], profile_from_data(u["profile"])) if u["profile"] else None
        unit = _Unit(u["id"], params["host"], u["model"], tuple(u["gpus"]), slot, u["instances_on_gpu"])
        fig = unit_figures(unit, model, arch, gpu, params["price_per_gpu_hour"])
        figures.append((fig, model.limits.max_batch_size))
    (ctx.out / "capacity.json").write_text(render_capacity(figures, "json") + "\n", encoding="utf-8")
    (ctx.out / "capacity.md").write_text(render_capacity(figures, "markdown") + "\n", encoding="utf-8")
    ctx.log.info("%d serving units", len(figures))
