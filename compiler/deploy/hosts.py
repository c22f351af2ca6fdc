"""The host target (compiler/deploy/base.py): hosts with `deploy: host`, their units on GPUs and MIG
instances as the units and placement passes put them; Kiln's script runs every server, and a
disaggregated model's router, as a container on the host network. What it builds, a host plan and a
provisioning script per host, is compiler/targets/hosts/."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the IR asks this target
    from compiler.ir import Resolved
    from compiler.ir.types import ServingUnit


class Hosts:
    name = "hosts"
    deploy = "host"  # the spec's `deploy` value of the hosts this target takes
    disruption_scope = "gpu"
    node_pool = False
    runs_router = True
    # what a change does to one GPU, in the order a plan lists them (compiler/targets/hosts/hostplan.py
    # says what each means; the serving image's rebuild restarts containers: compiler/actions/image.py)
    disruptions = {"mig-reslice": 0, "serving-change": 1, "container-restart": 2, "clocks": 3, "power": 4}
    undisruptive: frozenset[str] = frozenset()

    def replicas(self, host) -> int:
        return 1

    def applies(self, ir: Resolved) -> list[str]:
        return sorted(name for name, host in ir.hosts.items() if host.spec.deploy == self.deploy)

    def placement(self, ir: Resolved) -> dict[str, tuple[ServingUnit, ...]]:
        return {name: tuple(ir.host_units(name)) for name in self.applies(ir)}


TARGET = Hosts()
