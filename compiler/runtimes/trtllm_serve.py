"""trtllm-serve: TensorRT-LLM's OpenAI-compatible server on the model's checkpoint (data/trtllm_serve.json).

It reads the model's LLM-API options file (`llmapi-options/<model>`, the file Triton's llmapi
model reads as model.yaml) at layout.OPTIONS_DIR/<model>/ in the image. One process per unit:
the LLM spawns its own tp * pp workers, so the command has no launcher.
"""

from __future__ import annotations

from compiler.serving import layout

from .base import LISTEN, ServingRuntime, Unit


def options_path(model: str, role: str | None = None) -> str:
    """Where the model's LLM-API options file sits in the serving image (trtllm-serve's options_flag);
    under disaggregated serving each role has its own, in a directory of the role's name."""
    where = f"{model}/{role}" if role is not None else model
    return f"{layout.OPTIONS_DIR}/{where}/{layout.LLMAPI_OPTIONS}"


class TrtllmServe(ServingRuntime):
    name = "trtllm-serve"
    data_file = "trtllm_serve.json"

    def command(self, unit: Unit) -> list[str]:
        command = [self.data["program"], layout.model_dir(unit.model), self.data["options_flag"],
                   options_path(unit.model, unit.role),
                   "--host", LISTEN, "--port", str(unit.ports["http"]), "--backend", "pytorch",
                   "--tp_size", str(unit.tp), "--pp_size", str(unit.pp)]
        if unit.ep > 1:
            command += ["--ep_size", str(unit.ep)]
        return command

    def files(self, unit: Unit) -> list[str]:
        return [f"{layout.model_dir(unit.model)}/config.json", options_path(unit.model, unit.role)]


RUNTIME = TrtllmServe()
