"""K5xx: clocks and power limits of a host's GPUs against the GPU's supported ranges.

Clocks and power limits belong to the physical GPU (`nvidia-smi -lgc/-lmc/-ac/-pl -i N`) and are
shared by all of its MIG instances. They are set on the host (every GPU) or on a `gpus` entry
(overriding the host for those GPUs); both are checked.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from compiler.catalog.types import WEAK_STATUSES, GpuSpec
from compiler.diagnostics import Diagnostic, Severity
from compiler.spec.models import ApplicationClocks, Clocks

from .base import Check, CheckContext, weak_fact_note

SUPPORTED_CLOCKS_HELP = "`nvidia-smi -q -d SUPPORTED_CLOCKS` on the host lists the exact values"


def _scopes(ctx: CheckContext) -> Iterator[tuple[str, GpuSpec, tuple, object, str]]:
    """(host name, GPU, spec path, host-or-entry spec, description) for every host and gpus entry
    on a GPU that the catalog knows."""
    for hname, host in ctx.ir.hosts.items():
        if host.gpu is None:
            continue
        yield hname, host.gpu, ("hosts", hname), host.spec, f"host {hname!r}"
        for a_idx, a in enumerate(host.spec.gpus):
            yield hname, host.gpu, ("hosts", hname, "gpus", a_idx), a, f"{_gpus_text(a.indexes)} of host {hname!r}"


def _setting(ctx: CheckContext, field: str) -> Iterator[tuple[GpuSpec, tuple, object, str]]:
    """(GPU, spec path, value, description) of `field` in every scope of _scopes that sets it."""
    for _hname, gpu, base, owner, where in _scopes(ctx):
        value = getattr(owner, field, None)
        if value is not None:
            yield gpu, base, value, where


def _gpus_text(indexes: list[int]) -> str:
    return f"GPU{'s' * (len(indexes) > 1)} {', '.join(map(str, indexes))}"


def _note(gpu: GpuSpec, fact: str, what: str) -> tuple[str, ...]:
    status = gpu.status_of(fact)
    if status in WEAK_STATUSES:
        return (weak_fact_note(f"{what} of {gpu.name}", status),)
    return ()


def _range_check(rule: Check, ctx: CheckContext, gpu: GpuSpec, path: tuple, value: int, kind: str,
                 where: str, help_extra: str) -> Iterator[Diagnostic]:
    lo, hi = gpu.graphics_mhz
    if value < lo:
        yield ctx.diag(rule, path, f"{kind} {value} MHz for {where} is below the lowest graphics clock "
                                   f"{gpu.name} supports ({lo} MHz)",
                       help=f"choose a value in {lo}-{hi} MHz; {help_extra}",
                       notes=_note(gpu, "graphics_mhz_min", "the lowest graphics clock"))
    elif value > hi:
        yield ctx.diag(rule, path, f"{kind} {value} MHz for {where} is above the highest graphics clock "
                                   f"{gpu.name} supports ({hi} MHz)",
                       help=f"choose a value in {lo}-{hi} MHz; {help_extra}",
                       notes=_note(gpu, "graphics_mhz_max", "the highest graphics clock"))


class _ClockCheck(Check):
    """The common base of the K5xx rules (no `code`: not a rule itself): the family's place in the
    order checks run and report in, said once."""

    order = 50


class GraphicsClockOutOfRange(_ClockCheck):
    """A locked graphics clock outside the range the GPU supports, or a range with min > max.

    `clocks.graphics_mhz` becomes `nvidia-smi -lgc <value>` or `-lgc <min>,<max>`; the driver
    refuses values outside the GPU's supported clocks. A range is written `[min, max]` with
    min <= max. The catalog's lower bounds are placeholders on most GPUs (see the note on the
    diagnostic); `nvidia-smi -q -d SUPPORTED_CLOCKS` lists the real values.
    """

    code = "K501"
    name = "graphics-clock-out-of-range"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for gpu, base, clocks, where in _setting(ctx, "clocks"):
            path = base + ("clocks", "graphics_mhz")
            g = clocks.graphics_mhz
            if not isinstance(g, list):
                yield from _range_check(self, ctx, gpu, path, g, "locked graphics clock", where,
                                        SUPPORTED_CLOCKS_HELP)
                continue
            if len(g) > 2:
                yield ctx.diag(self, path, f"locked graphics clock for {where} lists {len(g)} values; a range "
                                           "has two",
                               help="write one value (`graphics_mhz: 1980`) or a range (`graphics_mhz: [1500, 1980]`)")
                continue
            for i, v in enumerate(g):
                yield from _range_check(self, ctx, gpu, path + (i,), v, "locked graphics clock", where,
                                        SUPPORTED_CLOCKS_HELP)
            if len(g) == 2 and g[0] > g[1]:
                yield ctx.diag(self, path, f"locked graphics clock range for {where} is [{g[0]}, {g[1]}]: the "
                                           "minimum is above the maximum",
                               help=f"write it as [{g[1]}, {g[0]}]")


class MemoryClockUnsupported(_ClockCheck):
    """A memory clock (locked, or the memory half of application clocks) the GPU does not support.

    HBM GPUs support one or a few memory clocks only (H100 SXM: 2619 MHz, B200: 3996 MHz);
    `nvidia-smi -lmc` and `-ac` refuse any other value. The help line lists the supported ones.
    """

    code = "K502"
    name = "memory-clock-unsupported"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, gpu, base, owner, where in _scopes(ctx):
            values: list[tuple[tuple, int, str]] = []
            clocks: Clocks | None = getattr(owner, "clocks", None)
            if clocks is not None and clocks.memory_mhz is not None:
                values.append((base + ("clocks", "memory_mhz"), clocks.memory_mhz, "locked memory clock"))
            app: ApplicationClocks | None = getattr(owner, "application_clocks", None)
            if app is not None:
                values.append((base + ("application_clocks", "memory_mhz"), app.memory_mhz,
                               "application memory clock"))
            supported = gpu.memory_mhz
            for path, v, kind in values:
                if supported and v not in supported:
                    listed = ", ".join(f"{s} MHz" for s in supported)
                    yield ctx.diag(self, path, f"{kind} {v} MHz for {where} is not a memory clock {gpu.name} "
                                               "supports",
                                   help=f"{gpu.name} supports: {listed} ({SUPPORTED_CLOCKS_HELP})",
                                   notes=_note(gpu, "memory_mhz", "the memory clocks"))


class PowerLimitOutOfRange(_ClockCheck):
    """A power limit outside the range the GPU accepts.

    `power_limit_w` becomes `nvidia-smi -pl <W>`, which refuses values outside the GPU's minimum
    and maximum enforced power limits (`nvidia-smi -q -d POWER`).
    """

    code = "K503"
    name = "power-limit-out-of-range"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for gpu, base, w, where in _setting(ctx, "power_limit_w"):
            lo, hi = gpu.power_w
            help = f"{gpu.name} accepts {lo}-{hi} W (`nvidia-smi -q -d POWER` shows the enforced limits)"
            if w < lo:
                yield ctx.diag(self, base + ("power_limit_w",), f"power limit {w} W for {where} is below the "
                                                                 f"minimum {gpu.name} accepts ({lo} W)",
                               help=help, notes=_note(gpu, "power_w_min", "the minimum power limit"))
            elif w > hi:
                yield ctx.diag(self, base + ("power_limit_w",), f"power limit {w} W for {where} is above the "
                                                                 f"maximum {gpu.name} accepts ({hi} W)",
                               help=help, notes=_note(gpu, "power_w_max", "the maximum power limit"))


class MigClocksNotLocked(_ClockCheck):
    """A GPU split into several MIG instances runs with unlocked clocks.

    All MIG instances of a GPU share its SM and memory clocks: they cannot be set per instance.
    With floating (boost) clocks, one instance's load changes the clock its neighbours run at,
    through power and thermal headroom, so a busy neighbour adds latency to every other model on
    the GPU, most visibly in the tail. Locking the graphics clock (`nvidia-smi -lgc`) makes each
    instance's speed independent of its neighbours' load (a lock is still a request: power and
    thermal limits can hold the clock below it).
    """

    code = "K504"
    name = "mig-clocks-not-locked"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host in ctx.ir.hosts.items():
            if host.gpu is None or host.spec.clocks is not None:
                continue
            for a_idx, a in enumerate(host.spec.gpus):
                if a.mig is None or a.clocks is not None or len(a.mig) < 2:
                    continue
                hi = host.gpu.graphics_mhz[1]
                each = " each" if len(a.indexes) > 1 else ""
                yield ctx.diag(self, ("hosts", hname, "gpus", a_idx, "mig"),
                               f"{_gpus_text(a.indexes)} of host {hname!r}{each} split into {len(a.mig)} MIG "
                               f"instances {'are' if each else 'is'} not clock-locked: all instances share the GPU's "
                               "SM and memory clocks, so one instance's load changes the clock its neighbours run at "
                               "and adds tail latency",
                               key=True,
                               help=f"lock the clock on the host or this entry: `clocks: {{graphics_mhz: {hi}}}`")


class ApplicationClockOutOfRange(_ClockCheck):
    """An application graphics clock outside the range the GPU supports.

    `application_clocks` becomes `nvidia-smi -ac <memory>,<graphics>`; the driver accepts only
    supported clock pairs. The memory half is checked by K502.
    """

    code = "K505"
    name = "application-clock-out-of-range"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for gpu, base, app, where in _setting(ctx, "application_clocks"):
            yield from _range_check(self, ctx, gpu, base + ("application_clocks", "graphics_mhz"), app.graphics_mhz,
                                    "application graphics clock", where, SUPPORTED_CLOCKS_HELP)
