"""How much machine an action needs, what a machine has, and whether one holds the other.

A `Size` is computed from the IR when a spec is lowered (compiler/actions/sizing.py); it is not
part of an action's key: the same artifact built on a bigger machine is the same artifact. A `Size`
lists one or more ways to run (quantization runs on GPUs, or on CPU where the recipe allows it);
a machine holds the action when it holds any way. A `Machine` is a builder (probed here) or a
declared class of builders (a CI runner label set, a Ray node type: compiler/machines.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GiB = 1 << 30
SHOWN = 3  # ways over several GPUs (or offloading) a Size's text names of each kind
# Machine.mig of a probed builder whose GPUs are in MIG mode: nvidia-smi reports the whole GPU's
# memory, not that of the instance a process sees (compiler/machines.py _gpus)
MIG_PROBED = "enabled"


def gib(n_bytes: float) -> float:
    """Bytes as GiB, rounded up to a tenth: a need is never understated by rounding."""
    return math.ceil(n_bytes / GiB * 10) / 10


@dataclass(frozen=True)
class Way:
    """One way to run an action: GPUs (0: none), their architecture and memory, host memory, disk."""

    gpus: int = 0
    gpu_arch: str | None = None  # "Hopper"; None: any
    gpu_mem_gib: float = 0.0  # each GPU
    host_mem_gib: float = 0.5
    disk_gib: float = 0.1
    # weights the GPUs do not hold, kept in host memory (part of host_mem_gib) and moved to a GPU
    # layer by layer as the forward pass reaches them: accelerate's CPU offload
    offload_gib: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "gpu_arch": self.gpu_arch, "gpu_mem_gib": self.gpu_mem_gib,
                "host_mem_gib": self.host_mem_gib, "disk_gib": self.disk_gib, "offload_gib": self.offload_gib}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Way":
        """The way of `to_json` (a job handed to a worker process or a remote machine)."""
        return cls(gpus=int(doc["gpus"]), gpu_arch=doc.get("gpu_arch"), gpu_mem_gib=float(doc["gpu_mem_gib"]),
                   host_mem_gib=float(doc["host_mem_gib"]), disk_gib=float(doc["disk_gib"]),
                   offload_gib=float(doc.get("offload_gib", 0.0)))

    def short(self) -> str:
        """How it runs, in a few words: "on the CPU", "on 1 GPU", "sharded over 4 GPUs", "on 8 GPUs
        offloading 252.2 GiB to host memory"."""
        if not self.gpus:
            return "on the CPU"
        if self.offload_gib:
            return f"on {self.gpus} GPU{'s' * (self.gpus > 1)} offloading {self.offload_gib:g} GiB to host memory"
        return "on 1 GPU" if self.gpus == 1 else f"sharded over {self.gpus} GPUs"

    def gpu_text(self) -> str:
        arch = f" {self.gpu_arch}" if self.gpu_arch else ""
        if not self.gpus:
            return "no GPU"
        spill = f" offloading {self.offload_gib:g} GiB to host memory" if self.offload_gib else ""
        return f"{self.gpus} x{arch} GPU >= {self.gpu_mem_gib:g} GiB{spill}"

    def rest_text(self) -> str:
        return f"host memory {self.host_mem_gib:g} GiB, disk {self.disk_gib:g} GiB"

    def text(self) -> str:
        return f"{self.gpu_text()}, {self.rest_text()}"


@dataclass(frozen=True)
class Size:
    """The ways an action can run, preferred first, and how the figures were obtained."""

    ways: tuple[Way, ...] = (Way(),)
    basis: tuple[str, ...] = ()  # one line per figure: formula and source

    def to_json(self) -> dict[str, Any]:
        return {"ways": [w.to_json() for w in self.ways], "basis": list(self.basis)}

    def text(self) -> str:
        """The ways, those in a row that differ only in their GPUs as one ("2 x GPU >= 93.5 GiB or 3 x
        GPU >= 79.6 GiB, host memory ...": a calibration sharded over N GPUs of one size or another).
        Of the ways over several GPUs only the first SHOWN of each kind (all on GPUs, offloading) are
        named, fewest GPUs and least offload first; the count of the others closes the line (the JSON
        plan lists every way)."""
        shown, seen = [], {False: 0, True: 0}
        for w in self.ways:
            if w.gpus > 1 or w.offload_gib:
                seen[bool(w.offload_gib)] += 1
                if seen[bool(w.offload_gib)] > SHOWN:
                    continue
            shown.append(w)
        groups: list[list[Way]] = []
        for w in shown:
            if groups and groups[-1][-1].gpus and w.gpus and groups[-1][-1].rest_text() == w.rest_text():
                groups[-1].append(w)
            else:
                groups.append([w])
        text = " | or ".join(" or ".join(w.gpu_text() for w in g) + f", {g[0].rest_text()}" for g in groups)
        more = len(self.ways) - len(shown)
        return text + (f" (and {more} more way{'s' * (more != 1)} over other GPU counts: the JSON plan lists them)"
                       if more else "")


SMALL = Size((Way(),), ("a small action: it reads and writes a few files (Kiln's allowance: 0.5 GiB host "
                        "memory, 0.1 GiB disk)",))


@dataclass(frozen=True)
class Machine:
    """What a builder has: `gpus` of `gpu_name` (architecture and memory each), host memory, free
    disk (under the store), and the software capabilities of compiler/graph/builder.py."""

    name: str
    gpus: int = 0
    gpu_name: str | None = None
    gpu_arch: str | None = None
    gpu_mem_gib: float = 0.0
    host_mem_gib: float = 0.0
    disk_gib: float = 0.0
    has: frozenset[str] = field(default_factory=frozenset)
    labels: tuple[str, ...] = ()  # CI runner labels (`runs-on`)
    mig: str | None = None  # each GPU is this MIG slice (a declared class): a process sees one of them
    # another machine than the one running Kiln (a declared class, a cluster node): what it has is
    # what `has` says, never what is installed here
    elsewhere: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "gpu_name": self.gpu_name, "gpu_arch": self.gpu_arch,
                "gpu_mem_gib": self.gpu_mem_gib, "host_mem_gib": self.host_mem_gib, "disk_gib": self.disk_gib,
                "has": sorted(self.has), "labels": list(self.labels), **({"mig": self.mig} if self.mig else {})}


def _arch_fits(way: Way, machine: Machine) -> bool:
    return not way.gpu_arch or (machine.gpu_arch or "").lower() == way.gpu_arch.lower()


def shortfalls(way: Way, machine: Machine) -> list[str]:
    """What `machine` lacks to run `way` (empty: it holds it)."""
    out = []
    if way.gpus:
        if machine.mig == MIG_PROBED:
            out.append("whole GPUs, its GPUs are in MIG mode (a process sees one MIG instance, whose memory nvidia-smi "
                       "--query-gpu does not report: memory.total is the whole GPU's); calibrate on GPUs with MIG "
                       "disabled or declare the slices in a builders file")
        elif machine.gpus < way.gpus:
            out.append(f"{way.gpus} GPU(s), it has {machine.gpus}")
        elif way.gpus > 1 and machine.mig:
            # "With CUDA 11/12, only enumeration of a single MIG instance is supported" (NVIDIA MIG
            # User Guide, CUDA Device Enumeration): one process never spans several slices
            out.append(f"{way.gpus} whole GPUs, it has {machine.mig} MIG slices (a process sees one)")
        elif not _arch_fits(way, machine):
            out.append(f"{way.gpu_arch} GPUs, it has {machine.gpu_arch or 'an unknown architecture'}")
        elif machine.gpu_mem_gib < way.gpu_mem_gib:
            out.append(f"{way.gpu_mem_gib:g} GiB per GPU, it has {machine.gpu_mem_gib:g}")
    if machine.host_mem_gib < way.host_mem_gib:
        out.append(f"{way.host_mem_gib:g} GiB host memory, it has {machine.host_mem_gib:g}")
    if machine.disk_gib < way.disk_gib:
        out.append(f"{way.disk_gib:g} GiB disk, it has {machine.disk_gib:g}")
    return out


def holds(size: Size | None, machine: Machine) -> Way | None:
    """The first way of `size` that `machine` holds, or None: THE decision of how an action runs on a
    machine. The plan (`kiln plan --builders`: compiler/machines.py way_rank), the local executor
    (against the probed machine or a declared class: compiler/graph/builder.py Builder.way) and a
    distributed engine (against its nodes: compiler/distributed/driver.py) each take it where they
    place the action and hand the way to the action's run (RunContext.way), which obeys it."""
    for way in (size or SMALL).ways:
        if not shortfalls(way, machine):
            return way
    return None


def lacking(size: Size | None, machine: Machine) -> str:
    """Why `machine` holds no way of `size`: the preferred way's shortfalls, those of the first way
    over several GPUs of the machine's own kind (a calibration sharded over more of them), and those
    of the first way its GPUs run by offloading weights to host memory (what host memory it needs)."""
    ways = (size or SMALL).ways
    out = "; ".join(shortfalls(ways[0], machine)) or "nothing"
    kin = next((w for w in ways[1:] if w.gpus > 1 and not w.offload_gib and machine.gpu_mem_gib >= w.gpu_mem_gib
                and _arch_fits(w, machine)), None)
    if kin is not None:
        out += f" (or over {kin.gpus} GPUs: {'; '.join(shortfalls(kin, machine))})"
    spill = next((w for w in ways[1:] if w.offload_gib and machine.gpus >= w.gpus and machine.gpu_mem_gib >= w.gpu_mem_gib
                  and _arch_fits(w, machine)), None)
    if spill is not None and shortfalls(spill, machine):
        out += (f" (or over {spill.gpus} GPU(s) offloading {spill.offload_gib:g} GiB of weights to host memory: "
                f"{'; '.join(shortfalls(spill, machine))})")
    return out
