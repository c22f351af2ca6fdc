"""`k8s-release`: the release's Kustomize tree, what Argo CD syncs and `kubectl kustomize` builds
(compiler/targets/kubernetes/tree.py). It assembles the node layer (`k8s-node-layer`) and every workload
(`k8s-deployment/*` or `k8s-dgd/*`) unchanged, and adds the namespace, one Service per model
(runtime `deployment`), the release stamp and the Argo CD files:

  kustomization.yaml  namespace.yaml  release-stamp.yaml
  node-layer/...                 (k8s-node-layer)
  workloads/<name>.yaml          (k8s-deployment/<name> or k8s-dgd/<model>)
  services/<model>.yaml          runtime deployment
  disruption-budgets/<name>.yaml runtime deployment: each workload's PodDisruptionBudget (sync wave -2)
  argocd/application.yaml        with `kubernetes.argocd`
  argocd/argocd-cm-health.yaml   runtime dynamo
  admission/cluster-image-policy.yaml  with publish.signed_by: the images admitted only as signed

Its parameters carry the spec digest (the release stamp): every release has its own tree, and a
revert of the spec gives the earlier tree byte for byte. The release manifest lists it under
`kubernetes` with the pools' layouts.
"""

from __future__ import annotations

import json
import shutil
from typing import Annotated

from compiler.actions.base import ActionKind, Disruption, LowerContext, Params, RunContext
from compiler.targets.disruption import POOL
from compiler.graph.model import Action
from compiler.ir.pools import cluster_strategy, mounts_weights, resource_name
from compiler.params import Effect
from compiler.release import spec_digest
from compiler.spec.models import DEFAULT_KUBERNETES_VERSION

from . import admission as adm
from . import k8s_deployment, k8s_dgd, k8s_nodes, nodelayer, plan, tree, workloads

NODE_LAYER_DIR, WORKLOADS_DIR, SERVICES_DIR, ARGOCD_DIR = "node-layer", "workloads", "services", "argocd"
BUDGETS_DIR, ADMISSION_DIR = "disruption-budgets", "admission"


class ServiceSpec(Params):
    model: str
    ports: list[tuple[str, int]]


class ArgoSpec(Params):
    repo_url: str
    path: str
    revision: str
    namespace: str
    project: str


class BudgetSpec(Params):
    """A workload's PodDisruptionBudget (compiler/targets/kubernetes/workloads.py disruption_budget)."""
    name: str
    pool: str
    model: str
    max_unavailable: int
    shape: str
    dynamo: bool = False  # a DGD's worker pods: selected by model, pool and shape (they carry no workload label)


class PoolSummary(Params):
    nodes: int
    layout: str
    workloads: dict[str, int]  # workload -> replicas


# what the tree's own objects do when they change (the workloads' are their actions': k8s-deployment, k8s-dgd)
_PRUNED = Effect("replace", "Argo CD prunes what leaves the tree: a workload's pods stop at once (a workload's "
                            "other changes are its own action's)", ("workload-delete",))
_CLUSTER = Effect("none", "API objects no pod reads: a Service's endpoints, a budget, admission, how Argo CD syncs")


class ReleaseParams(Params):
    spec_name: Annotated[str, plan.IDENTITY]
    spec_digest: Annotated[str, plan.UNREAD]  # a label of the tree
    namespace: Annotated[str, plan.IDENTITY]
    # another runtime is other kinds of object: every workload deleted and created anew
    runtime: Annotated[str, Effect("replace", "Deployments and DynamoGraphDeployments are other objects: every "
                                              "workload of each pool is deleted and created anew", ("recreate",))]
    mig_strategy: Annotated[str, plan.UNREAD]  # the node layer's strategy carries it (k8s-node-layer)
    node_layer: Annotated[str, plan.UNREAD]  # action id
    workloads: Annotated[list[str], _PRUNED]  # action ids, each writing one <name>.yaml
    services: Annotated[list[ServiceSpec], _CLUSTER]
    argocd: Annotated[ArgoSpec | None, _CLUSTER]
    pools: Annotated[dict[str, PoolSummary], _PRUNED]
    budgets: Annotated[list[BudgetSpec], _CLUSTER] = []  # runtime deployment
    admission: Annotated[adm.AdmissionParams | None, _CLUSTER] = None  # publish.signed_by
    planned: Annotated[list[str], _CLUSTER] = []  # DGDs (models) whose worker replicas Dynamo's planner sets
    # the cluster the tree is written for (`kubernetes.version`), and whether its pods mount image
    # volumes (the weights), which need 1.35 without a feature gate: said in kustomization.yaml
    kubernetes_version: Annotated[str, _CLUSTER] = ""
    image_volumes: Annotated[bool, _CLUSTER] = False
    # the GPU Operator's namespace, where the live layouts ConfigMap is (the Application ignores its data)
    operator_namespace: Annotated[str, _CLUSTER] = ""

    def to_json(self) -> dict:
        out = super().to_json()
        if out.get("admission") is None:  # unset, left out: the key of a tree without it is unchanged
            out.pop("admission", None)
        if not out.get("planned"):
            out.pop("planned", None)
        return out


def requirements_header(params: ReleaseParams) -> str:
    """What the cluster must be, said at the top of the tree's kustomization.yaml: nothing in the
    objects alone tells a reader that image volumes need Kubernetes 1.35 (feature gate ImageVolume,
    on by default from 1.35: catalog/data/k8s_controllers.json)."""
    if not params.kubernetes_version:
        return ""
    lines = [f"# Written and schema-checked for Kubernetes {params.kubernetes_version} (the spec's kubernetes.version)."]
    if params.image_volumes:
        lines.append("# Its pods mount the models' weights as image volumes (volumes[].image): that needs Kubernetes "
                     ">= 1.35,")
        lines.append("# or the ImageVolume feature gate on the API server and kubelets of 1.31-1.34, and a container "
                     "runtime that")
        lines.append("# mounts OCI images (containerd >= 2.1). Older clusters: node_pool.weights: in-image.")
    return "\n".join(lines) + "\n"


def release_params(ctx: LowerContext, workload_actions: list[str]) -> ReleaseParams:
    ir, spec = ctx.ir, ctx.spec
    k8s = spec.kubernetes
    runtime = k8s.runtime if k8s is not None else "deployment"
    services = []
    if runtime == "deployment":
        for model in sorted({w.model for p in ir.pools.values() for w in p.workloads}):
            rm = ir.models[model]
            ports = k8s_deployment.named_ports(rm.spec.serving.runtime, rm.spec.serving.ports.model_dump())
            services.append(ServiceSpec(model=model, ports=list(ports)))
    budgets = []  # both runtimes: without one a drain may evict every worker of a model at once (review N16)
    strategy = cluster_strategy(ir)
    for pname, pool in sorted(ir.pools.items()):
        for w in pool.workloads:
            resource = resource_name(strategy, w.mig_profile)
            if resource is None:
                continue
            batch = k8s_deployment.slots_per_node(pool, w) * k8s_deployment.max_unavailable(ir, pname)
            budgets.append(BudgetSpec(name=w.name, pool=pname, model=w.model, max_unavailable=min(w.replicas, batch),
                                      shape=workloads.shape(resource, w.gpus), dynamo=runtime == "dynamo"))
    argo = None
    if k8s is not None and k8s.argocd is not None:
        a = k8s.argocd
        argo = ArgoSpec(repo_url=a.repo_url, path=a.path, revision=a.revision, namespace=a.namespace, project=a.project)
    pools = {n: PoolSummary(nodes=p.nodes, layout=p.layout, workloads={w.name: w.replicas for w in p.workloads})
             for n, p in sorted(ir.pools.items())}
    return ReleaseParams(spec_name=spec.name, spec_digest=spec_digest(spec),
                         namespace=k8s_deployment.namespace_of(spec), runtime=runtime,
                         mig_strategy=cluster_strategy(ir), node_layer=k8s_nodes.KIND.kind,
                         workloads=sorted(workload_actions), services=services, argocd=argo, pools=pools,
                         budgets=budgets, admission=adm.admission_params(spec),
                         planned=sorted(m for m, rm in ir.models.items() if runtime == "dynamo"
                                        and rm.spec.serving.disaggregated is not None
                                        and rm.spec.serving.disaggregated.planner is not None),
                         kubernetes_version=k8s.version if k8s is not None else DEFAULT_KUBERNETES_VERSION,
                         image_volumes=any(mounts_weights(ir, name) for name in ir.pools),
                         operator_namespace=(k8s.gpu_operator_namespace if k8s else "gpu-operator") if ir.pools else "")


def _copy(src, dest) -> list[str]:
    """Copy a tree; the relative paths of its files."""
    out = []
    for p in sorted(src.rglob("*")):
        if p.is_file():
            rel = p.relative_to(src).as_posix()
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
            target.chmod(0o755 if p.stat().st_mode & 0o111 else 0o644)
            out.append(rel)
    return out


def write_tree(params: ReleaseParams, out, deps) -> None:
    """The tree under `out` from the parts in `deps` (action id -> directory)."""
    _copy(deps[params.node_layer], out / NODE_LAYER_DIR)
    resources = ["namespace.yaml", NODE_LAYER_DIR]
    for aid in params.workloads:
        for rel in _copy(deps[aid], out / WORKLOADS_DIR):
            resources.append(f"{WORKLOADS_DIR}/{rel}")
    for s in params.services:
        obj = workloads.service(model=s.model, spec_name=params.spec_name, namespace=params.namespace,
                                ports=[tuple(p) for p in s.ports])
        path = out / SERVICES_DIR / f"{s.model}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(tree.documents([obj]), encoding="utf-8")
        resources.append(f"{SERVICES_DIR}/{s.model}.yaml")
    for b in params.budgets:
        obj = workloads.disruption_budget(name=b.name, spec_name=params.spec_name, namespace=params.namespace,
                                          pool=b.pool, model=b.model, max_unavailable=b.max_unavailable, shape_=b.shape,
                                          by_workload=not b.dynamo)
        path = out / BUDGETS_DIR / f"{b.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(tree.documents([obj]), encoding="utf-8")
        resources.append(f"{BUDGETS_DIR}/{b.name}.yaml")
    if params.admission is not None:
        path = out / ADMISSION_DIR / "cluster-image-policy.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(adm.header(params.admission, params.spec_name)
                        + tree.documents([adm.cluster_image_policy(params.admission, params.spec_name)]),
                        encoding="utf-8")
        resources.append(f"{ADMISSION_DIR}/cluster-image-policy.yaml")
    label = adm.INCLUDE_LABEL if params.admission is not None else None
    (out / "namespace.yaml").write_text(tree.documents([tree.namespace(params.namespace, params.spec_name, label)]),
                                        encoding="utf-8")
    (out / tree.STAMP).write_text(tree.dump(tree.release_stamp(params.spec_name, params.spec_digest)),
                                  encoding="utf-8")
    (out / "kustomization.yaml").write_text(requirements_header(params) + tree.dump(tree.kustomization(resources, [tree.STAMP])),
                                            encoding="utf-8")
    if params.argocd is not None or params.runtime == "dynamo":
        (out / ARGOCD_DIR).mkdir()
    if params.argocd is not None:
        a = params.argocd
        app = tree.application(spec_name=params.spec_name, namespace_=params.namespace, argocd_namespace=a.namespace,
                               project=a.project, repo_url=a.repo_url, path=a.path, revision=a.revision,
                               planned=params.planned,
                               ignored=[nodelayer.ignore_live_data(params.spec_name, params.operator_namespace)]
                               if params.operator_namespace and params.pools else [])
        (out / ARGOCD_DIR / "application.yaml").write_text(
            "# Apply once: kubectl apply -f argocd/application.yaml (it points Argo CD at this tree)\n"
            + tree.documents([app]), encoding="utf-8")
    if params.runtime == "dynamo":
        namespace = params.argocd.namespace if params.argocd is not None else "argocd"
        (out / ARGOCD_DIR / "argocd-cm-health.yaml").write_text(
            "# Argo CD's health check for DynamoGraphDeployment (it has none built in). Merge it into argocd-cm:\n"
            f"#   kubectl -n {namespace} patch configmap argocd-cm --type merge --patch-file argocd/argocd-cm-health.yaml\n"
            + tree.documents([tree.health_check(namespace)]), encoding="utf-8")
        # review S9: an argocd-cm patched by hand is undone by Helm or by the Argo CD operator
        (out / ARGOCD_DIR / "argo-cd-values.yaml").write_text(
            "# The same health check for an Argo CD installed with its Helm chart (argo/argo-cd), which renders\n"
            "# argocd-cm from its values: helm upgrade argocd argo/argo-cd --reuse-values -f argocd/argo-cd-values.yaml\n"
            + tree.dump(tree.health_helm_values()), encoding="utf-8")
        (out / ARGOCD_DIR / "argocd-operator-health.yaml").write_text(
            "# The same health check for an Argo CD run by the Argo CD operator, which reconciles argocd-cm from\n"
            f"# its ArgoCD: kubectl -n {namespace} patch argocd <name> --type merge --patch-file argocd/argocd-operator-health.yaml\n"
            + tree.dump(tree.health_operator_patch()), encoding="utf-8")


class K8sRelease(ActionKind[ReleaseParams]):
    kind, version, Params = "k8s-release", 1, ReleaseParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        if not ctx.ir.pools:
            return []
        parts = [a.id for kind in (k8s_deployment.KIND, k8s_dgd.KIND) for a in kind.lower(ctx)]
        params = release_params(ctx, parts)
        return [self.action(self.kind, params, deps=sorted([params.node_layer, *parts]))]

    def run(self, params: ReleaseParams, ctx: RunContext) -> None:
        write_tree(params, ctx.out, ctx.deps)
        ctx.log.info("Kustomize tree: namespace %s, %d workload file(s), %d pool(s)", params.namespace,
                     len(params.workloads), len(params.pools))

    def manifest_entry(self, params: ReleaseParams, tree_reader) -> tuple[str, str, dict] | None:
        """The release manifest's `kubernetes` section: where the tree is and what it lays out."""
        if tree_reader.read("kustomization.yaml") is None:
            return None
        return "kubernetes", params.spec_name, {
            "artifact": self.kind, "namespace": params.namespace, "runtime": params.runtime,
            "mig_strategy": params.mig_strategy,
            "pools": json.loads(json.dumps({n: p.to_json() for n, p in params.pools.items()}))}


KIND = K8sRelease()


def release_disruptions(old: ReleaseParams | None, new: ReleaseParams) -> list[Disruption]:
    """What leaves the tree: Argo CD prunes it, so all its pods stop at once (a workload's own
    disruptions are its action's; a removed action has none). Pure."""
    if old is None:
        return []
    out: list[Disruption] = []
    if old.runtime != new.runtime:
        pools = sorted(set(old.pools) | set(new.pools))
        return [Disruption(p, POOL, "recreate", f"recreate: runtime {old.runtime} -> {new.runtime}: every workload of the "
                           f"pool is deleted and created anew, down for {plan.down_for()}") for p in pools]
    for pname, pool in sorted(old.pools.items()):
        now = new.pools[pname].workloads if pname in new.pools else {}
        for name, replicas in sorted(pool.workloads.items()):
            if new.runtime == "deployment" and name not in now:
                out.append(Disruption(pname, POOL, "workload-delete",
                                      f"{name}: removed: Argo CD prunes its Deployment, its {replicas} pod(s) stop at once"))
    if new.runtime == "dynamo":
        for aid in sorted(set(old.workloads) - set(new.workloads)):
            model = aid.split("/", 1)[1]
            pools = [p for p, s in old.pools.items() if any(n == f"{model}-{p}" or n.startswith(f"{model}-{p}-") for n in s.workloads)]
            for p in sorted(pools):
                out.append(Disruption(p, POOL, "workload-delete",
                                      f"{model}: removed: Argo CD prunes its DynamoGraphDeployment, every worker stops"))
    return out
