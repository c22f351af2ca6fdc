"""Runtime `dynamo`: a DynamoGraphDeployment (nvidia.com/v1beta1, the version Dynamo >= 1.5 stores)
per model, and the ConfigMap holding its LLM-API options.

Shape (ai-dynamo/dynamo deploy/operator/api/v1beta1: DynamoGraphDeploymentSpec,
DynamoComponentDeploymentSharedSpec; the DGDs Dynamo's profiler writes, dynamo/profiler/templates/
dgd/trtllm/agg.yaml in the ai-dynamo 1.6.1 wheel):
  spec.backendFramework   trtllm
  spec.components[]       `frontend` (type frontend: `python3 -m dynamo.frontend`, no GPU) and one
                          worker per device shape and pool that serves the model (type worker:
                          `python3 -m dynamo.trtllm --model-path --served-model-name
                          --extra-engine-args FILE`), each with a podTemplate whose container is
                          named `main` (the operator merges its defaults into that container)
The worker runs Kiln's serving image of its pool (its base is Dynamo's tensorrtllm-runtime image,
`image.base`, K853), with the checkpoint at /opt/kiln/models/<model> (the model's weights image
mounted there as an image volume, or in the serving image with `node_pool.weights: in-image`) and
the options file from the ConfigMap, whose name carries its content digest so that new options roll
the workers. Dynamo's PVC model cache is not used: it is the DynamoGraphDeploymentRequest's, not a
DGD field, and the DGD's podTemplate takes the same image volume as a Deployment's pods.
`runtimeVersionOverride` names the Dynamo release: Kiln's image tags are content digests, not
Dynamo versions, and admission needs a version it can parse.

Power: the node's, on either runtime (node-layer/gpu-tuning.yaml, the tuning DaemonSet): no worker
carries `dynamo.nvidia.com/gpu-power-limit`, which only Dynamo's Power Agent (a separate chart)
applies and which Dynamo's webhook forbids changing on a live DGD (catalog/data/k8s_controllers.json).
"""

from __future__ import annotations

import hashlib
import json

from compiler.actions.disaggregated import component_type
from compiler.ir.k8s_names import options_configmap_prefix
from compiler.runtimes import FRONTEND, WORKER
from compiler.serving import layout

from compiler.catalog import k8s_controllers

from . import meta
from .runtime import container_security, shm_gib, weights_mount, weights_volume
from .workloads import RELAYOUT_WAVE, serving_pod, shape

API_VERSION = "nvidia.com/v1beta1"
POWER_ANNOTATION = "dynamo.nvidia.com/gpu-power-limit"
OPTIONS_DIR = WORKER.options_dir  # where the worker reads its LLM-API options (the ConfigMap's mount)
OPTIONS_FILE = WORKER.data["options_file"]
# Argo CD prunes a replaced options ConfigMap last, once the DGD is healthy (its managed rolling
# update has retired the old workers that mount it): argo-cd docs/user-guide/sync-options.md.
KEEP_UNTIL_ROLLED = {"argocd.argoproj.io/sync-options": "PruneLast=true"}


def options_configmap_name(model: str, options: bytes) -> str:
    return options_configmap_prefix(model) + f"{hashlib.sha256(options).hexdigest()[:8]}"


def options_configmap(*, model: str, spec_name: str, namespace: str, options: bytes) -> dict:
    md = meta.metadata(options_configmap_name(model, options), spec_name, namespace=namespace,
                       labels_=meta.labels(spec_name, model=model))
    md["annotations"].update(KEEP_UNTIL_ROLLED)
    md["annotations"]["argocd.argoproj.io/sync-wave"] = "-2"  # before the DGD (wave -1) whose workers mount it
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {OPTIONS_FILE: options.decode("utf-8")}}


def frontend(*, image: str, version: str, args: list[str] = ()) -> dict:
    """`args`: a disaggregated model's routing (--router-mode kv --kv-cache-block-size <workers'>)."""
    argv = FRONTEND.argv(args)  # compiler/runtimes/dynamo_frontend.py
    return {"name": "frontend", "type": "frontend", "replicas": 1, "runtimeVersionOverride": version,
            "podTemplate": {"spec": {"containers": [
                {"name": "main", "image": image, "command": argv[:1], "args": argv[1:]}]}}}


def planner(*, image: str, version: str, config: dict) -> dict:
    """Dynamo's planner (type planner), scaling the prefill and decode components against the sla
    (catalog/data/disaggregated.json, dynamo_planner)."""
    return {"name": "planner", "type": "planner", "replicas": 1, "runtimeVersionOverride": version,
            "podTemplate": {"spec": {"containers": [
                {"name": "main", "image": image, "command": ["python3"],
                 "args": ["-m", "dynamo.planner", "--config", json.dumps(config, sort_keys=True)]}]}}}


def worker(*, name: str, model: str, spec_name: str, pool: str, replicas: int, image: str, version: str,
           resource: str, count: int, selector: dict[str, str], gpu_product: str | None, options_configmap_: str,
           power_limit_w: int | None, pod_resources: dict, weights: str | None = None, role: str | None = None,
           env: dict[str, str] | None = None, kv_events: bool = False, max_surge: int | None = 0,
           max_unavailable: int = 1) -> dict:
    """Rolling updates at the pace Kiln chose instead of the operator's 25%/25%
    (rolling_update_annotations): `max_surge` new workers on a pool with room and none taken out
    first, or on a full pool none added and one at a time (k8s_dgd.dgd_params). `weights`: the
    model's weights image by digest, mounted at `--model-path` (None: in the serving image).
    `kv_events`: a disaggregated role's worker publishes its KV-cache events to the frontend's
    KV router (--publish-events-and-metrics). `max_surge` None: no pace annotations, for a DGD on the
    Grove pathway, whose operator does not read them (Grove rolls 1 at a time: k8s_controllers.json
    rolling_update.grove_rollout)."""
    surge, unavailable = k8s_controllers.rolling_update_annotations()
    pace = {} if max_surge is None else {surge: str(max_surge), unavailable: str(max_unavailable)}
    argv = WORKER.argv(model, role, kv_events)  # compiler/runtimes/dynamo_trtllm.py
    template: dict = {
        # the shape label is what the worker's PodDisruptionBudget selects (with model and pool)
        "metadata": {"labels": meta.labels(spec_name, model=model, pool=pool, shape=shape(resource, count)),
                     "annotations": pace},
        "spec": {
            **serving_pod(selector, gpu_product),
            "containers": [{
                "name": "main",
                "image": image,
                "command": argv[:3],  # python3 -m dynamo.trtllm
                "args": argv[3:],
                "resources": {"requests": {**pod_resources["requests"], resource: str(count)},
                              "limits": {**pod_resources["limits"], resource: str(count)}},
                "securityContext": container_security(),
                "volumeMounts": [{"name": "llm-api-options", "mountPath": OPTIONS_DIR, "readOnly": True}]
                                + ([weights_mount(layout.model_dir(model))] if weights else []),
            }],
            "volumes": [{"name": "llm-api-options", "configMap": {"name": options_configmap_}}]
                       + ([weights_volume(weights)] if weights else []),
        },
    }
    if power_limit_w is not None:
        template["metadata"]["annotations"][POWER_ANNOTATION] = str(power_limit_w)
    if env:
        template["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    # a disaggregated role's component has the role's type (prefill, decode): what the planner scales
    kind = component_type(role) if role is not None else "worker"
    return {"name": name, "type": kind, "replicas": replicas, "runtimeVersionOverride": version,
            "sharedMemorySize": f"{shm_gib(count)}Gi", "podTemplate": template}


def graph_deployment(*, model: str, spec_name: str, namespace: str, components: list[dict],
                     artifacts: dict[str, str], grove: bool = False) -> dict:
    """Synced in the re-layout Job's wave (-1), like the Deployments (workloads.RELAYOUT_WAVE): a worker
    whose MIG profile changes rolls onto each node's new slices as the Job frees them (review N1).
    `grove`: the pathway the spec declares (kubernetes.dynamo.grove), written as nvidia.com/enable-grove
    either way, so that the operator's choice on creation is the spec's and not its Helm setting's
    (catalog k8s_controllers.json rolling_update.pathway)."""
    md = meta.metadata(model, spec_name, namespace=namespace, labels_=meta.labels(spec_name, model=model),
                       artifacts=artifacts)
    md["annotations"]["argocd.argoproj.io/sync-wave"] = RELAYOUT_WAVE
    md["annotations"][k8s_controllers.dynamo_rollout()["grove_rollout"]["annotation"]] = "true" if grove else "false"
    return {"apiVersion": API_VERSION, "kind": "DynamoGraphDeployment", "metadata": md,
            "spec": {"backendFramework": "trtllm", "components": components}}
