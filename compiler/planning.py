"""Plan data derived from a validated spec (the capacity section of `kiln plan`)."""

from __future__ import annotations

from compiler.capacity.report import UnitFigures, unit_figures
from compiler.pipeline import Validation


def sizable_units(resolved):
    """(unit, resolved model, resolved host) for every serving unit that resolved far enough to size.

    Units whose shape is itself an error (tensor parallelism on a MIG slice, a GPU count that does
    not match tp*pp) are left out: their own diagnostics say why, and figures would mislead."""
    for unit in resolved.units:
        rm = resolved.models.get(unit.model)
        host = resolved.hosts[unit.host]
        if rm is None or rm.arch is None or host.gpu is None:
            continue
        group = rm.spec.parallelism.tp * rm.spec.parallelism.pp
        if unit.mig is not None and (unit.mig.profile is None or group > 1):
            continue
        if unit.mig is None and len(unit.gpu_indexes) != group:
            continue
        yield unit, rm, host


def capacity_figures(result: Validation) -> list[tuple[UnitFigures, int]]:
    """Figures for every sizable serving unit, in spec order, each with its model's max_batch_size."""
    return [(unit_figures(unit, rm.spec, rm.arch, host.gpu, host.spec.price_per_gpu_hour),
             rm.spec.limits.max_batch_size)
            for unit, rm, host in sizable_units(result.resolved)]
