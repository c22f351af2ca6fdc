"""Serving runtimes: what a serving unit runs inside its container, one module and one data file
per runtime behind the ServingRuntime protocol (base.py).

  base.py           the protocol, the typed output (UnitServing), the shared command checker and
                    the container's docker run options (data/container.json)
  triton.py         tritonserver on the host's model repository (data/triton.json)
  trtllm_serve.py   trtllm-serve on the model's checkpoint and options file (data/trtllm_serve.json)
  trtllm_disaggregated.py  trtllm-serve disaggregated, the router of a disaggregated model
                    (data/trtllm_disaggregated.json)
  dynamo_trtllm.py  Dynamo's TensorRT-LLM worker, a DynamoGraphDeployment's component on a node
                    pool (data/dynamo_trtllm.json)
  dynamo_frontend.py  Dynamo's frontend, the DGD's OpenAI endpoint and (disaggregated) router
                    (data/dynamo_frontend.json)

REGISTRY is the only list of runtimes: the spec's `serving.runtime` choices are its names (a test
holds them equal), and every caller asks a runtime object instead of comparing names. ROUTER
(trtllm_disaggregated.py) is the process in front of a disaggregated model's servers, not a
`serving.runtime` choice; nor are WORKER (dynamo_trtllm.py) and FRONTEND (dynamo_frontend.py),
which `kubernetes.runtime: dynamo` runs.
"""

from __future__ import annotations

from .base import (ENTRYPOINT, Ignored, ServingCommandError, ServingRuntime, Unit, UnitServing, check_argv,
                   container_options, flag_value, health_command, ready_timeout_s)
from .dynamo_frontend import FRONTEND
from .dynamo_trtllm import WORKER
from .trtllm_disaggregated import ROUTER
from .triton import RUNTIME as TRITON
from .trtllm_serve import RUNTIME as TRTLLM_SERVE
from .trtllm_serve import options_path

REGISTRY: dict[str, ServingRuntime] = {r.name: r for r in (TRITON, TRTLLM_SERVE)}
NAMES = tuple(REGISTRY)

__all__ = ["ENTRYPOINT", "FRONTEND", "NAMES", "REGISTRY", "ROUTER", "WORKER", "Ignored", "ServingCommandError",
           "ServingRuntime", "Unit", "UnitServing", "check_argv", "check_command", "container_options", "flag_value",
           "get", "health_command", "options_path", "ready_timeout_s", "unit_serving"]


def get(name: str) -> ServingRuntime:
    """The runtime of a `serving.runtime` value."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ServingCommandError(f"unknown serving runtime {name!r} (known: {', '.join(NAMES)})") from None


def check_command(runtime: str, argv: list[str]) -> list[str]:
    """Each problem of `argv` against the flag set of runtime `runtime` (empty when it fits)."""
    return check_argv(get(runtime).data, argv)


def unit_serving(runtime: str, target: str, model: str, ports: dict[str, int], tp: int = 1, pp: int = 1,
                 ep: int = 1, gpus: int = 1, role: str | None = None) -> UnitServing:
    """The serving of one unit (pure): its runtime's command, paths and container options."""
    return get(runtime).serve(Unit(model=model, target=target, ports=dict(ports), tp=tp, pp=pp, ep=ep, gpus=gpus,
                                   role=role))


def serving_image_needs(runtime_names) -> set[str]:
    """The artifacts (repository, options) a serving image must hold for runtimes `runtime_names`."""
    return {a for n in runtime_names for a in get(n).artifacts}
