"""K9xx: names and files the spec refers to: models, data files, GPU indexes, ports.

The references resolution itself follows (GPUs, architectures, captures: K901-K903, K910) are
raised, and defined, in compiler/ir/resolve.py.
"""

from __future__ import annotations

from typing import Iterable

from compiler import deploy
from compiler.diagnostics import Diagnostic, Severity

from .base import Check, CheckContext

class UnknownModel(Check):
    """A GPU or MIG instance `serves` a model that the spec does not define under `models`."""

    code = "K904"
    name = "unknown-model"
    order = 10

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        known = sorted(ctx.ir.models)
        set_aside = ctx.ir.set_aside.get("models", frozenset())
        for unit in ctx.ir.units:
            if unit.model not in ctx.ir.models and unit.model not in set_aside:
                yield ctx.diag(self, unit.path + ("serves",), f"`serves: {unit.model}` names no model in `models`",
                               help=_choices(unit.model, known))


class MissingFile(Check):
    """A file or directory the spec names does not exist (paths are relative to the spec file).

    Calibration data, evaluation sets and local model directories are inputs of the build; their
    content digests enter the artifacts' keys, so they must exist when the spec is validated.
    A path that leaves the spec's repository is refused before this check looks for it (K915).
    """

    code = "K905"
    name = "missing-file"
    order = 10

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in ctx.models():
            base = ("models", name)
            q = m.quantization
            for value, where, what, directory in (
                    (m.source.path, ("source", "path"), "model directory", True),
                    (q.calibration.data if q.calibration else None, ("quantization", "calibration", "data"),
                     "calibration data", False),
                    (q.quality_gate.eval if q.quality_gate else None, ("quantization", "quality_gate", "eval"),
                     "evaluation set", False)):
                if value is None or value not in ctx.ir.inputs:
                    continue  # not given, or refused by resolution (K915, K916): never looked at
                path = ctx.ir.input_path(value)
                if not (path.is_dir() if directory else path.is_file()):
                    kind = "a directory" if directory else "a file"
                    state = f"is not {kind}" if path.exists() else "does not exist"
                    yield ctx.diag(self, base + where, f"{what} {value!r} {state}",
                                   help=_nearby(value, path, directory))


def _nearby(value: str, path, directory: bool) -> str | None:
    """`did you mean 'data/calib.jsonl'?` when the folder holds a name close to the one given."""
    import difflib

    try:
        names = sorted(p.name for p in path.parent.iterdir() if (p.is_dir() if directory else p.is_file()))[:1000]
    except OSError:
        return None
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    if not close:
        return None
    head = value[: len(value) - len(path.name)] if value.endswith(path.name) else ""
    return f"did you mean {head + close[0]!r}?"


class GpuIndexInvalid(Check):
    """A GPU index is outside the host's `count`, or two `gpus` entries claim the same GPU."""

    code = "K906"
    name = "gpu-index-invalid"
    order = 10

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host in ctx.hosts():
            owner: dict[int, int] = {}
            for a_idx, a in enumerate(host.gpus):
                for pos, g in enumerate(a.indexes):
                    path = ("hosts", hname, "gpus", a_idx, "index") + ((pos,) if isinstance(a.index, list) else ())
                    if g >= host.count:
                        yield ctx.diag(self, path, f"GPU index {g} is out of range: host {hname!r} has "
                                                   f"{host.count} GPU{'s' * (host.count != 1)} (0-{host.count - 1})")
                    elif g in owner:
                        which = "this entry" if owner[g] == a_idx else f"gpus[{owner[g]}]"
                        yield ctx.diag(self, path, f"GPU {g} of host {hname!r} is already assigned by {which}",
                                       help="each physical GPU serves one whole-GPU assignment or one MIG layout")
                    else:
                        owner[g] = a_idx


class ModelNotServed(Check):
    """A model is defined but no host serves it.

    Its artifacts would still be built (a quantized checkpoint costs GPU-hours) without being
    deployed anywhere. Remove it, or assign it to a GPU or MIG instance.
    """

    code = "K907"
    name = "model-not-served"
    severity = Severity.WARNING
    order = 10

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if not ctx.ir.hosts or ctx.ir.set_aside.get("hosts"):
            return  # no hosts: the spec only builds artifacts (the CPU quickstart style); hosts set aside: unknown
        served = {u.model for u in ctx.ir.units}
        for name in ctx.ir.models:
            if name not in served:
                yield ctx.diag(self, ("models", name), f"model {name!r} is not served by any host", key=True,
                               help="assign it with `serves:` on a host's `gpus` entry or MIG instance")


class PortConflict(Check):
    """Two serving containers on one host would listen on the same port.

    Each serving unit (a MIG instance, a GPU or a tensor-parallel group) runs its own Triton
    container on the host network. The n-th replica of a model on a host (counting from 0 in GPU
    order) listens on its `serving.ports` plus 3*n, so replicas never collide with each other; the
    ports of different models on one host must not overlap after that offset. Only the ports a
    unit's runtime listens on count: trtllm-serve listens on `ports.http` only, so its unused
    gRPC and metrics numbers collide with nothing. (Hosts with `deploy: kubernetes` are exempt:
    each pod has its own network namespace.)
    """

    code = "K908"
    name = "port-conflict"
    order = 20

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host in ctx.hosts():
            if deploy.of(host).node_pool:
                continue  # each pod has a network namespace of its own
            units = [u for u in ctx.ir.units if u.host == hname and u.model in ctx.ir.models]
            # one diagnostic per pair of clashing units, naming both and every port they share
            seen: dict[int, tuple[str, str, str]] = {}  # port -> (unit id, model, kind) of its first user
            for u in units:
                clashes: dict[tuple[str, str], list[str]] = {}
                listens = _listening_kinds(ctx.model(u.model).serving.runtime)
                for kind, port in u.ports.as_dict().items():
                    if kind not in listens:
                        continue
                    first = seen.get(port)
                    if first is not None and first[0] != u.id:
                        other = "" if first[2] == kind else f" as {first[2]}"
                        clashes.setdefault(first[:2], []).append(f"{port} ({kind}{other})")
                    seen.setdefault(port, (u.id, u.model, kind))
                for (other_id, other_model), ports in clashes.items():
                    many = len(ports) > 1
                    yield ctx.diag(self, u.path + ("serves",),
                                   f"{u.id} (model {u.model!r}) and {other_id} (model {other_model!r}) on host "
                                   f"{hname!r} both listen on port{'s' if many else ''} {', '.join(ports)}",
                                   help=f"give model {u.model!r} distinct `serving.ports`; one container runs "
                                        "per serving unit")


def _listening_kinds(runtime: str) -> set[str]:
    """The ports (http, grpc, metrics) a serving runtime listens on (compiler/runtimes/data)."""
    from compiler import runtimes

    return set(runtimes.get(runtime).ports)


def _choices(value: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(value, known, n=1)
    return (f"did you mean {close[0]!r}? " if close else "") + "models: " + ", ".join(known)

