"""STAND-IN for `triton-repo/<host>` (issue 6 items 1-3, built by another helper): the Triton model
repository of one host, one directory per model served there. Replaced at merge by the real kind;
only its output layout matters to the image: `<model>/config.pbtxt` and `<model>/1/model.yaml` at
the tree root, the tree copied to layout.REPOSITORY_DIR."""

from __future__ import annotations

from compiler.graph.model import Action

from .base import LowerContext, RunContext
from .layout import model_dir

KIND, VERSION = "triton-repo", 0


def lower(ctx: LowerContext) -> list[Action]:
    out = []
    for host in sorted(ctx.resolved.hosts):
        models = sorted({u.model for u in ctx.resolved.units if u.host == host})
        params = {"host": host, "models": {m: ctx.spec.models[m].serving.model_dump(mode="json", exclude={"ports"})
                                           for m in models}}
        out.append(Action(f"{KIND}/{host}", KIND, VERSION, params))
    return out


def run(params: dict, ctx: RunContext) -> None:
    for name, serving in sorted(params["models"].items()):
        (ctx.out / name / "1").mkdir(parents=True)
        queue = serving["max_queue_size"] or 0
        (ctx.out / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            f"dynamic_batching {{ max_queue_delay_microseconds: {serving['max_queue_delay_us']}\n"
            f"  default_queue_policy {{ max_queue_size: {queue} }} }}\n", encoding="utf-8")
        (ctx.out / name / "1" / "model.yaml").write_text(f"model: {model_dir(name)}\n", encoding="utf-8")
