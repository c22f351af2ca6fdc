"""The Resolved IR (types.py), how it is built (resolve.py) and completed (analysis.py: the passes of
passes.py, pools.py, disaggregated.py and role_capacity.py)."""

from .analysis import PASSES, analyse
from .resolve import resolve
from .types import (Formats, MigSlot, ModuleFormat, Ports, Resolved, ResolvedHost, ResolvedModel,
                    ServingUnit)

__all__ = ["PASSES", "Formats", "MigSlot", "ModuleFormat", "Ports", "Resolved", "ResolvedHost", "ResolvedModel",
           "ServingUnit", "analyse", "resolve"]
