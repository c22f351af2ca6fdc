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
           "serving_image_needs", "table", "unit_serving"]


def table() -> dict:
    """Every runtime's data by name, and the container's (the tests read the flag sets here)."""
    return {**{name: r.data for name, r in REGISTRY.items()}, "container": container()}
