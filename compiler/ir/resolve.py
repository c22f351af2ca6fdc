"""Resolution: attach catalog facts to a parsed spec, giving the IR that the passes complete.

Pure except for reading the files a spec names (a model's config.json, a captured -lgip/-lgipp),
which are confined to the spec's repository first (inputs.py: K915, K916);
faults become diagnostics of the rules below, which are raised here and nowhere else, and
whatever cannot be resolved is left as None so that later passes and checks skip it.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

from compiler.catalog import (ConfigError, LgipParseError, ModelArch, arch_from_hf_config, load_gpu_catalog,
                              load_model_catalog)
from compiler.catalog.capture import Capture, CaptureMismatchError, gpu_with_capture, identify, read_capture
from compiler.diagnostics import Diagnostic, Rule, Span
from compiler.spec.loader import Document
from compiler.spec.models import ArchitectureFile, Host, MeasuredLimit, Model, Spec
from compiler.store.local import sha256_bytes

from .lockfile import (MAX_LOCK_BYTES, LockError, parse_lock, parse_lock_pods, parse_lock_surges,
                       parse_lock_workloads)
from .measured import MAX_RECORD_BYTES, Measurement, RecordError, parse_record
from .inputs import (InputRefused, InputRoots, InputUnusable, ResolvedInput, check_readable, confine, confine_path,
                     input_roots, read_regular)
from .types import MigSlot, Resolved, ResolvedHost, ResolvedModel


class UnknownGpu(Rule):
    """A host names a GPU model that is not in the catalog.

    Kiln checks MIG profiles, clocks, precision support and memory against the catalog entry, so
    the GPU must be one it knows. `kiln catalog` lists them (aliases that name one part, such as
    `H100-SXM` or nvidia-smi's `NVIDIA H100 80GB HBM3`, resolve to it; a known variant such as the
    H800 is pointed at its base part).
    """

    code = "K901"
    name = "unknown-gpu"


class AmbiguousGpu(Rule):
    """A host names a GPU family, not a part: `H100` is the SXM5, the PCIe card or the NVL.

    The parts of one family differ in exactly what Kiln checks and writes: power limits (700 W on
    the H100 SXM5, 350 W on the PCIe card), clock ranges, MIG profiles (`1g.12gb` on the NVL,
    `1g.10gb` on the others) and memory. Picking one silently would check the spec against a part
    the host may not have and write a host script that sets its limits, so the spec must say which.
    The message lists the catalog's candidates; `kiln catalog GPU` shows each one's facts.
    """

    code = "K909"
    name = "ambiguous-gpu"


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


class ArchitectureNotCheckpoint(Rule):
    """A catalog `architecture` that is not the local checkpoint's own (its config.json).

    The architecture sizes the model: weights, KV cache, the capacity figures and every memory
    check. A local `source.path` has its own config.json; a catalog name whose shape differs from
    it (layers, hidden size, heads, KV heads, vocabulary, experts) would size another model than
    the one built and served. Leave `architecture` out to have the config.json read, or name the
    catalog entry of this checkpoint.
    """

    code = "K918"
    name = "architecture-not-checkpoint"


class GpuProfilesInvalid(Rule):
    """A `--gpu-profiles` capture cannot be read, or is not `nvidia-smi mig -lgip` / `-lgipp` output.

    Each `--gpu-profiles` takes the captures of one GPU model: the `-lgip` table and, optionally,
    the `-lgipp` placements, in one file (both outputs, in either order) or two. Give the option
    once per GPU model of the fleet.
    """

    code = "K910"
    name = "gpu-profiles-invalid"


class LockFileInvalid(Rule):
    """The lock file beside the spec (`kiln.lock` for `kiln.yaml`) cannot be read or is not one.

    `kiln lock SPEC` writes it: the MIG placements of the spec's layout, which later layouts keep
    where they can. Delete it and run `kiln lock` again to start from the current placements
    (`kiln lock` replaces a lock file it cannot read).

    It is read only when it is a regular file (a FIFO, a device or a directory is refused unread)
    of at most 16 MiB, and only as the format needs: JSON without NaN or Infinity, nested at most
    8 levels, numbers of at most 20 characters, placements of GPU indexes and slot numbers. The
    message gives the line and column of the fault where there is one. A lock file that is a link
    out of the spec's repository is K915, like any input.
    """

    code = "K912"
    name = "lock-file-invalid"


class MeasuredRecordInvalid(Rule):
    """A measured limit (`{measured: FILE}`) names a file that is missing or is not a measurement
    record of that model.

    `kiln tune SPEC --unit UNIT --url URL` writes the record (tune/<unit>.json beside the spec) after
    it measured a unit serving the model, and points the limit at it. Commit the record with the
    spec; to start over, give the limit as a number and run `kiln tune` again.

    The record is read only when it is a regular file of at most 1 MiB, as JSON without NaN or
    Infinity, nested at most 16 levels, numbers of at most 40 characters; the message names the
    record's line and column of the fault. A measured concurrency above 65536 (the largest
    `max_batch_size`) gives that limit.
    """

    code = "K913"
    name = "measured-record-invalid"


class CaptureFitsNoHost(Rule):
    """A `--gpu-profiles` capture was taken on a GPU that no host of the spec uses.

    A capture applies only to hosts of the GPU it was captured on: Kiln identifies that GPU by the
    capture's full-GPU profile (7g.80gb vs 7g.141gb, 4g.24gb on an A30...) and its SM count, and
    hosts of any other GPU keep the catalog's profiles. A capture that fits no host is a mix-up
    (the wrong file, or the wrong spec), so it is refused rather than silently ignored.
    """

    code = "K911"
    name = "capture-fits-no-host"


def resolve(spec: Spec, doc: Document, base_dir: Path, gpu_profiles: tuple[tuple[Path, ...], ...] = (),
            set_aside: dict[str, frozenset[str]] | None = None,
            lock: Path | None = None, roots: InputRoots | None = None) -> tuple[Resolved, list[Diagnostic]]:
    """The IR before its passes: the spec's input paths confined to `roots` (inputs.py; default: the
    spec's repository), models with architectures, hosts with GPUs and MIG slots (from the captures
    of `gpu_profiles` where they fit a host's GPU, else from the catalog), and the locked placements
    of `lock` when that file exists."""
    diags: list[Diagnostic] = []
    roots = roots if roots is not None else input_roots(base_dir)
    inputs = _resolve_inputs(spec, doc, base_dir, roots, diags)
    read = _read_lock(lock, roots, diags)
    locked, locked_workloads, locked_surges, locked_pods = read if read is not None else (None, {}, {}, {})
    captures = [c for c in (_read_capture(files, diags) for files in gpu_profiles) if c is not None]
    models = {name: _resolve_model(name, m, doc, inputs, roots, diags) for name, m in spec.models.items()}
    # A model whose measured limit cannot be read is set aside like a model with a structure error:
    # the rest is checked, and nothing that needs its limit is reported.
    unreadable = set()
    for name, rm in models.items():
        if isinstance(rm.spec.limits.max_batch_size, MeasuredLimit):
            ref = rm.spec.limits.max_batch_size.measured
            # a record path refused by confinement (K915, K916) is never read
            measured = _read_measured(name, ref, doc, inputs[ref].path, diags) if ref in inputs else None
            if measured is None:
                unreadable.add(name)
            else:
                models[name] = dataclasses.replace(rm, measured=measured)
    if unreadable:
        models = {n: m for n, m in models.items() if n not in unreadable}
        spec = spec.model_copy(update={"models": {n: m for n, m in spec.models.items() if n not in unreadable}})
        set_aside = dict(set_aside or {})
        set_aside["models"] = frozenset(set_aside.get("models", frozenset()) | unreadable)
    hosts = {name: _resolve_host(name, h, doc, captures, diags) for name, h in spec.hosts.items()}
    if locked:
        hosts = {name: dataclasses.replace(h, locked=locked.get(name, {})) for name, h in hosts.items()}
    used = {source for h in hosts.values() for source in h.gpu_source.split(", ")}
    for c in captures if not (set_aside or {}).get("hosts") else ():
        if c.lgip_source not in used:
            fits = identify(c, load_gpu_catalog())
            what = " or ".join(fits) if fits else "a GPU the catalog does not know"
            gpus = sorted({h.spec.gpu for h in hosts.values()})
            diags.append(Diagnostic(CaptureFitsNoHost.code, CaptureFitsNoHost.severity,
                                    f"this capture ({c.describe()}) was taken on {what}, which no host of "
                                    f"{doc.file} uses", c.lgip_source, Span(1, 1),
                                    "the hosts use " + (", ".join(gpus) if gpus else "no GPU") +
                                    "; capture `nvidia-smi mig -lgip` (and -lgipp) on one of them"))
    return Resolved(spec, doc, base_dir, models, hosts,
                    capture=", ".join(src for c in captures for src in c.sources) or None,
                    set_aside=dict(set_aside or {}),
                    lock_file=str(lock) if locked is not None else None, inputs=inputs,
                    locked_workloads=locked_workloads, locked_surges=locked_surges, locked_pods=locked_pods), diags


def input_fields(spec: Spec) -> list[tuple[str, tuple, bool]]:
    """(value, spec path, is a directory) of every file or directory the spec names."""
    out = []
    for name, m in spec.models.items():
        base = ("models", name)
        if m.source.path is not None:
            out.append((m.source.path, base + ("source", "path"), True))
        if isinstance(m.architecture, ArchitectureFile):
            out.append((m.architecture.config, base + ("architecture", "config"), False))
        q = m.quantization
        if q.calibration is not None:
            out.append((q.calibration.data, base + ("quantization", "calibration", "data"), False))
        if q.quality_gate is not None:
            out.append((q.quality_gate.eval, base + ("quantization", "quality_gate", "eval"), False))
        if isinstance(m.limits.max_batch_size, MeasuredLimit):
            out.append((m.limits.max_batch_size.measured, base + ("limits", "max_batch_size", "measured"), False))
    return out


def _resolve_inputs(spec: Spec, doc: Document, base_dir: Path, roots: InputRoots,
                    diags: list[Diagnostic]) -> dict[str, ResolvedInput]:
    """Every input path confined (K915, K916 at each place that names a refused one), before
    anything reads a file; the readable ones by the spec's text of the path."""
    inputs: dict[str, ResolvedInput] = {}
    refused: dict[str, InputRefused] = {}
    for value, where, directory in input_fields(spec):
        if value in inputs:
            continue
        if value not in refused:
            try:
                real = confine(value, base_dir, roots)
                why = check_readable(real, directory)
                if why is not None:
                    raise InputRefused(InputUnusable, f"{value!r} exists but {why}")
                inputs[value] = ResolvedInput(real, where)
                continue
            except InputRefused as e:
                refused[value] = e
        e = refused[value]
        diags.append(_diag(e.rule, doc, where, e.message, e.help))
    return inputs


def _diag(rule: type[Rule], doc: Document, path: tuple, message: str, help: str | None = None,
          key: bool = False) -> Diagnostic:
    return Diagnostic(rule.code, rule.severity, message, doc.file, doc.span_of(path, key=key), help)


def _read_lock(path: Path | None, roots: InputRoots, diags: list[Diagnostic]):
    """The placements, workload names and Dynamo surges of the lock file `path`, None when there is none. The lock is an input of the
    spec like the files it names: confined to the same roots (a link out of the repository is
    refused, K915, and never opened), and read only when it is a regular file, at most what the
    format needs (K912)."""
    if path is None or not os.path.lexists(path):
        return None
    shown = str(path)
    try:
        real = confine_path(Path(os.path.realpath(path)), roots, shown)
    except InputRefused as e:
        diags.append(Diagnostic(e.rule.code, e.rule.severity, f"lock file {e.message}", shown, Span(1, 1),
                                "the lock file must be a file of the spec's repository: remove the link and run "
                                "`kiln lock SPEC` to write it"))
        return None
    except (OSError, ValueError) as e:
        diags.append(Diagnostic(LockFileInvalid.code, LockFileInvalid.severity,
                                f"cannot read the lock file: {getattr(e, 'strerror', None) or e}", shown, Span(1, 1)))
        return None
    try:
        text = read_regular(real, MAX_LOCK_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None  # a link to nothing inside the repository: no lock yet
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text" \
            if isinstance(e, UnicodeDecodeError) else e
        diags.append(Diagnostic(LockFileInvalid.code, LockFileInvalid.severity, f"cannot read the lock file: {why}",
                                shown, Span(1, 1), "delete it and run `kiln lock SPEC` to write it again"))
        return None
    try:
        return parse_lock(text), parse_lock_workloads(text), parse_lock_surges(text), parse_lock_pods(text)
    except LockError as e:
        diags.append(Diagnostic(LockFileInvalid.code, LockFileInvalid.severity, f"not a valid lock file: {e.message}",
                                shown, Span(e.line, e.column), "run `kiln lock SPEC` to write it again"))
    return None


def _read_measured(model: str, ref: str, doc: Document, path: Path, diags: list[Diagnostic]) -> Measurement | None:
    where = ("models", model, "limits", "max_batch_size", "measured")
    try:
        raw = read_regular(path, MAX_RECORD_BYTES)  # a FIFO or device named by the spec is not read
        record = parse_record(raw.decode("utf-8"))
    except FileNotFoundError:
        diags.append(_diag(MeasuredRecordInvalid, doc, where, f"no measurement record at {ref}",
                           f"run `kiln tune {doc.file} --unit UNIT --url URL` against a unit serving {model!r}; "
                           "it writes the record and this reference"))
        return None
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text" \
            if isinstance(e, UnicodeDecodeError) else e
        diags.append(_diag(MeasuredRecordInvalid, doc, where, f"cannot read the measurement record {ref}: {why}"))
        return None
    except RecordError as e:
        diags.append(_diag(MeasuredRecordInvalid, doc, where,
                           f"{ref}:{e.line}:{e.column}: {e.message}",
                           "`kiln tune` writes these files; do not edit them"))
        return None
    if record.model != model:
        diags.append(_diag(MeasuredRecordInvalid, doc, where,
                           f"{ref} measured model {record.model!r} (unit {record.unit}), not {model!r}",
                           f"point the limit at a record of {model!r}, or run `kiln tune` on a unit serving it"))
        return None
    return Measurement(ref, path, sha256_bytes(raw), record)


def _read_capture(files: tuple[Path, ...], diags: list[Diagnostic]) -> Capture | None:
    texts = []
    for path in files:
        try:
            texts.append((str(path), _read_bounded(path, MAX_CAPTURE_BYTES).decode("utf-8")))
        except (OSError, UnicodeDecodeError) as e:
            diags.append(Diagnostic(GpuProfilesInvalid.code, GpuProfilesInvalid.severity,
                                    f"cannot read GPU profile capture: {e}", str(path), Span(1, 1)))
            return None
    try:
        return read_capture(texts)
    except LgipParseError as e:
        where = getattr(e, "source", None) or texts[0][0]
        diags.append(Diagnostic(GpuProfilesInvalid.code, GpuProfilesInvalid.severity,
                                f"cannot parse the `nvidia-smi mig -lgip`/`-lgipp` capture: {e.message}",
                                where, Span(e.line, 1)))
        return None


def _resolve_model(name: str, m: Model, doc: Document, inputs: dict[str, ResolvedInput], roots: InputRoots,
                   diags: list[Diagnostic]) -> ResolvedModel:
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
        if m.source.path is not None and m.source.path in inputs:
            differs = _differs_from_checkpoint(arch, inputs[m.source.path].path, roots, m.source.path)
            if differs:
                diags.append(_diag(ArchitectureNotCheckpoint, doc, path,
                                   f"architecture {arch_ref!r} of model {name!r} is not the checkpoint under "
                                   f"{m.source.path!r}: " + "; ".join(differs),
                                   "leave `architecture` out to have the checkpoint's config.json read, or name "
                                   "the catalog entry of this checkpoint"))
        return ResolvedModel(name, m, arch, "catalog")
    if isinstance(arch_ref, ArchitectureFile):
        if arch_ref.config not in inputs:
            return ResolvedModel(name, m, None, "")  # refused (K915, K916) before anything was read
        config_path, where, shown = inputs[arch_ref.config].path, path + ("config",), arch_ref.config
    elif m.source.path is not None:
        if m.source.path not in inputs:
            return ResolvedModel(name, m, None, "")  # refused (K915, K916) before anything was read
        config_path, where = inputs[m.source.path].path / "config.json", ("models", name, "source", "path")
        shown = f"{m.source.path.rstrip('/')}/config.json"
    else:
        diags.append(_diag(UnknownArchitecture, doc, ("models", name, "source"),
                           f"model {name!r} comes from Hugging Face but names no architecture",
                           "add `architecture: <catalog name>` or `architecture: {config: path/to/config.json}`; "
                           "validation never downloads weights"))
        return ResolvedModel(name, m, None, "")
    if not isinstance(arch_ref, ArchitectureFile):
        if not config_path.parent.is_dir():
            return ResolvedModel(name, m, None, "")  # the missing model directory is reported by K905
        try:  # the model directory's own config.json may be a link out of the repository
            config_path = confine_path(Path(os.path.realpath(config_path)), roots, shown)
        except InputRefused as e:
            diags.append(_diag(e.rule, doc, where, e.message, e.help))
            return ResolvedModel(name, m, None, "")
    try:
        config = json.loads(read_regular(config_path, MAX_CONFIG_BYTES).decode("utf-8"))  # never a FIFO
        if not isinstance(config, dict):
            raise ConfigError("config.json is not a JSON object", "")
        arch = arch_from_hf_config(config, name)
    except FileNotFoundError:
        diags.append(_diag(ArchitectureConfigInvalid, doc, where, f"no config.json at {shown}",
                           "the architecture is read from the model's config.json; give `architecture:` "
                           "or add the file"))
        return ResolvedModel(name, m, None, "")
    except (OSError, ValueError, RecursionError, ConfigError) as e:  # UnicodeDecodeError, JSONDecodeError
        why = e.strerror if isinstance(e, OSError) and e.strerror else "nesting too deep" \
            if isinstance(e, RecursionError) else e
        diags.append(_diag(ArchitectureConfigInvalid, doc, where, f"cannot read the architecture from {shown}: {why}"))
        return ResolvedModel(name, m, None, "")
    return ResolvedModel(name, m, arch, "config")


SHAPE = (("layers", "layers"), ("hidden", "hidden size"), ("heads", "attention heads"), ("kv_heads", "KV heads"),
         ("vocab", "vocabulary"), ("experts", "experts"))


def _differs_from_checkpoint(arch: ModelArch, directory: Path, roots: InputRoots, shown: str) -> list[str]:
    """How the catalog `arch` differs from the config.json under a local model directory, in the
    shape that sizes it; nothing when the config cannot be read (K903 and the build say why)."""
    try:
        path = confine_path(Path(os.path.realpath(directory / "config.json")), roots, f"{shown}/config.json")
        config = json.loads(read_regular(path, MAX_CONFIG_BYTES).decode("utf-8"))
        own = arch_from_hf_config(config, arch.name) if isinstance(config, dict) else None
    except (InputRefused, OSError, ValueError, RecursionError, ConfigError):
        return []
    if own is None:
        return []
    return [f"{what} {getattr(arch, f)} in the catalog, {getattr(own, f)} in config.json"
            for f, what in SHAPE if getattr(arch, f) != getattr(own, f)]


MAX_CONFIG_BYTES = 16 << 20  # a Hugging Face config.json is a few KB
MAX_CAPTURE_BYTES = 1 << 20  # `nvidia-smi mig -lgip` prints a few KB


def _read_bounded(path: Path, limit: int) -> bytes:
    """At most `limit` bytes (OSError EFBIG past it), whatever stat says (a device never ends)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    return data


def _resolve_host(name: str, h: Host, doc: Document, captures: list[Capture],
                  diags: list[Diagnostic]) -> ResolvedHost:
    catalog = load_gpu_catalog()
    candidates = catalog.ambiguous(h.gpu)
    gpu = catalog.get(h.gpu) if not candidates else None
    source = "catalog"
    if candidates:
        diags.append(_diag(AmbiguousGpu, doc, ("hosts", name, "gpu"),
                           f"GPU {h.gpu!r} is ambiguous: the catalog has {', '.join(candidates)}",
                           f"write the part the host has, e.g. gpu: {candidates[0]} (power, clocks, MIG "
                           "profiles and memory differ between them)"))
    elif gpu is None:
        help = _unknown_gpu_help(h.gpu)
        diags.append(_diag(UnknownGpu, doc, ("hosts", name, "gpu"), f"unknown GPU model {h.gpu!r}", help))
    else:
        fitting = [c for c in captures if c.matches(gpu)]
        if len(fitting) > 1:
            diags.append(_diag(GpuProfilesInvalid, doc, ("hosts", name, "gpu"),
                               f"{len(fitting)} captures fit {gpu.name} ({', '.join(c.lgip_source for c in fitting)})",
                               "give one capture per GPU model"))
        elif fitting:
            source = ", ".join(fitting[0].sources)  # used (K911 would call it a mix-up), even when refused
            try:
                gpu = gpu_with_capture(gpu, fitting[0])
            except (LgipParseError, CaptureMismatchError) as e:  # e.g. -lgip alone, with an ID no pattern places
                diags.append(Diagnostic(GpuProfilesInvalid.code, GpuProfilesInvalid.severity,
                                        f"cannot use the capture for {gpu.name}: {e.message}",
                                        e.source or fitting[0].lgip_source, Span(getattr(e, "line", 1) or 1, 1),
                                        help="capture `nvidia-smi mig -lgipp` on the same host and pass both files"))
    slots_by_assignment: dict[int, tuple[MigSlot, ...]] = {}
    for a_idx, assignment in enumerate(h.gpus):
        if assignment.mig is not None:
            slots_by_assignment[a_idx] = tuple(
                MigSlot(i, inst, gpu.mig.profile(inst.profile) if gpu is not None else None)
                for i, inst in enumerate(assignment.mig))
    return ResolvedHost(name, h, gpu, slots_by_assignment, gpu_source=source)


def _unknown_gpu_help(name: str) -> str:
    catalog = load_gpu_catalog()
    variant = catalog.variant_of(name)
    close = catalog.suggest(name)
    if variant is not None:
        base, reason = variant
        if base is None:
            return f"{reason}; it is not in the catalog. Known GPUs: " + ", ".join(catalog.names)
        return f"{reason}: if its memory, clocks and MIG profiles match, use gpu: {base}"
    hint = catalog.hint(name) if close else None
    return (f"{hint} " if hint else "") + "known GPUs: " + ", ".join(catalog.names)
