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
# A rollout may wait for an image pull and a load before a pod is Ready: the Deployment's progress
# deadline covers both, or Argo CD marks every slow rollout Degraded (gitops-engine
# health_deployment.go: ProgressDeadlineExceeded -> Degraded).
PULL_S = 900
PROGRESS_DEADLINE_S = STARTUP_S + PULL_S
# In-flight streamed generations finish after SIGTERM; the endpoint leaves the Service first.
PRESTOP_SLEEP_S = 5
GRACE_S = 120
GIB = 1024 ** 3
RUNTIME_OVERHEAD_GIB = 8  # server processes, tokenizer, CUDA host allocations beside the checkpoint
NONROOT_UID = 1000  # the unprivileged user of NVIDIA's NGC serving images


def shm_gib(gpus: int) -> int:
    """/dev/shm per pod: 2 GiB for one device (Python backend instances take 64 MB each and grow,
    python_backend README), 1 GiB per GPU beyond for NCCL's shared-memory transport, so a tp=8
    pod gets 8 GiB, Dynamo's operator default (dynamocomponentdeployment_types.go sharedMemorySize)."""
    return max(2, gpus)


def pod_resources(weight_bytes: float, gpus: int, mig: bool, cpu: int | None = None,
                  memory_gib: int | None = None) -> dict:
    """CPU and memory requests and limits of a serving container, so that it is not BestEffort
    (extended resources do not count toward QoS): memory for the checkpoint the server reads
    through host memory while loading, the runtime beside it and the memory-backed /dev/shm; the
    limit adds the checkpoint once more for the page cache of the load. `cpu`/`memory_gib` override."""
    weights = -(-int(weight_bytes) // GIB)
    mem = memory_gib if memory_gib is not None else weights + RUNTIME_OVERHEAD_GIB + shm_gib(gpus)
    cores = cpu if cpu is not None else (2 if mig else 4 * gpus)
    return {"requests": {"cpu": str(cores), "memory": f"{mem}Gi"},
            "limits": {"cpu": str(2 * cores), "memory": f"{mem + weights}Gi"}}


def container_security() -> dict:
    """The `restricted` Pod Security profile's container fields."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
            "runAsUser": NONROOT_UID, "seccompProfile": {"type": "RuntimeDefault"}}


def lifecycle() -> dict:
    """A short sleep before SIGTERM: the endpoint leaves the Service before the server stops accepting."""
    return {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_S}}}


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


WEIGHTS_VOLUME = "weights"


def weights_volume(reference: str) -> dict:
    """The pod volume of a model's weights image (compiler/actions/weights_image.py), pinned by digest:
    a Kubernetes image volume, which the kubelet pulls like a container image and caches per node,
    mounted read-only (catalog/data/k8s_controllers.json image_volume). IfNotPresent: a digest never
    names other content, so a node that has it pulls nothing."""
    return {"name": WEIGHTS_VOLUME, "image": {"reference": reference, "pullPolicy": "IfNotPresent"}}


def weights_mount(model_dir: str) -> dict:
    """Where the runtime reads the checkpoint, as in a host's serving image (serving/layout.model_dir)."""
    return {"name": WEIGHTS_VOLUME, "mountPath": model_dir, "readOnly": True}
