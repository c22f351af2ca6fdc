"""trtllm-serve disaggregated: TensorRT-LLM's router in front of a disaggregated model's context
(prefill) and generation (decode) servers (data/trtllm_disaggregated.json).

It reads the server config Kiln writes for the model (compiler/serving/disaggregated.py
`server_config`) at layout.OPTIONS_DIR/<model>/disagg-config.yaml and waits for its servers as
long as a unit may take to load (ready_timeout_s), instead of its own 180 s. It is not a choice
of `serving.runtime`: a disaggregated model's servers are trtllm-serve units, and this runtime is
the one process in front of them (ROUTER, outside REGISTRY).
"""

from __future__ import annotations

from compiler.serving import layout

from .base import ServingRuntime, Unit, UnitServing, ready_timeout_s

CONFIG = "disagg-config.yaml"


def config_path(model: str) -> str:
    """Where the model's disaggregated server config sits in the serving image."""
    return f"{layout.OPTIONS_DIR}/{model}/{CONFIG}"


class TrtllmDisaggregated(ServingRuntime):
    name = "trtllm-serve-disaggregated"
    data_file = "trtllm_disaggregated.json"

    def command(self, unit: Unit) -> list[str]:
        return [self.data["program"], self.data["subcommand"], "--config_file", config_path(unit.model),
                "--server_start_timeout", str(ready_timeout_s()),
                "--request_timeout", str(self.data["request_timeout_s"])]

    def files(self, unit: Unit) -> list[str]:
        return [config_path(unit.model)]

    def serve(self, unit: Unit) -> UnitServing:
        """The router's container runs in the image's models directory: its KV-aware router
        tokenizes a text request with from_pretrained(request's model), and there the model's
        name (what clients send, as `kiln tune` does) is the checkpoint's directory, not a Hub id
        fetched from a container that cannot reach the Hub (catalog/data/disaggregated.json
        `router_tokenizer`)."""
        serving = super().serve(unit)
        return serving.model_copy(update={"options": ["--workdir", layout.MODELS_DIR] + serving.options})


ROUTER = TrtllmDisaggregated()
