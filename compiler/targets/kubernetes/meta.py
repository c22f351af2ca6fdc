"""Object names, labels and annotations every Kubernetes object of a release carries."""

from __future__ import annotations

import json

from compiler.ir.k8s_names import name_problem  # noqa: F401  (re-exported)
from compiler.spec.models import DEFAULT_KUBERNETES_VERSION

#: The Kubernetes version the manifests are written and validated for (tests/test_k8s.py checks
#: every core object against its schemas with kubernetes-validate), the default of
#: `kubernetes.version`: 1.35 is the first release whose API server and kubelets take image
#: volumes (the pools' weights) without a feature gate (catalog/data/k8s_controllers.json).
KUBERNETES_VERSION = DEFAULT_KUBERNETES_VERSION

MANAGED_BY = "kiln"
SPEC_ANNOTATION = "kiln.io/spec"
SPEC_DIGEST_ANNOTATION = "kiln.io/spec-digest"  # added to every object by the release stamp (tree.py)
ARTIFACTS_ANNOTATION = "kiln.io/artifacts"  # the artifacts an object was rendered from, by content digest
POOL_LABEL = "kiln.io/pool"
MODEL_LABEL = "kiln.io/model"
WORKLOAD_LABEL = "kiln.io/workload"  # the one label of a Deployment's (immutable) selector
SHAPE_LABEL = "kiln.io/shape"  # the device a pod holds (3g-40gb, 8gpu): PodDisruptionBudgets select on it
MIG_CONFIG_LABEL = "nvidia.com/mig.config"  # read by the GPU Operator's MIG manager
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by GPU Feature Discovery
GPU_TAINT = "nvidia.com/gpu"

def labels(spec_name: str, *, model: str | None = None, workload: str | None = None,
           pool: str | None = None, shape: str | None = None) -> dict[str, str]:
    """Never `app.kubernetes.io/instance`: Argo CD's label tracking writes that key with the
    Application's name (argo-cd docs/user-guide/resource_tracking.md)."""
    out = {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/part-of": spec_name}
    if model is not None:
        out["app.kubernetes.io/name"] = model
        out[MODEL_LABEL] = model
    if workload is not None:
        out[WORKLOAD_LABEL] = workload
    if pool is not None:
        out[POOL_LABEL] = pool
    if shape is not None:
        out[SHAPE_LABEL] = shape
    return out


def annotations(spec_name: str, artifacts: dict[str, str] | None = None) -> dict[str, str]:
    """The spec's name and, by content digest, the artifacts the object was rendered from (its
    image, its options file): a live object names the exact inputs the release manifest lists.
    The spec digest itself is added by the release stamp, outside the object's own file, so an
    edit elsewhere in the spec changes no object file (tree.py)."""
    out = {SPEC_ANNOTATION: spec_name}
    if artifacts:
        out[ARTIFACTS_ANNOTATION] = json.dumps(dict(sorted(artifacts.items())), separators=(",", ":"))
    return out


def metadata(name: str, spec_name: str, *, namespace: str | None = None, labels_: dict | None = None,
             artifacts: dict[str, str] | None = None) -> dict:
    out: dict = {"name": name, "labels": labels_ or labels(spec_name), "annotations": annotations(spec_name, artifacts)}
    if namespace is not None:
        out["namespace"] = namespace
    return out
