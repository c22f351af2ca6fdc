"""`spec-snapshot`: the resolved spec as JSON: every value with its default filled in, the facts
resolution attached, and the digests of every input file. It reads everything, so any change
rebuilds it; reviewers and later stages diff it instead of YAML text."""

from __future__ import annotations

from typing import Any

from compiler.catalog.serial import to_data
from compiler.graph.model import Action
from compiler.store.canonical import pretty_json
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext


class SnapshotUnit(Params):
    id: str
    model: str
    gpus: list[int]
    profile: str | None


class SnapshotParams(Params):
    effect_of_fields = BUILD_INPUT
    spec: dict[str, Any]  # the parsed spec, defaults filled in (its own JSON form)
    architectures: dict[str, dict[str, Any]]  # model -> the architecture facts resolved for it
    gpus: dict[str, str]  # host -> catalog GPU
    units: list[SnapshotUnit]


class Snapshot(ActionKind[SnapshotParams]):
    kind, version, Params = "spec-snapshot", 1, SnapshotParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        ir = ctx.ir
        params = SnapshotParams(
            spec=ctx.spec.model_dump(mode="json"),
            architectures={n: to_data(m.arch) for n, m in sorted(ir.models.items()) if m.arch is not None},
            gpus={n: h.gpu.name for n, h in sorted(ir.hosts.items()) if h.gpu is not None},
            units=[SnapshotUnit(id=u.id, model=u.model, gpus=list(u.gpu_indexes),
                                profile=u.mig.instance.profile if u.mig else None) for u in ir.units])
        inputs = {f"{model}:{role}": d for model, roles in sorted(ctx.model_inputs().items())
                  for role, d in roles.items()}
        # the cause is the spec itself: its reasons are spec paths (models.chat.quantization.weights)
        return [self.action(self.kind, params, inputs=inputs, cause=params.spec)]

    def run(self, params: SnapshotParams, ctx: RunContext) -> None:
        (ctx.out / "resolved-spec.json").write_bytes(pretty_json(params.to_json()))
        ctx.log.info("wrote resolved-spec.json (%d models)", len(params.spec["models"]))


KIND = Snapshot()
