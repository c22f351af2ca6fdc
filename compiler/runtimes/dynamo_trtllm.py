"""Dynamo's TensorRT-LLM worker: `python3 -m dynamo.trtllm`, one component of a model's
DynamoGraphDeployment on a node pool (data/dynamo_trtllm.json). It loads the checkpoint at the
image's models directory and the LLM-API options the DGD mounts from a ConfigMap; a disaggregated
role's worker adds its mode and, under KV-aware routing, publishes its KV-cache events
(catalog/data/disaggregated.json: dynamo, kv_events).

Like the router (trtllm_disaggregated.py) it is not a choice of `serving.runtime`: the spec's
`kubernetes.runtime: dynamo` picks it, and compiler/targets/kubernetes/dynamo.py writes its argv
into the worker's container (WORKER, outside REGISTRY).
"""

from __future__ import annotations

from compiler.catalog import disaggregated as facts
from compiler.serving import layout

from .base import ServingRuntime, Unit


class DynamoTrtllm(ServingRuntime):
    name = "dynamo-trtllm"
    data_file = "dynamo_trtllm.json"

    @property
    def options_dir(self) -> str:
        return self.data["options_dir"]

    @property
    def options_path(self) -> str:
        return f"{self.data['options_dir']}/{self.data['options_file']}"

    def role_args(self, role: str, kv_aware: bool = False) -> list[str]:
        """What a role's worker adds: its mode and, under KV-aware routing, the flag that publishes
        its KV-cache events to the frontend's router (default off: the router would learn nothing)."""
        args = [facts.fact("dynamo")["worker_flag"], role]
        events = facts.fact("kv_events", "dynamo")
        if kv_aware and role in events["roles"]:
            args.append(events["worker_flag"])
        return args

    def command(self, unit: Unit, kv_aware: bool = False) -> list[str]:
        return [self.data["program"], "-m", self.data["module"], "--model-path", layout.model_dir(unit.model),
                "--served-model-name", unit.model, "--extra-engine-args", self.options_path,
                *(self.role_args(unit.role, kv_aware) if unit.role is not None else [])]

    def argv(self, model: str, role: str | None = None, kv_aware: bool = False) -> list[str]:
        """The worker's argv for `model` (a role's, under disaggregated serving), checked against
        its flag table."""
        return self.checked(self.command(Unit(model=model, target=self.targets[0], ports={}, role=role), kv_aware),
                            model)

    def files(self, unit: Unit) -> list[str]:
        return [layout.model_dir(unit.model), self.options_path]


WORKER = DynamoTrtllm()
