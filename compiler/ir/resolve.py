"""Resolution: attach catalog facts to a parsed spec, giving the IR that the passes complete.

Pure except for reading the files a spec names (a model's config.json, a captured -lgip/-lgipp);
faults become diagnostics of the rules below, which are raised here and nowhere else, and
whatever cannot be resolved is left as None so that later passes and checks skip it.
"""

from __future__ import annotations

import json
from pathlib import Path

from compiler.catalog import (ConfigError, LgipParseError, arch_from_hf_config, gpu_from_lgip, load_gpu_catalog,
                              load_model_catalog)
from compiler.diagnostics import Diagnostic, Rule, Span
from compiler.spec.loader import Document
from compiler.spec.models import ArchitectureFile, Host, Model, Spec

from .types import MigSlot, Resolved, ResolvedHost, ResolvedModel


class UnknownGpu(Rule):
    """A host names a GPU model that is not in the catalog.

    Kiln checks MIG profiles, clocks, precision support and memory against the catalog entry, so
    the GPU must be one it knows. `kiln catalog` lists them (aliases such as `H100` resolve to the
    SXM5 80GB part; a known variant such as the H800 is pointed at its base part).
    """

    code = "K901"
    name = "unknown-gpu"


class UnknownArchitecture(Rule):
    """A model's architecture cannot be determined.

    Give a catalog name (`kiln catalog --models`), or `{config: path/to/config.json}`; a local
    source's own config.json is used when neither is given. Validation never downloads weights,
    so a Hugging Face source needs one of the two.
    """

    code = "K902"
    name = "unknown-architecture"


class ArchitectureConfigInvalid(Rule):
    """The model's config.json is missing, not JSON, or lacks a field the capacity planner needs."""

    code = "K903"
    name = "architecture-config-invalid"


class GpuProfilesInvalid(Rule):
    """The file given with `--gpu-profiles` cannot be read or is not `nvidia-smi mig -lgip` output."""

    code = "K910"
    name = "gpu-profiles-invalid"


def resolve(spec: Spec, doc: Document, base_dir: Path, gpu_profiles: Path | None = None
            ) -> tuple[Resolved, list[Diagnostic]]:
    """The IR before its passes: models with architectures, hosts with GPUs and MIG slots."""
    diags: list[Diagnostic] = []
    override_profiles = _read_profiles(gpu_profiles, diags)
    models = {name: _resolve_model(name, m, doc, base_dir, diags) for name, m in spec.models.items()}
    capture = (str(gpu_profiles), override_profiles) if override_profiles is not None else None
    hosts = {name: _resolve_host(name, h, doc, capture, diags) for name, h in spec.hosts.items()}
    return Resolved(spec, doc, base_dir, models, hosts,
                    capture=str(gpu_profiles) if gpu_profiles is not None else None), diags


def _diag(rule: type[Rule], doc: Document, path: tuple, message: str, help: str | None = None,
          key: bool = False) -> Diagnostic:
    return Diagnostic(rule.code, rule.severity, message, doc.file, doc.span_of(path, key=key), help)


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
                           "validation never downloads weights"))
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
    source = "catalog"
    if gpu is None:
        close = catalog.suggest(h.gpu)
        help = (f"did you mean {close[0]!r}? " if close else "") + "known GPUs: " + ", ".join(catalog.names)
        diags.append(_diag(UnknownGpu, doc, ("hosts", name, "gpu"), f"unknown GPU model {h.gpu!r}", help))
    elif capture is not None:
        try:
            gpu = gpu_from_lgip(capture[1], gpu)
            source = capture[0]
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
    return ResolvedHost(name, h, gpu, slots_by_assignment, gpu_source=source)
