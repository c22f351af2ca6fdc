"""What the simulation reads from a Kubernetes tree: one revision's objects and the node pools'
nodes. Built from a tree's documents (tree.py) or from the plan's action parameters (plan.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Workload:
    """A Deployment."""
    name: str
    namespace: str
    model: str
    pool: str
    replicas: int
    template: str  # identity of the pod template: a change makes a new ReplicaSet
    labels: dict  # the pod template's labels
    node_selector: dict
    tolerations: list
    requests: dict  # extended resources (nvidia.com/*) of one pod
    max_surge: int | str = 0
    max_unavailable: int | str = 1
    progress_deadline_s: int = 600
    dynamo: bool = False  # a DynamoGraphDeployment's worker component (Dynamo's operator rolls it)
    grove: bool = False  # ... on the Grove pathway: a PodClique, Grove rolls it (grove.py)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PoolLayout:
    name: str
    selector: dict
    layout: str
    nodes: int
    max_unavailable: int


@dataclass
class Relayout:
    """The re-layout Job (label-nodes.sh) of a revision."""
    key: tuple  # its object key: a new key is a new Job, run once
    pools: list[PoolLayout]
    keep: list[str] | None  # keys of the spec's Deployments (the others of its namespace are retired); None: no retire step
    namespace: str  # of the workloads it may retire
    rules: list[dict]  # the Role rules its ServiceAccount has in the workloads' namespace
    evict_s: int = 600
    mig_s: int = 900
    config_sync_s: int = 120
    bounce: str | None = None  # the layout a node labelled with its target but not at success goes through first
    script: str = ""  # the name of the ConfigMap that holds its script
    writes: dict = field(default_factory=dict)  # annotations it puts on the live layouts ConfigMap


@dataclass
class Revision:
    objects: dict  # (kind, namespace, name) -> object, for Argo CD's order
    workloads: dict[str, Workload]  # by Workload.key
    budgets: list  # disruption.Budget (name: namespace/name)
    services: dict[str, tuple[str, dict]]  # namespace/name -> (model, the Service's selector)
    strategy: str
    layouts: dict[str, list]  # the desired layouts ConfigMap: name -> mig-parted entries
    pools: dict[str, PoolLayout]
    relayout: Relayout | None = None
    groups: dict = field(default_factory=dict)  # (kind, namespace, name) of a DGD -> its worker Workloads' keys
    app: dict | None = None  # the Argo CD Application (ignoreDifferences, syncOptions)
    mig_config: tuple | None = None  # key of the ConfigMap the MIG manager reads (the GPU Operator's values)


@dataclass
class PoolNodes:
    """The nodes of a pool as the cluster has them."""
    name: str
    count: int
    gpus: int
    product: str | None
    labels: dict = field(default_factory=dict)
    taints: list = field(default_factory=list)  # scheduler.Taint
    # node name -> (nvidia.com/mig.config, its state, the layout its GPUs carry): a node left behind
    # by an earlier change (e.g. a re-layout that ended `failed`); the others run the base revision
    preset: dict = field(default_factory=dict)
