"""Dynamo's frontend: `python3 -m dynamo.frontend`, the component of a model's DynamoGraphDeployment
that serves the OpenAI API and routes to its workers (data/dynamo_frontend.json). For a
disaggregated model it is the router: with `router.kv_aware` it routes by KV-cache blocks of the
workers' size (catalog/data/disaggregated.json: dynamo).

Not a choice of `serving.runtime` (FRONTEND, outside REGISTRY): compiler/targets/kubernetes/dynamo.py
writes its argv into the frontend's container.
"""

from __future__ import annotations

from compiler.catalog import disaggregated as facts

from .base import ServingRuntime, Unit


class DynamoFrontend(ServingRuntime):
    name = "dynamo-frontend"
    data_file = "dynamo_frontend.json"

    def routing_args(self, kv_block_size: int | None) -> list[str]:
        """KV-aware routing in the workers' block size (the frontend's own default would differ from a
        tokens_per_block the spec sets); [] routes as the frontend does by default."""
        if kv_block_size is None:
            return []
        dyn = facts.fact("dynamo")
        return [dyn["frontend_router_mode_flag"], dyn["frontend_kv_router_mode"], dyn["frontend_block_size_flag"],
                str(kv_block_size)]

    def command(self, unit: Unit, args: list[str] = ()) -> list[str]:
        return [self.data["program"], "-m", self.data["module"], *args]

    def argv(self, args: list[str] = (), model: str = "") -> list[str]:
        """The frontend's argv with `args` (routing_args), checked against its flag table."""
        return self.checked(self.command(Unit(model=model, target=self.targets[0], ports={}), list(args)), model)

    def files(self, unit: Unit) -> list[str]:
        return []


FRONTEND = DynamoFrontend()
