"""Resolution: attach catalog facts to a parsed spec and enumerate its serving units.

Pure except for reading the files a spec names (config.json, a captured -lgip); faults become
diagnostics, and whatever cannot be resolved is left as None so that later checks skip it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from compiler.catalog import (ConfigError, GpuSpec, LgipParseError, MigProfile, ModelArch, arch_from_hf_config,
                              gpu_from_lgip, load_gpu_catalog, load_model_catalog)
from compiler.checks.refs import (ArchitectureConfigInvalid, GpuProfilesInvalid, UnknownArchitecture,
                                  UnknownGpu)
from compiler.diagnostics import Diagnostic, Span
from compiler.spec.loader import Document
from compiler.spec.models import ArchitectureFile, Host, MigInstance, Model, Spec


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    spec: Model
    arch: ModelArch | None
    arch_origin: str  # "catalog", "config", or "" when unresolved


@dataclass(frozen=True)
class MigSlot:
    """One MIG instance of one physical GPU."""

    instance_index: int  # position in the `mig` list
    instance: MigInstance
    profile: MigProfile | None


@dataclass(frozen=True)
class ServingUnit:
    """What serves one model replica: a MIG instance, a GPU, or a tensor/pipeline-parallel group."""

    id: str  # e.g. "b200-a/gpu0/mig1" or "h200-node/gpu0-7"
    host: str
    model: str
    gpu_indexes: tuple[int, ...]
    mig: MigSlot | None
    path: tuple  # spec path of the assignment (or MIG instance) for diagnostics
    instances_on_gpu: int = 1  # MIG instances sharing the physical GPU
    replica: int = 0  # n-th unit of this model on this host, in GPU order (offsets its ports)


@dataclass(frozen=True)
class ResolvedHost:
    name: str
    spec: Host
    gpu: GpuSpec | None
    # assignment index -> its MIG slots (the same layout applies to each GPU the assignment lists)
    assignment_slots: dict[int, tuple[MigSlot, ...]] = field(default_factory=dict)

    def mig_gpus(self) -> dict[int, list[int]]:
        """Physical GPU index -> the MIG assignments that claim it (more than one is an error)."""
        out: dict[int, list[int]] = {}
        for a_idx in self.assignment_slots:
            for g in self.spec.gpus[a_idx].indexes:
                out.setdefault(g, []).append(a_idx)
        return out


@dataclass
class Resolved:
    models: dict[str, ResolvedModel]
    hosts: dict[str, ResolvedHost]
    units: list[ServingUnit]


def resolve(spec: Spec, doc: Document, base_dir: Path, gpu_profiles: Path | None = None
            ) -> tuple[Resolved, list[Diagnostic]]:
    diags: list[Diagnostic] = []
    override_profiles = _read_profiles(gpu_profiles, diags)
    models = {name: _resolve_model(name, m, doc, base_dir, diags) for name, m in spec.models.items()}
    capture = (str(gpu_profiles), override_profiles) if override_profiles is not None else None
    hosts = {name: _resolve_host(name, h, doc, capture, diags) for name, h in spec.hosts.items()}
    units = [u for h in hosts.values() for u in _number_replicas(_units(h))]
    return Resolved(models, hosts, units), diags


def _diag(rule, doc: Document, path: tuple, message: str, help: str | None = None, key: bool = False,
          notes: tuple[str, ...] = ()) -> Diagnostic:
    return Diagnostic(rule.code, rule.severity, message, doc.file, doc.span_of(path, key=key), help, notes)


def _read_profiles(path: Path | None, diags: list[Diagnostic]) -> str | None:
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        diags.append(Diagnostic(GpuProfilesInvalid.code, GpuProfilesInvalid.severity,
                                f"cannot read GPU profile capture: {e}", str(path), Span(1, 1)))
        return None
    return text


def _resolve_model(name: str, m: Model, doc: Document, base_dir: Path, diags: list[Diagnostic]) -> ResolvedModel:
    path = ("models", name, "architecture")
    arch_ref = m.architecture
    if isinstance(arch_ref, str):
        catalog = load_model_catalog()
        arch = catalog.get(arch_ref)
        if arch is None:
            close = catalog.suggest(arch_ref)
            help = (f"did you mean {close[0]!r}? " if close else "") + \
                "see `kiln catalog --models`, or give {config: path/to/config.json}"
            diags.append(_diag(UnknownArchitecture, doc, path, f"unknown model architecture {arch_ref!r}", help))
            return ResolvedModel(name, m, None, "")
        return ResolvedModel(name, m, arch, "catalog")
    if isinstance(arch_ref, ArchitectureFile):
        config_path, where = base_dir / arch_ref.config, path + ("config",)
    elif m.source.path is not None:
        config_path, where = base_dir / m.source.path / "config.json", ("models", name, "source", "path")
    else:
        diags.append(_diag(UnknownArchitecture, doc, ("models", name, "source"),
                           f"model {name!r} comes from Hugging Face but names no architecture",
                           "add `architecture: <catalog name>` or `architecture: {config: path/to/config.json}`; "
                           "validation never downloads weights", key=False))
        return ResolvedModel(name, m, None, "")
    if not isinstance(arch_ref, ArchitectureFile) and not config_path.parent.is_dir():
        return ResolvedModel(name, m, None, "")  # the missing model directory is reported by K905
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ConfigError("config.json is not a JSON object", "")
        arch = arch_from_hf_config(config, name)
    except FileNotFoundError:
        diags.append(_diag(ArchitectureConfigInvalid, doc, where, f"no config.json at {_rel(config_path, base_dir)}",
                           "the architecture is read from the model's config.json; give `architecture:` "
                           "or add the file"))
        return ResolvedModel(name, m, None, "")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ConfigError) as e:
        diags.append(_diag(ArchitectureConfigInvalid, doc, where,
                           f"cannot read the architecture from {_rel(config_path, base_dir)}: {e}"))
        return ResolvedModel(name, m, None, "")
    return ResolvedModel(name, m, arch, "config")


def _rel(p: Path, base: Path) -> str:
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)


def _resolve_host(name: str, h: Host, doc: Document, capture: tuple[str, str] | None,
                  diags: list[Diagnostic]) -> ResolvedHost:
    catalog = load_gpu_catalog()
    gpu = catalog.get(h.gpu)
    if gpu is None:
        close = catalog.suggest(h.gpu)
        help = (f"did you mean {close[0]!r}? " if close else "") + "known GPUs: " + ", ".join(catalog.names)
        diags.append(_diag(UnknownGpu, doc, ("hosts", name, "gpu"), f"unknown GPU model {h.gpu!r}", help))
    elif capture is not None:
        try:
            gpu = gpu_from_lgip(capture[1], gpu)
        except LgipParseError as e:
            diags.append(Diagnostic(GpuProfilesInvalid.code, GpuProfilesInvalid.severity,
                                    f"cannot parse the `nvidia-smi mig -lgip` capture: {e.message}",
                                    capture[0], Span(e.line, 1)))
    slots_by_assignment: dict[int, tuple[MigSlot, ...]] = {}
    for a_idx, assignment in enumerate(h.gpus):
        if assignment.mig is not None:
            slots_by_assignment[a_idx] = tuple(
                MigSlot(i, inst, gpu.mig.profile(inst.profile) if gpu is not None else None)
                for i, inst in enumerate(assignment.mig))
    return ResolvedHost(name, h, gpu, slots_by_assignment)


def _units(host: ResolvedHost) -> list[ServingUnit]:
    out: list[ServingUnit] = []
    for a_idx, a in enumerate(host.spec.gpus):
        idx = tuple(a.indexes)
        if a.serves is not None:
            label = f"gpu{idx[0]}" if len(idx) == 1 else f"gpu{'+'.join(map(str, idx))}"
            out.append(ServingUnit(f"{host.name}/{label}", host.name, a.serves, idx, None,
                                   ("hosts", host.name, "gpus", a_idx)))
            continue
        slots = host.assignment_slots.get(a_idx, ())
        for gpu_index in idx:
            for slot in slots:
                out.append(ServingUnit(f"{host.name}/gpu{gpu_index}/mig{slot.instance_index}", host.name,
                                       slot.instance.serves, (gpu_index,), slot,
                                       ("hosts", host.name, "gpus", a_idx, "mig", slot.instance_index),
                                       instances_on_gpu=len(slots)))
    return out


def _number_replicas(units: list[ServingUnit]) -> list[ServingUnit]:
    import dataclasses

    count: dict[str, int] = {}
    out = []
    for u in sorted(units, key=lambda u: (u.gpu_indexes, u.mig.instance_index if u.mig else -1)):
        n = count.get(u.model, 0)
        count[u.model] = n + 1
        out.append(dataclasses.replace(u, replica=n))
    return out
