"""Small models of the controllers a release's tree meets, written from their sources (not from
Kiln's code), for the change-matrix test (tests/test_k8s_change_matrix.py):

  GFD / device plugin  NVIDIA/k8s-device-plugin v0.20.0 internal/lm (mig-strategy.go, resource.go):
                       under `single` a MIG node's nvidia.com/gpu.product is `<product>-MIG-<profile>`
                       and its instances are nvidia.com/gpu; under `mixed` the product stays and a
                       profile is nvidia.com/mig-<profile>; whole GPUs are nvidia.com/gpu
  mig-manager          NVIDIA/mig-parted v0.15.0: acts on a change of nvidia.com/mig.config only
                       (cmd/nvidia-mig-manager/main.go); `failed` when the name is not in its
                       config file or when a changed GPU's instances are held by a pod (config.go
                       ClearMigConfig destroys them all); it never evicts user pods (reconfigure.go)
  Dynamo webhook       ai-dynamo/dynamo validateDynamoGraphDeploymentSpecUpdate: a changed set of
                       component names is refused; a changed gpu-power-limit annotation, or the GPU
                       count of a worker that carries it, is refused (main, 003d1ee5)
  Dynamo operator      rolling-update.md (6659a0a2), managed rolling updates: one hash covers every
                       worker component (types worker, prefill, decode); a change to any one's pod
                       template rolls them all (new DCDs under the new hash); replicas are not in it
  Argo CD              prunes what leaves the tree (automated sync with prune); here the re-layout
                       runs before the workloads change (coarser than the tree: the Deployments sync
                       in the Job's wave -1; the product's simulator, compiler/targets/kubernetes/sim/,
                       plays the waves as gitops-engine does)
  scheduler            a pod fits a schedulable node whose labels hold its nodeSelector and whose
                       free extended resources cover its limits; the least allocated node wins
  Eviction API         policy/v1: an eviction is refused while the workload's unavailable pods
                       would exceed its PDB's maxUnavailable
  kubelet image store  a pod's container images and image volumes (volumes[].image, pulled like a
                       container image) are pulled by the node it lands on unless the node has
                       them already (pullPolicy IfNotPresent, references by digest); `pulls`
                       records (node, reference) of each pull
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# The tree is read as the API server reads manifests (sigs.k8s.io/yaml, go-yaml: YAML 1.1, so an
# unquoted `on` or `yes` would be a boolean), with PyYAML's libyaml loader where it has one: the
# matrix reads hundreds of trees, and the pure-Python parser made up a third of its time.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(text: str):
    return yaml.load(text, Loader=_LOADER)
WORKER_TYPES = ("worker", "prefill", "decode")  # the components Dynamo's worker hash covers


@dataclass
class Pod:
    workload: str  # Deployment name, or <dgd>/<component>
    model: str
    pool: str
    selector: dict
    limits: dict  # nvidia.com/* only
    template: str  # identity of the pod template (a change rolls the pods)
    shape: str | None = None  # the kiln.io/shape label
    node: str | None = None
    images: tuple = ()  # references its node must hold: container images and image volumes


@dataclass
class Node:
    name: str
    pool: str
    labels: dict
    layout: str  # the layout the GPUs carry now
    state: str = "success"
    cordoned: bool = False
    images: set = field(default_factory=set)  # references the node's image store holds


@dataclass
class Tree:
    strategy: str
    layouts: dict  # name -> mig-parted entries
    pools: dict  # name -> (selector dict, layout, nodes, max_unavailable)
    workloads: dict  # workload -> (model, pool, replicas, selector, limits, template, pdb, shape)
    dgds: dict  # model -> {component: (power annotation, gpu count)}
    images: dict = field(default_factory=dict)  # workload -> references its pods pull


def pod_images(pod_spec: dict) -> tuple:
    """What the kubelet pulls for a pod: its containers' images and its image volumes."""
    refs = {c["image"] for c in pod_spec.get("initContainers", []) + pod_spec["containers"]}
    refs |= {v["image"]["reference"] for v in pod_spec.get("volumes", []) if "image" in v}
    return tuple(sorted(refs))


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_LOADER) if d]


def read_tree(root: Path) -> Tree:
    values = _load((root / "node-layer" / "gpu-operator-values.yaml").read_text())
    desired = _docs(root / "node-layer" / "mig-parted-config.yaml")[0]
    layouts = _load(desired["data"]["config.yaml"])["mig-configs"]
    pools = {}
    for line in (root / "node-layer" / "label-nodes.sh").read_text().splitlines():
        if line.startswith("pool "):
            _, name, selector, layout, nodes, batch = shlex.split(line)
            pools[name] = (dict(kv.split("=", 1) for kv in selector.split(",")), layout, int(nodes), int(batch))
    workloads, dgds, images = {}, {}, {}
    pdbs = {d["metadata"]["name"]: (d["spec"]["maxUnavailable"], d["spec"]["selector"]["matchLabels"])
            for p in sorted((root / "disruption-budgets").glob("*.yaml")) for d in _docs(p)}
    for p in sorted((root / "workloads").glob("*.yaml")):
        docs = _docs(p)
        for d in docs:
            if d["kind"] == "Deployment":
                spec = d["spec"]["template"]["spec"]
                limits = {k: int(v) for k, v in spec["containers"][0]["resources"]["limits"].items()
                          if k.startswith("nvidia.com/")}
                labels = d["spec"]["template"]["metadata"]["labels"]
                workloads[d["metadata"]["name"]] = (labels["kiln.io/model"], labels["kiln.io/pool"], d["spec"]["replicas"],
                                                    spec["nodeSelector"], limits, repr(d["spec"]["template"]),
                                                    pdbs.get(d["metadata"]["name"]), labels.get("kiln.io/shape"))
                images[d["metadata"]["name"]] = pod_images(spec)
            elif d["kind"] == "DynamoGraphDeployment":
                model = d["metadata"]["name"]
                dgds[model] = {}
                for c in d["spec"]["components"]:
                    if c["type"] not in WORKER_TYPES:
                        continue
                    t = c["podTemplate"]
                    limits = {k: int(v) for k, v in t["spec"]["containers"][0]["resources"]["limits"].items()
                              if k.startswith("nvidia.com/")}
                    power = (t["metadata"].get("annotations") or {}).get("dynamo.nvidia.com/gpu-power-limit")
                    dgds[model][c["name"]] = (power, limits.get("nvidia.com/gpu"))
                    workloads[f"{model}/{c['name']}"] = (model, t["metadata"]["labels"]["kiln.io/pool"], c["replicas"],
                                                         t["spec"]["nodeSelector"], limits, repr(t), None, None)
                    images[f"{model}/{c['name']}"] = pod_images(t["spec"])
    return Tree(values["mig"]["strategy"], layouts, pools, workloads, dgds, images)


# --- GFD and the device plugin ------------------------------------------------------------------------
def node_devices(entries: list, gpus: int) -> list[Counter]:
    """Per GPU the MIG instances a layout gives (Counter() for a whole GPU)."""
    out = [Counter() for _ in range(gpus)]
    for e in entries:
        idx = range(gpus) if e["devices"] == "all" else e["devices"]
        for i in idx:
            out[i] = Counter(e.get("mig-devices") or {}) if e.get("mig-enabled") else Counter()
    return out


def advertised(strategy: str, devices: list[Counter]) -> tuple[Counter, str | None]:
    """(extended resources, the single MIG profile or None) a node advertises."""
    res: Counter = Counter()
    profiles = {p for d in devices for p in d}
    for d in devices:
        if not d:
            res["nvidia.com/gpu"] += 1
        for prof, n in d.items():
            if strategy == "single":
                res["nvidia.com/gpu"] += n
            elif strategy == "mixed":
                res["nvidia.com/mig-" + prof] += n
    single = next(iter(profiles)) if strategy == "single" and len(profiles) == 1 else None
    return res, single


class Cluster:
    def __init__(self, tree: Tree, products: dict[str, str], gpus: dict[str, int]):
        self.tree, self.products, self.gpus = tree, products, gpus
        self.nodes: dict[str, Node] = {}
        for pool, (selector, layout, count, _) in tree.pools.items():
            for i in range(count):
                n = Node(f"{pool}-{i}", pool, dict(selector), layout)
                self.nodes[n.name] = n
        self.live_layouts = dict(tree.layouts)
        self.pods: list[Pod] = []
        self.events: list[tuple] = []
        self.pulls: list[tuple] = []  # (node, reference) of every image the nodes pulled
        self.floor: dict[str, int] = {}  # model -> fewest running pods seen
        self.refresh_labels()
        self.deploy(tree.workloads, tree.images)

    # GFD
    def refresh_labels(self) -> None:
        for n in self.nodes.values():
            devices = node_devices(self.live_layouts.get(n.layout, []), self.gpus[n.pool])
            _, single = advertised(self.tree.strategy, devices)
            product = self.products.get(n.pool)
            if product:
                n.labels["nvidia.com/gpu.product"] = f"{product}-MIG-{single}" if single else product
            n.labels["nvidia.com/mig.config"] = n.layout
            n.labels["nvidia.com/mig.config.state"] = n.state

    def free(self, node: Node) -> Counter:
        devices = node_devices(self.live_layouts.get(node.layout, []), self.gpus[node.pool])
        res, _ = advertised(self.tree.strategy, devices)
        for p in self.pods:
            if p.node == node.name:
                res.subtract(p.limits)
        return res

    def schedule(self) -> None:
        """Filter (nodeSelector, free extended resources, schedulable), then score: kube-scheduler's
        default NodeResourcesFit LeastAllocated on cpu and memory, which every Kiln pod requests
        alike within a workload, so the node with the fewest pods wins (ties by name)."""
        for p in self.pods:
            if p.node is not None:
                continue
            fits = []
            for n in self.nodes.values():
                if n.cordoned or n.state != "success":
                    continue
                if any(n.labels.get(k) != v for k, v in p.selector.items()):
                    continue
                free = self.free(n)
                if all(free[k] >= v for k, v in p.limits.items()):
                    fits.append((sum(1 for q in self.pods if q.node == n.name), n.name))
            if fits:
                p.node = min(fits)[1]
                node = self.nodes[p.node]
                for ref in p.images:
                    if ref not in node.images:
                        node.images.add(ref)
                        self.pulls.append((node.name, ref))
        self.observe()

    def observe(self) -> None:
        running = Counter(p.model for p in self.pods if p.node is not None)
        for model in {p.model for p in self.pods}:
            self.floor[model] = min(self.floor.get(model, 10 ** 9), running[model])

    def pending(self) -> list[Pod]:
        return [p for p in self.pods if p.node is None]

    def deploy(self, workloads: dict, images: dict) -> None:
        for name, (model, pool, replicas, selector, limits, template, _, shape) in workloads.items():
            self.pods += [Pod(name, model, pool, selector, limits, template, shape, images=images.get(name, ()))
                          for _ in range(replicas)]
        self.schedule()

    # the Eviction API under the PDBs in force
    def evict(self, node: Node, pdbs: dict) -> bool:
        """`pdbs`: workload -> (maxUnavailable, matchLabels); a pod is covered when its labels match."""
        mine = [p for p in self.pods if p.node == node.name]
        for p in mine:
            budget = pdbs.get(p.workload)
            if budget is None or budget[1].get("kiln.io/shape") not in (None, p.shape):
                p.node = None  # no budget covers it
                continue
            unavailable = sum(1 for q in self.pods if q.workload == p.workload and q.shape == p.shape and q.node is None)
            if unavailable + 1 > budget[0]:
                return False  # 429: the drain cannot go on
            p.node = None  # its ReplicaSet's replacement waits, Pending
        self.observe()
        return True

    # mig-manager on a label change
    def relabel(self, node: Node, layout: str) -> None:
        if layout == node.layout and node.state == "success":
            return
        if layout not in self.live_layouts:
            node.state = "failed"
            return
        held = [p for p in self.pods if p.node == node.name and p.limits]
        if held and self.live_layouts.get(node.layout) != self.live_layouts[layout]:
            node.state = "failed"  # ci.Destroy()/gi.Destroy() of an instance in use
            return
        node.layout, node.state = layout, "success"
        self.refresh_labels()

    # one sync of a new tree
    def sync(self, new: Tree) -> None:
        old = self.tree
        # Dynamo's webhook on the DGDs in both trees
        for model in sorted(set(old.dgds) & set(new.dgds)):
            b, a = old.dgds[model], new.dgds[model]
            refused = set(b) != set(a) or any(
                b[c][0] != a[c][0] or (b[c][0] is not None and b[c][1] != a[c][1]) for c in set(b) & set(a))
            if refused:
                pools = {w[1] for k, w in {**old.workloads, **new.workloads}.items() if w[0] == model}
                self.events += [("recreate", p, model) for p in sorted(pools)]
                self.pods = [p for p in self.pods if p.model != model]
        # the re-layout script first scales the Deployments that left the tree to 0 (label-nodes.sh retire)
        self.pods = [p for p in self.pods if p.workload in new.workloads or "/" in p.workload]
        # wave -2 puts the new PDBs in force; wave -1: the re-layout, node by node
        pdbs = {name: w[6] for name, w in new.workloads.items() if w[6]}
        self.live_layouts = {**{n.layout: self.live_layouts[n.layout] for n in self.nodes.values()
                                if n.layout in self.live_layouts}, **new.layouts}
        self.tree = Tree(new.strategy, new.layouts, new.pools, old.workloads, new.dgds, old.images)
        if new.strategy != old.strategy:  # the device plugin re-advertises the MIG nodes' devices
            self.refresh_labels()
            self.events += [("node-relayout", p, "strategy") for p, v in sorted(new.pools.items())
                            if any(e.get("mig-enabled") for e in new.layouts[v[1]])]
        for pool, (_, layout, _, batch) in sorted(new.pools.items()):
            todo = [n for n in self.nodes.values() if n.pool == pool and (n.layout != layout or n.state != "success")]
            if todo:
                self.events.append(("node-relayout", pool, layout))
            while todo:
                group, todo = todo[:batch], todo[batch:]
                for n in group:
                    n.cordoned = True
                for n in group:
                    assert self.evict(n, pdbs), f"eviction on {n.name} refused for ever by a PDB"
                for n in group:
                    self.relabel(n, layout)
                    assert n.state == "success", f"{n.name} left {n.state}"
                for n in group:
                    n.cordoned = False
                self.schedule()
        self.live_layouts = {**{n.layout: self.live_layouts[n.layout] for n in self.nodes.values()}, **new.layouts}
        # wave 0: the workloads; Argo CD prunes what left the tree
        for name, w in old.workloads.items():
            if name not in new.workloads:
                if not any(e[0] == "recreate" and e[2] == w[0] for e in self.events):
                    self.events.append(("workload-delete", w[1], name))
                self.pods = [p for p in self.pods if p.workload != name]
        # Dynamo's worker hash: a changed pod template of one worker component rolls every worker of its DGD
        hashed = {name.split("/", 1)[0] for name, w in new.workloads.items() if "/" in name
                  and name in old.workloads and old.workloads[name][5] != w[5]}
        for name, w in new.workloads.items():
            prev = old.workloads.get(name)
            recreated = any(e[0] == "recreate" and e[2] == w[0] for e in self.events)
            if prev is None or recreated:
                if not recreated:
                    self.events.append(("new", w[1], name))
                self.deploy({name: w}, new.images)
                continue
            rolls = prev[5] != w[5] or ("/" in name and name.split("/", 1)[0] in hashed)
            if rolls:
                self.events.append(("workload-roll", w[1], name))
            if prev[2] != w[2]:
                self.events.append(("replicas", w[1], name))
            if rolls or prev[2] != w[2]:
                self.pods = [p for p in self.pods if p.workload != name]
                self.deploy({name: w}, new.images)
        self.tree = new
        self.schedule()
