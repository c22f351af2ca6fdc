"""The host target's action kinds, in lowering order (registered in compiler/targets/registry.py)."""

from __future__ import annotations

from compiler.targets.disruption import params_only

from . import hostplan, hostscript

KINDS = (hostplan.KIND, hostscript.KIND)

# how the target words a change of each of its kinds' parameters (compiler/targets/registry.py disruptions)
WORDING = {hostplan.KIND.kind: params_only(hostplan.plan_disruptions),
           hostscript.KIND.kind: params_only(hostscript.disruptions)}
