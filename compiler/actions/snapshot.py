"""`spec-snapshot`: the resolved spec as JSON: every value with its default filled in, the facts
resolution attached, and the digests of every input file. It reads everything, so any change
rebuilds it; reviewers and later stages diff it instead of YAML text."""

from __future__ import annotations


from compiler.catalog.serial import to_data
from compiler.graph.model import Action
from compiler.store.canonical import pretty_json

from .base import LowerContext, RunContext

KIND, VERSION = "spec-snapshot", 1


def lower(ctx: LowerContext, inputs_by_model: dict[str, dict[str, str]]) -> list[Action]:
    resolved = ctx.resolved
    params = {
        "spec": ctx.spec.model_dump(mode="json"),
        "architectures": {n: to_data(m.arch) for n, m in sorted(resolved.models.items()) if m.arch is not None},
        "gpus": {n: h.gpu.name for n, h in sorted(resolved.hosts.items()) if h.gpu is not None},
        "units": [{"id": u.id, "model": u.model, "gpus": list(u.gpu_indexes),
                   "profile": u.mig.instance.profile if u.mig else None} for u in resolved.units],
    }
    inputs = {f"{model}:{role}": d for model, roles in sorted(inputs_by_model.items()) for role, d in roles.items()}
    return [Action(KIND, KIND, VERSION, params, inputs)]


def run(params: dict, ctx: RunContext) -> None:
    (ctx.out / "resolved-spec.json").write_bytes(pretty_json(params))
    ctx.log.info("wrote resolved-spec.json (%d models)", len(params["spec"]["models"]))
