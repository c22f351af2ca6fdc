"""The analysis: the passes that complete a resolved spec, in order, each a pure function from the
IR to the IR with its typed outputs set. Every fact the checks, the plan and the emitters read is
computed here once: the limits, formats, serving units and their ports, MIG placements, where a
disaggregated model's router runs, capacity figures and estimates, what each measurement record
still describes and the estimates it measures or recalibrates, each role's sizing, node pools."""

from __future__ import annotations

from .disaggregated import routers_pass
from .estimates import measurements_pass
from .passes import (Pass, capacity_pass, formats_pass, limits_pass, placements_pass, ports_pass,
                     units_pass)
from .pools import pools_pass
from .role_capacity import roles_pass
from .tune_inputs import records_pass
from .types import Resolved

PASSES: tuple[Pass, ...] = (limits_pass, formats_pass, units_pass, ports_pass, placements_pass, routers_pass,
                           capacity_pass, records_pass, measurements_pass, roles_pass, pools_pass)


def analyse(ir: Resolved, passes: tuple[Pass, ...] = PASSES) -> Resolved:
    for p in passes:
        ir = p(ir)
    return ir
