"""The names Kubernetes objects of a release get, and apimachinery's rules for them: below both the
emitters (compiler/targets/kubernetes/) and the checks (compiler/checks/kubernetes.py), which must agree on them.

Names are identities: a Deployment or a DynamoGraphDeployment component whose name changes is
deleted and created anew (Argo CD prunes the old object), so every name here depends only on what
the object is, never on its neighbours (compiler/ir/pools.py names the workloads the same way)."""

from __future__ import annotations

import re

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def name_problem(name: str, kind: str = "object") -> str | None:
    """Why `name` cannot name a namespaced object of `kind` (None when it can). Services need a
    DNS-1035 label (a leading letter), most other kinds a DNS-1123 label; both at most 63
    characters (apimachinery validation, IsDNS1035Label / IsDNS1123Label)."""
    if len(name) > 63:
        return f"{len(name)} characters, more than the 63 a {kind} name may have"
    pattern = _DNS1035_LABEL if kind == "Service" else _DNS1123_LABEL
    if not pattern.fullmatch(name):
        return ("a Service name must start with a letter" if kind == "Service"
                else "a name holds lowercase letters, digits and '-' only")
    return None


def mig_configmap_name(spec_name: str) -> str:
    return f"{spec_name}-mig-layouts"


def dgd_component(model: str, workload: str) -> str:
    """The DynamoGraphDeployment worker component of a workload (`<model>-<pool>[-<shape>]`):
    `worker-<pool>[-<shape>]`, the same whatever other pools or shapes serve the model, so adding a
    pool adds a component and renames none."""
    return "worker-" + workload[len(model) + 1:]


def options_configmap_prefix(model: str) -> str:
    return f"{model}-llm-api-options-"
