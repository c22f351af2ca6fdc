"""Plan data derived from a validated spec (the capacity section of `kiln plan`)."""

from __future__ import annotations

from compiler.capacity.report import UnitFigures, unit_figures
from compiler.pipeline import Validation


def capacity_figures(result: Validation) -> list[tuple[UnitFigures, int]]:
    """Figures for every serving unit that resolved far enough to size, in spec order."""
    resolved, spec = result.resolved, result.spec
    out: list[tuple[UnitFigures, int]] = []
    for unit in resolved.units:
        rm = resolved.models.get(unit.model)
        host = resolved.hosts[unit.host]
        if rm is None or rm.arch is None or host.gpu is None:
            continue
        if unit.mig is not None and (unit.mig.profile is None or rm.spec.parallelism.tp * rm.spec.parallelism.pp > 1):
            continue
        if unit.mig is None and len(unit.gpu_indexes) != rm.spec.parallelism.tp * rm.spec.parallelism.pp:
            continue
        fig = unit_figures(unit, rm.spec, rm.arch, host.gpu, host.spec.price_per_gpu_hour)
        out.append((fig, spec.models[unit.model].limits.max_batch_size))
    return out
