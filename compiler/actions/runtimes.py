"""What a serving unit runs inside its container: compiler/runtimes (one module and one data file
per serving runtime), re-exported for the actions that start units (host script, image
entrypoint, Kubernetes container)."""

from __future__ import annotations

from compiler.runtimes import (ENTRYPOINT, NAMES, REGISTRY, ServingCommandError, UnitServing, check_command,
                               container_options, flag_value, get, health_command, options_path, ready_timeout_s,
                               serving_image_needs, unit_serving)
from compiler.runtimes.base import container
from compiler.serving.layout import OPTIONS_DIR

RUNTIMES = NAMES

__all__ = ["ENTRYPOINT", "OPTIONS_DIR", "RUNTIMES", "ServingCommandError", "UnitServing", "check_command",
           "container_options", "flag_value", "get", "health_command", "options_path", "ready_timeout_s",
           "serving_image_needs", "table", "unit_serving", "ir_unit_serving"]


def table() -> dict:
    """Every runtime's data by name, and the container's (the tests read the flag sets here)."""
    return {**{name: r.data for name, r in REGISTRY.items()}, "container": container()}


def ir_unit_serving(ir, unit) -> UnitServing:
    """The serving of one IR unit: its model's runtime and parallelism on the spec's target (the
    host script and the image both place it)."""
    m = ir.models[unit.model].spec
    par = m.parallelism_of(unit.role)  # a disaggregated role's server: the role's, on its own options
    role = unit.role if m.serving.disaggregated is not None else None
    return unit_serving(m.serving.runtime, ir.target, unit.model, unit.ports.as_dict(), tp=par.tp,
                        pp=par.pp, ep=par.ep, gpus=len(unit.gpu_indexes), role=role)
