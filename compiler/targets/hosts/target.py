"""The host target (compiler/targets/base.py): hosts with `deploy: host`, their units on GPUs and MIG
instances as the units and placement passes put them."""

from __future__ import annotations

from compiler.ir import Resolved
from compiler.ir.types import ServingUnit

from . import hostplan, hostscript

DEPLOY = "host"  # the spec's `deploy` value of the hosts this target takes


class Hosts:
    name = "hosts"
    kinds = (hostplan.KIND, hostscript.KIND)
    disruption_scope = "gpu"

    def applies(self, ir: Resolved) -> list[str]:
        return sorted(name for name, host in ir.hosts.items() if host.spec.deploy == DEPLOY)

    def placement(self, ir: Resolved) -> dict[str, tuple[ServingUnit, ...]]:
        return {name: tuple(ir.host_units(name)) for name in self.applies(ir)}


TARGET = Hosts()
