"""What a serving container runs on Kubernetes and how Kubernetes probes it, per serving runtime.

One function, `serving_container(runtime, ...)`, gives the container's command, ports and probe
paths for a model; the Deployment builder (workloads.py) only places them. Runtimes:

  triton        tritonserver on the image's model repository, loading the model (the same command
                the image entrypoint runs for a unit, with the model's own ports: a pod has its
                own network namespace, so replicas need no port offset). Probes: Triton's KServe
                v2 health endpoints, GET /v2/health/live (liveness) and /v2/health/ready
                (readiness: every loaded model is ready) (kserve/kserve
                docs/predict-api/v2/required_api.md, Health; Triton implements it).

SEAM for `serving.runtime: trtllm-serve` (branch i12c, compiler/actions/runtimes.py): add a
`trtllm-serve` entry to RUNTIMES that takes its command from `runtimes.unit_serving(...)` (the
argv the host script and the image entrypoint use) and probes `/health` (liveness) and
`/health` + `/v1/models` (readiness) from `runtimes.table()["trtllm-serve"]["ready"]`; it has one
port (http). `runtime_of(model)` then returns the model's `serving.runtime`.

Model loading takes minutes (a 70B checkpoint over eight GPUs) to tens of minutes, and Triton
answers no endpoint before its models are loaded, so a startup probe holds liveness off for
STARTUP_S (the host script's readiness bound: 1800 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from compiler.serving import layout

STARTUP_S = 1800
PROBE_PERIOD_S = 10
SHM_SIZE = "2Gi"  # Python backend instances take 64 MB of /dev/shm each and grow (python_backend README)


@dataclass(frozen=True)
class ServingContainer:
    command: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (name, port)
    liveness: str  # HTTP path on the `http` port
    readiness: str


def _triton(target: str, model: str, ports: dict[str, int]) -> ServingContainer:
    # The engine target's ensemble is named after the model; loading it loads its steps.
    command = ("tritonserver", f"--model-repository={layout.REPOSITORY_DIR}", "--model-control-mode=explicit",
               f"--load-model={model}", f"--http-port={ports['http']}", f"--grpc-port={ports['grpc']}",
               f"--metrics-port={ports['metrics']}")
    return ServingContainer(command, (("http", ports["http"]), ("grpc", ports["grpc"]), ("metrics", ports["metrics"])),
                            liveness="/v2/health/live", readiness="/v2/health/ready")


RUNTIMES: dict[str, Callable[[str, str, dict[str, int]], ServingContainer]] = {"triton": _triton}


def runtime_of(model_spec) -> str:
    """The serving runtime of a model (`serving.runtime` where the spec has it; Triton before)."""
    return getattr(model_spec.serving, "runtime", "triton")


def serving_container(runtime: str, target: str, model: str, ports: dict[str, int]) -> ServingContainer:
    try:
        build = RUNTIMES[runtime]
    except KeyError:
        raise ValueError(f"serving runtime {runtime!r} has no Kubernetes container yet "
                         f"(known: {', '.join(sorted(RUNTIMES))})") from None
    return build(target, model, ports)


def probes(container: ServingContainer) -> dict:
    """startupProbe, livenessProbe and readinessProbe of the container (pure)."""
    def get(path: str) -> dict:
        return {"httpGet": {"path": path, "port": "http"}}
    return {
        "startupProbe": {**get(container.liveness), "periodSeconds": PROBE_PERIOD_S,
                         "failureThreshold": STARTUP_S // PROBE_PERIOD_S},
        "livenessProbe": {**get(container.liveness), "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {**get(container.readiness), "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": 5,
                           "failureThreshold": 3},
    }
