"""Runtime `deployment`: per workload a Deployment and a PodDisruptionBudget, per model a Service.

A workload is the replicas of one model on one device shape of one node pool (compiler/ir/pools.py).
Each pod runs Kiln's serving image of the pool, pinned by digest, with the container its serving
runtime defines (runtime.py), the MIG device or GPUs it requests, /dev/shm as memory, and (unless
the pool keeps weights in its image) its model's weights image mounted read-only at the model's
directory (runtime.weights_volume).

Rolling updates replace a node's worth of pods at a time (the workload's pods on the pool's
`max_unavailable` nodes, as its PodDisruptionBudget allows) without a surge pod (maxSurge 0): a
pool's devices are all assigned, so a surge pod could never be scheduled, and with maxUnavailable 1
a 32-replica workload rolled one pod per load (hours; issue 32's simulation). A change of the pods'
device shape (tp 8 -> 4) cannot roll at that pace on a full pool: no new pod fits until a node's
old pods are gone, so the Deployment then takes out the count that frees the pool's
`max_unavailable` nodes at once and keeps the old pods outside them, the pool's declared floor
(k8s_deployment.reshape_unavailable, from kiln.lock). The Service spans every pool that serves the model.

The selector is the workload label alone (`kiln.io/workload: <name>`): a Deployment's selector is
immutable, so it holds nothing that can change while the name stays (not the spec's name). The
progress deadline covers a pull and a load (runtime.PROGRESS_DEADLINE_S); pods have CPU and
memory requests, a grace period with a preStop sleep, and the `restricted` security fields.
"""

from __future__ import annotations

from . import meta
from compiler.serving.layout import model_dir

from .runtime import (GRACE_S, PROGRESS_DEADLINE_S, ServingContainer, container_security, lifecycle, probes,
                      shm_gib, weights_mount, weights_volume)


RELAYOUT_WAVE = "-1"  # the re-layout Job's sync wave (nodelayer.relayout_job)


def _selector(workload: str) -> dict[str, str]:
    return {meta.WORKLOAD_LABEL: workload}


def pod_security() -> dict:
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def node_selector(selector: dict[str, str], gpu_product: str | None) -> dict[str, str]:
    out = dict(selector)
    if gpu_product:
        out[meta.GPU_PRODUCT_LABEL] = gpu_product
    return dict(sorted(out.items()))


def tolerations() -> list[dict]:
    """GPU nodes are commonly tainted `nvidia.com/gpu:NoSchedule` so that only GPU pods land there."""
    return [{"key": meta.GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}]


def serving_pod(selector: dict[str, str], gpu_product: str | None) -> dict:
    """What every serving pod's spec begins with (a Deployment's, a DGD worker's): no API token, the
    pool's nodes (and their taint), non-root, and the grace its server needs to drain."""
    return {"automountServiceAccountToken": False, "nodeSelector": node_selector(selector, gpu_product),
            "tolerations": tolerations(), "securityContext": pod_security(), "terminationGracePeriodSeconds": GRACE_S}


def deployment(*, name: str, spec_name: str, namespace: str, pool: str, model: str, replicas: int,
               image: str, container: ServingContainer, resource: str, count: int, selector: dict[str, str],
               gpu_product: str | None, artifacts: dict[str, str], pod_resources: dict,
               weights: str | None = None, max_unavailable: int = 1, max_surge: int = 0) -> dict:
    """`pod_resources`: CPU and memory requests and limits (runtime.pod_resources). `weights`: the
    model's weights image by digest, mounted at its model directory (None: in the serving image).
    `max_unavailable`: pods the rolling update may take out at once (k8s_deployment.rollout_unavailable);
    `max_surge`: pods it may add on free devices (k8s_deployment.rollout_surge; 0 on a full pool)."""
    pod_labels = meta.labels(spec_name, model=model, workload=name, pool=pool, shape=shape(resource, count))
    main = {
        "name": "server",
        "image": image,
        "command": list(container.command),
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in container.ports],
        "resources": {"requests": {**pod_resources["requests"], resource: str(count)},
                      "limits": {**pod_resources["limits"], resource: str(count)}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]
                        + ([weights_mount(model_dir(model))] if weights else []),
        "securityContext": container_security(),
        "lifecycle": lifecycle(),
        **probes(container),
    }
    md = meta.metadata(name, spec_name, namespace=namespace, labels_=pod_labels, artifacts=artifacts)
    # synced with the re-layout Job (wave -1), not after it: a workload whose device shape changes
    # rolls onto each node's new slices as the Job frees them, instead of losing every old pod to the
    # Job's evictions first (review N1); the budgets serialise the Job's evictions with the rollout
    md["annotations"]["argocd.argoproj.io/sync-wave"] = RELAYOUT_WAVE
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": md,
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": PROGRESS_DEADLINE_S,
            "selector": {"matchLabels": _selector(name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    **serving_pod(selector, gpu_product),
                    "containers": [main],
                    "volumes": [{"name": "dshm",
                                 "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(count)}Gi"}}]
                               + ([weights_volume(weights)] if weights else []),
                },
            },
        },
    }


def shape(resource: str, count: int) -> str:
    """The device shape label of a pod: nvidia.com/mig-3g.40gb x1 -> mig-3g-40gb, nvidia.com/gpu x8 -> gpu-8."""
    base = resource.split("/", 1)[1]
    return "".join(c if c.isalnum() else "-" for c in base) + (f"-{count}" if count > 1 or base == "gpu" else "")


def disruption_budget(*, name: str, spec_name: str, namespace: str, pool: str, model: str,
                      max_unavailable: int = 1, shape_: str, by_workload: bool = True) -> dict:
    """`max_unavailable`: the workload's pods on the nodes one re-layout batch takes out (its pods
    per node times the pool's max_unavailable nodes): with every slice assigned an evicted pod stays
    Pending until its node is back, so a smaller budget would refuse the batch's evictions forever.

    It selects the workload's pods of its device shape only, and syncs before the re-layout Job
    (wave -2): when a re-layout changes the workload's shape, the old pods (whose slices the
    re-layout destroys, and which could never come back) are outside every budget, so evicting
    them does not deadlock; pods whose shape stays are protected as before. A DynamoGraphDeployment's
    worker pods carry no workload label: `by_workload=False` selects them by model, pool and shape."""
    md = meta.metadata(name, spec_name, namespace=namespace, labels_=meta.labels(spec_name, model=model, workload=name,
                                                                                pool=pool))
    md["annotations"]["argocd.argoproj.io/sync-wave"] = "-2"
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": md,
        "spec": {"maxUnavailable": max_unavailable,
                 "selector": {"matchLabels": {**(_selector(name) if by_workload else
                                                 {meta.MODEL_LABEL: model, meta.POOL_LABEL: pool}),
                                              meta.SHAPE_LABEL: shape_}}},
    }


# appProtocol of each port (core/v1 ServicePort; review S3): meshes and gateways pick HTTP/2 for gRPC
APP_PROTOCOL = {"http": "http", "grpc": "kubernetes.io/h2c", "metrics": "http"}


def service(*, model: str, spec_name: str, namespace: str, ports: list[tuple[str, int]]) -> dict:
    """One Service per model: its pods in every pool (selected by model, not by workload). The
    selector holds no spec name: renaming the spec rolls every pod (their labels carry it), and a
    selector on it would drop every old pod from the Service at once (review N6)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(model, spec_name, namespace=namespace, labels_=meta.labels(spec_name, model=model)),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/managed-by": meta.MANAGED_BY, meta.MODEL_LABEL: model},
            "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP",
                       **({"appProtocol": APP_PROTOCOL[n]} if n in APP_PROTOCOL else {})} for n, p in ports],
        },
    }
