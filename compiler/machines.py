"""What builders have: this machine, probed, or classes of machines declared in a builders file.

A builders file (YAML) declares the classes of machines that build a spec's actions, in the order
a planner should try them (cheapest first), e.g. CI runner classes:

    builders:
      cpu:
        runs-on: [ubuntu-latest]
        host_memory_gib: 16
        disk_gib: 14
        has: [torch, network, docker]
      h200:
        runs-on: [self-hosted, linux, gpu, h200]
        gpu: H200-SXM-141GB     # the catalog's GPU: its architecture and memory
        gpus: 8
        mig: 3g.40gb            # optional: each GPU is this MIG slice
        host_memory_gib: 2048
        disk_gib: 4000
        has: [torch, gpu, docker, network]

An action is placed on the first class that holds it: its size (compiler/graph/sizes.py) and its
software needs. One that no class holds is a K405 diagnostic at plan time; a file Kiln cannot read
as this is K406.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from compiler.checks.builders import BuildersFileInvalid, NoBuilderHolds
from compiler.diagnostics import Diagnostic, Severity, Span
from compiler.graph.sizes import MIG_PROBED, SMALL, GiB, Machine, holds, lacking, shortfalls


# tensorrt_llm: importable with CUDA, so an engine build runs without the release container (docker)
SOFTWARE = ("torch", "gpu", "docker", "network", "tensorrt_llm")
_LABEL = re.compile(r"[A-Za-z0-9._-]+")
_FIELDS = {"runs-on", "gpu", "gpus", "mig", "host_memory_gib", "disk_gib", "has"}


@dataclass
class Builders:
    """A builders file read: its classes in order, and its diagnostics (rendered like a spec's)."""

    machines: list[Machine]
    diagnostics: list[Diagnostic]
    file: str = ""
    document: Any = None

    def get(self, name: str) -> Machine | None:
        return next((m for m in self.machines if m.name == name), None)


def load_builders(path: Path) -> Builders:
    """The classes a builders file declares, in its order, and what is wrong with it."""
    from compiler.spec.loader import load_file

    loaded = load_file(path)
    if loaded.document is None:
        return Builders([], loaded.diagnostics, str(path))
    doc = loaded.document
    diags: list[Diagnostic] = []

    def bad(where: tuple, message: str, help: str | None = None) -> None:
        diags.append(Diagnostic(BuildersFileInvalid.code, Severity.ERROR, message, doc.file, doc.span_of(where),
                                help=help))

    data = doc.data
    classes = data.get("builders") if isinstance(data, dict) else None
    if not isinstance(classes, dict) or not classes:
        bad(("builders",), "a builders file has a `builders:` mapping of class names to what they have")
        return Builders([], diags, doc.file, doc)
    out = []
    for name, d in classes.items():
        m = _machine(str(name), d, ("builders", name), bad)
        if m is not None:
            out.append(m)
    return Builders(out if not diags else [], diags, doc.file, doc)


def _machine(name: str, d: Any, where: tuple, bad) -> Machine | None:
    if not _LABEL.fullmatch(name):
        bad(where, f"builder class {name!r}: use letters, digits, '.', '_' and '-'")
        return None
    if not isinstance(d, dict):
        bad(where, f"builder class {name!r} is a mapping of what it has")
        return None
    ok = True
    for key in d:
        if key not in _FIELDS:
            bad(where + (key,), f"builder class {name!r}: unknown field {key!r}", help=", ".join(sorted(_FIELDS)))
            ok = False
    labels = d.get("runs-on", [name])
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and _LABEL.fullmatch(x) for x in labels):
        bad(where + ("runs-on",), "runs-on is a list of runner labels (letters, digits, '.', '_', '-')")
        ok = False
    has = d.get("has", [])
    if not isinstance(has, list) or any(h not in SOFTWARE for h in has):
        bad(where + ("has",), f"has lists what the class offers, of {', '.join(SOFTWARE)}")
        ok = False
    numbers = {}
    for key in ("gpus", "host_memory_gib", "disk_gib"):
        v = d.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            bad(where + (key,), f"{key} is a number >= 0")
            ok = False
        numbers[key] = v
    gpu_name, arch, mem = None, None, 0.0
    if d.get("gpu") is not None:
        from compiler.catalog import load_gpu_catalog

        spec = load_gpu_catalog().get(str(d["gpu"]))
        if spec is None:
            bad(where + ("gpu",), f"no GPU {d['gpu']!r} in Kiln's catalog", help="`kiln gpus` lists them")
            return None
        gpu_name, arch, mem = spec.name, spec.arch, spec.memory_mib / 1024
        if d.get("mig") is not None:
            profile = spec.mig.profile(str(d["mig"]))
            if profile is None:
                bad(where + ("mig",), f"{spec.name} has no MIG profile {d['mig']!r}")
                return None
            mem = (profile.memory_mib / 1024) if profile.memory_mib else profile.memory_gb * 1e9 / GiB
        if not numbers["gpus"]:
            numbers["gpus"] = 1
    elif numbers["gpus"]:
        bad(where + ("gpus",), "gpus without gpu: name the GPU (a catalog name) so its memory is known")
        ok = False
    if not ok:
        return None
    return Machine(name, gpus=int(numbers["gpus"]), gpu_name=gpu_name, gpu_arch=arch, gpu_mem_gib=round(mem, 1),
                   host_mem_gib=float(numbers["host_memory_gib"]), disk_gib=float(numbers["disk_gib"]),
                   has=frozenset(has), labels=tuple(labels), mig=str(d["mig"]) if d.get("mig") is not None else None)


# --- this machine, probed -------------------------------------------------------------------------
def _gpus() -> tuple[int, str | None, str | None, float, bool]:
    """(count, name, architecture, memory each in GiB, whether they are MIG slices) from nvidia-smi,
    or no GPU. memory.total is the whole GPU's even in MIG mode, where a process sees one MIG
    instance ("Total installed GPU memory", nvidia-smi --help-query-gpu; a MIG-enabled H100 80GB
    HBM3 reports 81559 MiB beside its 3g.40gb and smaller instances in a real capture:
    utkuozdemir/nvidia_gpu_exporter internal/captures/linux-x86_64__nvidia-h100-mig__590.48.01.txt),
    so GPUs with mig.mode.current Enabled count only where no whole GPU is left, as MIG slices of
    unknown memory (Kiln calibrates and builds on none of them: compiler/graph/sizes.py MIG_PROBED)."""
    none = 0, None, None, 0.0, False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return none
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total,compute_cap,mig.mode.current",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return none
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.count(",") == 3]
    if out.returncode != 0 or not rows:
        return none
    whole = [r for r in rows if r[3] != "Enabled"]  # "Disabled", or "[N/A]" on a GPU without MIG
    if not whole:
        return len(rows), rows[0][0], _arch_of(rows[0][2]), 0.0, True
    try:
        mem = min(float(r[1]) for r in whole) / 1024  # MiB; the smallest GPU bounds what each may hold
    except ValueError:
        return none
    return len(whole), whole[0][0], _arch_of(whole[0][2]), round(mem, 1), False


def _arch_of(compute_cap: str) -> str | None:
    """The catalog's architecture name of a compute capability ("9.0" -> "Hopper")."""
    from compiler.catalog import load_gpu_catalog

    try:
        cc = tuple(int(x) for x in compute_cap.split("."))
    except ValueError:
        return None
    for g in load_gpu_catalog():
        if g.compute_capability == cc:
            return g.arch
    return None


def _host_memory_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1 << 20), 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB, 1)
    except (ValueError, OSError):
        return 0.0


def _free_disk_gib(where: Path) -> float:
    p = Path(os.path.abspath(where))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return round(shutil.disk_usage(p).free / GiB, 1)
    except OSError:
        return 0.0


def probe(store_root: Path, has: Iterable[str]) -> Machine:
    """This machine: its GPUs (nvidia-smi; whole ones, see _gpus), host memory, free disk under the
    store, and `has`."""
    count, name, arch, mem, mig = _gpus()
    return Machine("this machine", gpus=count, gpu_name=name, gpu_arch=arch, gpu_mem_gib=mem,
                   host_mem_gib=_host_memory_gib(), disk_gib=_free_disk_gib(store_root), has=frozenset(has),
                   mig=MIG_PROBED if mig else None, elsewhere=False)


# --- placement ------------------------------------------------------------------------------------
def software_lacking(kinds, action, machine: Machine) -> list[str]:
    from compiler.graph.builder import Builder

    return kinds.missing(action, Builder(fixed=machine.has, machine=machine))


def way_rank(kinds, action, machine: Machine) -> int | None:
    """The index of the action's most preferred way `machine` holds (software included), or None."""
    if software_lacking(kinds, action, machine):
        return None
    way = holds(action.size, machine)  # the one decision (compiler/graph/sizes.py holds)
    return None if way is None else (action.size or SMALL).ways.index(way)


def place(kinds, action, machines: list[Machine]) -> Machine | None:
    """The machine that holds the action's most preferred way (a GPU calibration before a CPU
    one), the first in order among those."""
    return home([action], kinds, machines)


def home(actions: list, kinds, machines: list[Machine]) -> Machine | None:
    """The machine that holds every one of `actions`, each in the most preferred way it can (the
    least sum of way ranks), the first in order among equals; None when none holds them all."""
    best, best_score = None, None
    for m in machines:
        ranks = [way_rank(kinds, a, m) for a in actions]
        if any(r is None for r in ranks):
            continue
        score = sum(ranks)
        if best_score is None or score < best_score:
            best, best_score = m, score
    return best


def why_not(kinds, action, machines: list[Machine]) -> list[str]:
    """For each machine, what it lacks to run the action."""
    out = []
    for m in machines:
        parts = []
        if holds(action.size, m) is None:
            parts.append(lacking(action.size, m))
        missing = software_lacking(kinds, action, m)
        if missing:
            parts.append("software: " + ", ".join(missing))
        out.append(f"{m.name} lacks {'; '.join(parts)}")
    return out


def unplaceable(graph, kinds, machines: list[Machine], todo: Iterable[str], doc, spec_models, spec_hosts) -> list[Diagnostic]:
    """K405 for each action of `todo` no machine holds, at the spec entry it builds for."""
    out = []
    for aid in todo:
        action = graph.actions[aid]
        if place(kinds, action, machines) is not None:
            continue
        subject = aid.partition("/")[2]
        where = ("models", subject) if subject in spec_models else ("hosts", subject) if subject in spec_hosts else ()
        size = action.size
        out.append(Diagnostic(NoBuilderHolds.code, Severity.ERROR,
                              f"no builder holds {aid}: it needs {size.text() if size else 'little'}"
                              + (f" and {', '.join(action.needs)}" if action.needs else ""),
                              doc.file, doc.span_of(where, key=True) if where else Span(1, 1),
                              help="declare a builder class that holds it, or change the spec so it needs less",
                              notes=tuple(why_not(kinds, action, machines)) + tuple(size.basis if size else ())))
    return out
