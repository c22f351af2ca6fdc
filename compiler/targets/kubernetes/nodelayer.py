"""The node layer on the GPU Operator's ClusterPolicy path: what makes a pool's nodes carry its MIG
layout, and what is left to the nodes themselves.

  desired layouts       ConfigMap <spec>-mig-layouts-desired: one named config per distinct node
                        layout (compiler/ir/pools.py names them by content), plus `all-disabled`,
                        the ClusterPolicy's default for nodes without the label; key `config.yaml`
                        (GPU Operator assets/state-mig-manager/0400_configmap.yaml has the same
                        shape) and one key per layout
  live layouts          ConfigMap <spec>-mig-layouts, which the MIG manager reads: in the tree, so
                        Argo CD creates it where it is missing and never prunes it (an earlier
                        tree managed it too, review N9); its data is label-nodes.sh's, the desired
                        layouts plus those a node still carries (a node restarting mig-manager
                        mid-way finds its layout): the Application ignores /data and respects that
                        (RespectIgnoreDifferences), so no sync or self-heal writes it back
  ClusterPolicy patch   `spec.mig.strategy` and `spec.migManager.config` pointing the MIG manager
                        at the live ConfigMap: a merge patch, because the ClusterPolicy belongs to
                        the operator's installation, not to Kiln
  label-nodes.sh        the re-layout, node by node: cordon, evict GPU pods, relabel, wait for the
                        MIG manager, uncordon (mig-manager evicts nothing: NVIDIA/mig-parted
                        reconfigure.go); the same script as an Argo CD sync-wave Job, with RBAC
  node-tuning-<pool>.sh clocks and power: no GPU Operator setting exists for either

`mig_parted_problems` applies mig-parted's own parsing rules to a config, so a layout it would
refuse never reaches a node.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from compiler import resources
from compiler.actions.shell import Shell, shell_word
from compiler.catalog import k8s_controllers
from compiler.ir.k8s_names import mig_configmap_name
# mig-parted's parsing rules live below the emitters (the checks read them too); re-exported here
from compiler.ir.migparted import (ATTRIBUTES, ENTRY_KEYS, SLICE_COUNTS, mig_parted_problems,  # noqa: F401
                                   mig_profile_problem)
from compiler.ir.pools import ALL_DISABLED
from compiler.templating import only_quoted, strict_environment

from . import meta, tree
from .runtime import PROGRESS_DEADLINE_S

if TYPE_CHECKING:  # jinja2 loads when a template is rendered: plan and validate never need it
    from jinja2 import Environment

TEMPLATE_DIR = resources.template_dir("k8s")
LABEL_TEMPLATE, TUNING_TEMPLATE = "label-nodes.sh.j2", "gpu-tuning.sh.j2"
CONFIG_KEY = "config.yaml"
CLUSTER_POLICY = "cluster-policy"  # the name the GPU Operator's Helm chart gives its ClusterPolicy
ALL_DISABLED_ENTRIES = [{"devices": "all", "mig-enabled": False}]


def configmap_name(spec_name: str) -> str:
    """The ConfigMap mig-manager reads (ClusterPolicy migManager.config.name): its data written by the
    re-layout script, so that it keeps every layout a node still carries."""
    return mig_configmap_name(spec_name)


def desired_name(spec_name: str) -> str:
    return mig_configmap_name(spec_name) + "-desired"


# label-nodes.sh's bounds (KILN_EVICT_S, KILN_MIG_S, KILN_CONFIG_SYNC_S): the Job's deadline from them.
# Emptying a node waits until the pods the previous node lost are Ready again (their budgets refuse
# the next evictions until then): a pull and a load, the Deployments' progress deadline (review N13).
EVICT_S, MIG_S, CONFIG_SYNC_S = PROGRESS_DEADLINE_S, 900, 120
RELAYOUT = "relayout"  # the re-layout Job's ServiceAccount, roles and bindings: <spec>-relayout
SCRIPT_KEY = "label-nodes.sh"


def mig_parted_config(layouts: dict[str, list[dict]]) -> dict:
    """The mig-parted v1 document: `all-disabled` and every layout by name."""
    configs = {ALL_DISABLED: ALL_DISABLED_ENTRIES, **{n: e for n, e in layouts.items() if n != ALL_DISABLED}}
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def _layouts_data(layouts: dict[str, list[dict]]) -> dict:
    doc = mig_parted_config(layouts)
    data = {CONFIG_KEY: tree.dump(doc), "layouts": " ".join(doc["mig-configs"])}
    data.update({name: tree.dump(entries) for name, entries in doc["mig-configs"].items()})
    return data


def configmap(spec_name: str, namespace: str, layouts: dict[str, list[dict]]) -> dict:
    """The tree's layouts: `config.yaml` (the mig-parted document, for review), one key per layout
    (its entries) and `layouts` (their names), from which the script writes the live ConfigMap.
    Synced before the Job (sync wave -2)."""
    md = meta.metadata(desired_name(spec_name), spec_name, namespace=namespace)
    md["annotations"]["argocd.argoproj.io/sync-wave"] = "-2"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": _layouts_data(layouts)}


LIVE_IGNORED = ["/data"]  # the Application's ignoreDifferences on the live ConfigMap: the script's


def live_configmap(spec_name: str, namespace: str, layouts: dict[str, list[dict]]) -> dict:
    """The ConfigMap the MIG manager reads, as the tree holds it (review N9). A desired object is never
    a prune candidate (gitops-engine pkg/sync/reconcile.go Reconcile), so the sync over a tree that
    managed it keeps it; Argo CD applies these data only where it is missing (argo-cd
    controller/sync.go normalizeTargetResources: RespectIgnoreDifferences keeps the live /data).
    Sync wave 0, after the Job: with an Application that does not ignore /data yet, the tree's
    layouts land once the Job has moved every node to them. Prune=false: a spec rename or a tree
    without the node layer leaves it to the MIG manager, which still reads it."""
    md = meta.metadata(configmap_name(spec_name), spec_name, namespace=namespace)
    md["annotations"]["argocd.argoproj.io/sync-options"] = "Prune=false"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": _layouts_data(layouts)}


def ignore_live_data(spec_name: str, namespace: str) -> dict:
    """The Application's ignoreDifferences entry for the live ConfigMap's data."""
    return {"kind": "ConfigMap", "name": configmap_name(spec_name), "namespace": namespace,
            "jsonPointers": list(LIVE_IGNORED)}


def rbac(spec_name: str, namespace: str, workload_namespace: str | None = None) -> list[dict]:
    """Exactly what label-nodes.sh calls: nodes get/list/patch (kubectl get, cordon, label),
    pods list and pods/eviction create (the GPU pods of a node), and in the operator's namespace
    the two ConfigMaps: get and patch by name, create (the live one the first time)."""
    name = f"{spec_name}-{RELAYOUT}"
    md = lambda ns=None: {**meta.metadata(name, spec_name, namespace=ns),  # noqa: E731
                          "annotations": {**meta.annotations(spec_name), "argocd.argoproj.io/sync-wave": "-2"}}
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": md(namespace), "automountServiceAccountToken": True},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": md(),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                   {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": md(),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": md(namespace),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
                    "resourceNames": [configmap_name(spec_name), desired_name(spec_name)]},
                   {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": md(namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}, "subjects": subject},
    ] + ([] if workload_namespace is None else [  # retiring Deployments that left the spec (kubectl scale)
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": md(workload_namespace),
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
                   {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": md(workload_namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}, "subjects": subject}])


def script_configmap(spec_name: str, namespace: str, script: str, digest: str) -> dict:
    md = meta.metadata(f"{spec_name}-{RELAYOUT}-{digest}", spec_name, namespace=namespace)
    md["annotations"]["argocd.argoproj.io/sync-wave"] = "-2"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {SCRIPT_KEY: script}}


TUNING = "gpu-tuning"
TUNING_KEY = "gpu-tuning.sh"


def tuning_rbac(spec_name: str, namespace: str) -> list[dict]:
    """The tuning DaemonSet reports on its own node's label: nodes get and patch (kubectl label)."""
    name = f"{spec_name}-{TUNING}"
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta.metadata(name, spec_name, namespace=namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta.metadata(name, spec_name),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": meta.metadata(name, spec_name),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": subject},
    ]


def tuning_daemonset(spec_name: str, namespace: str, pool: str, selector: dict[str, str], image: str,
                     script: str) -> list[dict]:
    """Clocks and power reconciled on each node of a pool: the script (its ConfigMap, named by its
    content so a change rolls the pods) in a privileged pod of the operator's namespace (setting
    clocks and power needs root on the GPU), started once the operator's validator reports the
    driver ready (/run/nvidia/validations/driver-ready), with /run/nvidia propagated from the host
    so that a restarted driver container's root appears in it. With a driver installed on the host
    (the operator's driver.enabled=false) nvidia-smi is the host's: the host's / is mounted at /host,
    read-only, as the operator's validator mounts it (catalog/data/k8s_controllers.json
    gpu_operator.host_driver_source)."""
    digest = hashlib.sha256(script.encode()).hexdigest()[:8]
    name = f"{spec_name}-{TUNING}-{pool}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": meta.metadata(f"{name}-{digest}", spec_name, namespace=namespace,
                                    labels_=meta.labels(spec_name, pool=pool)),
          "data": {TUNING_KEY: script}}
    labels = {**meta.labels(spec_name, pool=pool), "app.kubernetes.io/component": TUNING}
    run_nvidia = {"name": "run-nvidia", "mountPath": "/run/nvidia", "mountPropagation": "HostToContainer"}
    places = k8s_controllers.nvidia_smi_places()
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": meta.metadata(name, spec_name, namespace=namespace, labels_=labels),
          "spec": {
              "selector": {"matchLabels": {meta.POOL_LABEL: pool, "app.kubernetes.io/component": TUNING}},
              "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
              "template": {"metadata": {"labels": labels}, "spec": {
                  "serviceAccountName": f"{spec_name}-{TUNING}",
                  "nodeSelector": dict(sorted(selector.items())),
                  "tolerations": [{"key": meta.GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                  "initContainers": [{
                      "name": "driver-ready", "image": image,
                      "command": ["sh", "-c", "until [ -f /run/nvidia/validations/driver-ready ]; do sleep 5; done"],
                      "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
                      "volumeMounts": [run_nvidia]}],
                  "containers": [{
                      "name": "tuning", "image": image, "command": ["sh", f"/kiln/{TUNING_KEY}"],
                      "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                              {"name": "HOME", "value": "/tmp"}],
                      "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
                      # root: a non-root process in a privileged container has no capabilities, so
                      # chroot and nvidia-smi -lgc/-pl fail (an image like bitnami/kubectl runs as 1001).
                      # privileged: the pod asks for no GPU (it would take one from a model), so only
                      # a privileged container may open /dev/nvidia*, as the operator's validator and
                      # MIG manager do; no host PID, network or IPC namespace, nothing else added
                      "securityContext": {"privileged": True, "runAsUser": 0, "runAsNonRoot": False},
                      "volumeMounts": [run_nvidia, {"name": "host-root", "mountPath": places["host_root"],
                                                    "readOnly": True},
                                       {"name": "script", "mountPath": "/kiln", "readOnly": True}]}],
                  "volumes": [{"name": "run-nvidia", "hostPath": {"path": "/run/nvidia", "type": "Directory"}},
                              {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
                              {"name": "script", "configMap": {"name": f"{name}-{digest}"}}],
              }}}}
    return [cm, ds]


def helm_values(spec_name: str, strategy: str) -> dict:
    """The GPU Operator chart's values for what Kiln needs (deployments/gpu-operator/values.yaml
    mig.strategy, migManager.config.name/default): `helm upgrade` renders the ClusterPolicy from
    values, so a patch of the ClusterPolicy would be undone by the next upgrade."""
    return {"mig": {"strategy": strategy},
            "migManager": {"enabled": True, "config": {"name": configmap_name(spec_name), "default": ALL_DISABLED}}}


def relayout_deadline_s(pools: list[dict]) -> int:
    """The longest the script may take: every batch of every pool at its bounds, two ConfigMap syncs."""
    batches = sum(-(-p["nodes"] // p["max_unavailable"]) for p in pools)
    return batches * (EVICT_S + MIG_S + 60) + 2 * CONFIG_SYNC_S + 300


def relayout_job(spec_name: str, namespace: str, image: str, digest: str, deadline_s: int) -> dict:
    """The re-layout as an Argo CD sync-wave Job (wave -1: after the layouts and the RBAC, before
    the workloads, whose new pods need the new slices). Named by the digest of what it does, so a
    new layout is a new Job (a Job's template is immutable) and an unchanged one is not re-run."""
    name = f"{spec_name}-{RELAYOUT}-{digest}"
    md = meta.metadata(name, spec_name, namespace=namespace)
    md["annotations"]["argocd.argoproj.io/sync-wave"] = "-1"
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                "runAsUser": 65532, "readOnlyRootFilesystem": True, "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md, "spec": {
        "backoffLimit": 0,  # a failed node needs a person: it stays cordoned, the Job stays failed
        "activeDeadlineSeconds": deadline_s,
        "template": {"metadata": {"labels": meta.labels(spec_name)}, "spec": {
            "serviceAccountName": f"{spec_name}-{RELAYOUT}",
            "restartPolicy": "Never",
            "containers": [{"name": "relayout", "image": image, "command": ["sh", f"/kiln/{SCRIPT_KEY}"],
                            "env": [{"name": "HOME", "value": "/tmp"}],  # kubectl's cache
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"cpu": "500m", "memory": "256Mi"}},
                            "securityContext": security,
                            "volumeMounts": [{"name": "script", "mountPath": "/kiln", "readOnly": True},
                                             {"name": "tmp", "mountPath": "/tmp"}]}],
            "volumes": [{"name": "script", "configMap": {"name": name}}, {"name": "tmp", "emptyDir": {}}],
        }}}}


def cluster_policy_patch(spec_name: str, strategy: str) -> dict:
    """A JSON merge patch of the ClusterPolicy (nvidia.com/v1): only the fields Kiln owns."""
    return {"spec": {"mig": {"strategy": strategy},
                     "migManager": {"enabled": True,
                                    "config": {"name": configmap_name(spec_name), "default": ALL_DISABLED}}}}


# --- shell files ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)  # compiled templates are kept: an action per host or model
def _environment(template_dir: Path = TEMPLATE_DIR) -> Environment:
    # every value passes |q: a name never becomes shell syntax. shell_word, not the host scripts'
    # shell_quote: these scripts have no bash arrays, and their bytes name what they run in.
    return strict_environment(template_dir, only_quoted((Shell,), "a k8s template", "|q"), {"q": shell_word},
                              trim_blocks=True, lstrip_blocks=True, comment_start_string="{##",
                              comment_end_string="##}")


def label_script(spec_name: str, operator_namespace: str, pools: list[dict], namespace: str = "",
                 workloads: list[str] = ()) -> str:
    """`pools`: {name, selector (kubectl -l form), layout, nodes, max_unavailable}; `workloads`: the
    spec's Deployments (runtime deployment) in `namespace`, the others of the spec are retired."""
    return _environment().get_template(LABEL_TEMPLATE).render(
        spec_name=spec_name, live=configmap_name(spec_name), desired=desired_name(spec_name),
        evict_s=EVICT_S, mig_s=MIG_S, sync_s=CONFIG_SYNC_S,
        operator_namespace=operator_namespace, pools=pools, namespace=namespace, workloads=" ".join(workloads))


def tuning_script(spec_name: str, pool: str, gpus: list[dict]) -> str:
    """`gpus`: every GPU of a node, {index, lgc, lmc, ac, pl} with "" for what is not set (its
    default is restored)."""
    return _environment().get_template(TUNING_TEMPLATE).render(spec_name=spec_name, pool=pool, gpus=gpus,
                                                               **k8s_controllers.nvidia_smi_places())
