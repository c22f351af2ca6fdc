"""The release's Kustomize tree (what Argo CD syncs) and the GitOps glue around it.

  kustomization.yaml        namespace.yaml, node-layer/, workloads/*.yaml, services/*.yaml, and the
                            release stamp as a transformer
  release-stamp.yaml        kustomize's builtin AnnotationsTransformer, restricted to
                            metadata/annotations: `kiln.io/spec-digest` on every object, but not on
                            pod templates (a spec digest there would restart every pod on any edit),
                            and not in the objects' own files (so an edit changes only the files of
                            the objects it changes)
  argocd/application.yaml   the Argo CD Application (applied once, outside the tree it points at)
  argocd/argocd-cm-health.yaml  runtime dynamo: the health check Argo CD needs for
                            DynamoGraphDeployment (it has none built in), as a merge into argocd-cm

No `namespace:` in the kustomizations: the node layer lives in the GPU Operator's namespace and the
workloads in theirs, so every object names its own.
"""

from __future__ import annotations

import io
import json

from ruamel.yaml import YAML

from compiler import resources

from . import meta

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
STAMP = "release-stamp.yaml"
HEALTH_LUA = "dgd-health.lua"
HEALTH_KEY = "resource.customizations.health.nvidia.com_DynamoGraphDeployment"


def _literal(representer, data: str):
    # multi-line text (a config file inside a ConfigMap, a Lua script) as a block the reader can read
    style = "|" if "\n" in data else None
    return representer.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def dump(obj: object) -> str:
    """One object as block YAML: keys sorted, no anchors (a copy through JSON shares nothing), no line
    folding (an image reference stays on its line), multi-line strings as literal blocks."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = True  # type: ignore[attr-defined]
    yaml.width = 4096
    yaml.representer.add_representer(str, _literal)
    buf = io.StringIO()
    yaml.dump(json.loads(json.dumps(obj)), buf)
    return buf.getvalue()


def documents(objects: list[dict], header: str = "") -> str:
    """Objects as one YAML stream (deterministic bytes)."""
    return header + "---\n".join(dump(o) for o in objects)


def kustomization(resources_: list[str], transformers: list[str] | None = None) -> dict:
    out: dict = {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": list(resources_)}
    if transformers:
        out["transformers"] = list(transformers)
    return out


def namespace(name: str, spec_name: str, admission_label: str | None = None) -> dict:
    """Argo CD never deletes it (Delete=false: a deleted Application leaves the namespace and the
    pull secrets people put there); Pod Security warns and audits against `restricted`, which the
    pods meet, and enforces `baseline` (argo-cd docs/user-guide/sync-options.md)."""
    md = meta.metadata(name, spec_name)
    md["annotations"]["argocd.argoproj.io/sync-options"] = "Delete=false"
    md["annotations"]["argocd.argoproj.io/sync-wave"] = "-3"  # before the budgets and roles in it (wave -2)
    md["labels"].update({"pod-security.kubernetes.io/enforce": "baseline",
                         "pod-security.kubernetes.io/warn": "restricted",
                         "pod-security.kubernetes.io/audit": "restricted"})
    if admission_label is not None:  # the image policy (admission.py) applies here
        md["labels"][admission_label] = "true"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": md}


def release_stamp(spec_name: str, spec_digest: str) -> dict:
    return {"apiVersion": "builtin", "kind": "AnnotationsTransformer", "metadata": {"name": "kiln-release"},
            "annotations": {meta.SPEC_ANNOTATION: spec_name, meta.SPEC_DIGEST_ANNOTATION: spec_digest},
            "fieldSpecs": [{"path": "metadata/annotations", "create": True}]}


def application(*, spec_name: str, namespace_: str, argocd_namespace: str, project: str, repo_url: str,
                path: str, revision: str, planned: list[str] = (), ignored: list[dict] = ()) -> dict:
    """`planned`: DGDs whose prefill and decode replicas Dynamo's planner sets (through its scaling
    adapters, whose controller writes the DGD's components' replicas: ai-dynamo/dynamo
    docs/kubernetes/autoscaling.md); Argo CD ignores those fields, or self-heal would revert every
    scaling decision to the tree's replicas (review N11). `ignored`: other ignoreDifferences entries
    (the live layouts ConfigMap's data, which the re-layout script writes). RespectIgnoreDifferences
    keeps a sync from writing them back too (argo-cd docs/user-guide/sync-options.md)."""
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": meta.metadata(spec_name, spec_name, namespace=argocd_namespace),
        "spec": {
            "project": project,
            "source": {"repoURL": repo_url, "path": path, "targetRevision": revision},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace_},
            # an automated sync that failed is not retried for the same commit unless `retry` says so
            # (argo-cd docs/user-guide/auto_sync.md), e.g. while Dynamo's webhook is not ready yet
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                           "retry": {"limit": 10, "backoff": {"duration": "30s", "factor": 2, "maxDuration": "15m"}}},
        },
    }
    ignore = list(ignored) + [
        {"group": "nvidia.com", "kind": "DynamoGraphDeployment", "name": m, "namespace": namespace_,
         "jqPathExpressions": ['.spec.components[] | select(.type == "prefill" or .type == "decode") | .replicas']}
        for m in planned]
    if ignore:
        app["spec"]["ignoreDifferences"] = ignore
        app["spec"]["syncPolicy"]["syncOptions"] = ["RespectIgnoreDifferences=true"]
    return app


def health_lua() -> str:
    return resources.template_dir("k8s").joinpath(HEALTH_LUA).read_text(encoding="utf-8")


def health_helm_values() -> dict:
    """The same check as values of Argo CD's Helm chart (argoproj/argo-helm charts/argo-cd values.yaml
    `configs.cm`, which the chart renders into argocd-cm): a `helm upgrade` would undo a hand patch."""
    return {"configs": {"cm": {HEALTH_KEY: health_lua()}}}


def health_operator_patch() -> dict:
    """The same check for an Argo CD run by the Argo CD operator (argoproj-labs/argocd-operator ArgoCD
    `spec.resourceHealthChecks`: group, kind, check), which reconciles argocd-cm from its ArgoCD."""
    return {"spec": {"resourceHealthChecks": [{"group": "nvidia.com", "kind": "DynamoGraphDeployment",
                                               "check": health_lua()}]}}


def health_check(argocd_namespace: str) -> dict:
    """A ConfigMap carrying only the health key: merge it into Argo CD's argocd-cm."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argocd-cm", "namespace": argocd_namespace,
                         "labels": {"app.kubernetes.io/name": "argocd-cm", "app.kubernetes.io/part-of": "argocd"}},
            "data": {HEALTH_KEY: health_lua()}}
