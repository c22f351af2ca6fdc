"""How Kubernetes probes a serving container, and the container's shape.

The command itself is the one the host script and the image entrypoint run for a unit
(compiler/actions/runtimes.py, `unit_serving`), so a pod and a host serve a model the same way;
`k8s-deployment` builds the ServingContainer from it with the runtime table's liveness path
(Triton: GET /v2/health/live; trtllm-serve: GET /health) and its first readiness path (Triton:
/v2/health/ready, which is 200 once every loaded model is ready; trtllm-serve: /health, which
nothing answers before the model is loaded). A pod has its own network namespace, so replicas
keep the model's own ports.

Model loading takes minutes (a 70B checkpoint over eight GPUs) to tens of minutes, and neither
server answers before its models are loaded, so a startup probe holds liveness off for
STARTUP_S (the host script's readiness bound: 1800 s).
"""

from __future__ import annotations

from dataclasses import dataclass

STARTUP_S = 1800
PROBE_PERIOD_S = 10
SHM_SIZE = "2Gi"  # Python backend instances take 64 MB of /dev/shm each and grow (python_backend README)


@dataclass(frozen=True)
class ServingContainer:
    command: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (name, port)
    liveness: str  # HTTP path on the `http` port
    readiness: str


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
