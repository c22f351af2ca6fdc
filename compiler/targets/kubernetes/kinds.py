"""The Kubernetes target's action kinds, in lowering order (registered in compiler/targets/registry.py)."""

from __future__ import annotations

from . import k8s_deployment, k8s_dgd, k8s_nodes, k8s_release

KINDS = (k8s_nodes.KIND, k8s_deployment.KIND, k8s_dgd.KIND, k8s_release.KIND)
