"""The discrete-event simulation of one change: the base revision runs, fully rolled out, on the
pools' nodes; Argo CD syncs the new revision wave by wave (argocd.py); the Deployment and ReplicaSet
controllers (deployment.py), the scheduler (scheduler.py), the kubelet (a bound pod is Ready after its
model's load time), the re-layout Job's script (label-nodes.sh, ported step by step below), the
Eviction API under the budgets (disruption.py), mig-manager (migmanager.py) and GFD with the device
plugin (devices.py) act at each event until nothing is left to do or the change is stuck.

Deterministic: no randomness, every iteration in name or creation order. The result is a timeline of
steps with each model's ready pods (selected by its live Service) after each, the end state, and
the stuck state with its cause.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from compiler.catalog import k8s_controllers

from . import argocd, devices, disruption, migmanager, podsecurity, rbac, scheduler
from . import deployment as dc
from . import dynamo as dyn
from . import grove
from .model import PoolNodes, Revision, Workload


def defaults() -> dict:
    return k8s_controllers.table()["simulation_defaults"]


@dataclass
class Pod:
    name: str
    workload: str
    rs: str
    labels: dict
    created: int
    node: str | None = None
    ready_at: float | None = None
    ready: bool = False


@dataclass
class Node:
    name: str
    pool: str
    gpus: int
    product: str | None
    labels: dict
    mig: migmanager.MigNode
    taints: list
    unschedulable: bool = False


@dataclass
class Deploy:
    spec: Workload
    rss: list = field(default_factory=list)  # deployment.RS, oldest first; the last one is the newest
    templates: dict = field(default_factory=dict)  # RS name -> the Workload whose template it runs
    last_progress: float = 0.0
    timed_out: bool = False
    selected: int = 0  # Grove: the PodClique's pods selected for update since its template changed (grove.py)


GROVE = k8s_controllers.dynamo_rollout()["grove_rollout"]


def _unavailable(w: Workload) -> int:
    """How many of a Dynamo worker's pods its rollout may take out at once: Grove's fixed 1, or what the
    operator resolves from the worker's annotations."""
    return GROVE["max_unavailable"] if w.grove else dyn.resolve_params(w.max_surge, w.max_unavailable, w.replicas)[1]


@dataclass
class Step:
    t: float
    text: str
    ready: dict  # model -> ready pods behind its Service, after this step
    pool: str | None = None  # the node pool it happens on; None: the cluster's (Argo CD's waves, the Job)
    by_pool: dict = field(default_factory=dict)  # node pool -> model -> ready pods on its nodes, after this step


@dataclass
class Result:
    steps: list[Step]
    completed: bool
    stuck: str | None  # the cause, when not completed
    duration_s: float
    before: dict  # model -> ready pods before the change
    desired: dict  # model -> replicas the new revision asks for
    end: dict  # model -> ready pods at the end
    low: dict  # model -> (fewest ready pods, from t, for how long in s)
    stuck_on: tuple | None = None  # (kind, namespace, name) of the object the sync waits on, when stuck
    paces: dict = field(default_factory=dict)  # workload name -> (replicas, maxSurge, maxUnavailable) it rolls by
    pools: dict = field(default_factory=dict)  # node pool -> the models whose workloads it runs, either revision
    # what the change did, as the plan's disruptions name it: (kind, pool, workload) for "new",
    # "workload-roll", "replicas", "workload-delete" (a DGD's worker as <dgd>/<component>), and
    # ("node-relayout", pool) where the re-layout Job relabels a node
    events: list = field(default_factory=list)
    pool_before: dict = field(default_factory=dict)  # node pool -> model -> ready pods on its nodes before
    pool_low: dict = field(default_factory=dict)  # node pool -> model -> (fewest ready pods on it, from t, for s)
    pool_end: dict = field(default_factory=dict)  # node pool -> model -> ready pods on its nodes at the end
    stuck_pool: str | None = None  # the node pool the object the sync waits on runs in; None: the cluster's
    models: dict = field(default_factory=dict)  # workload name (as paces') -> the model it serves, either revision
    strategy: tuple = ()  # (base, new) MIG strategy where the change flips it; () where it stays
    # (name, old namespace, new namespace) of each Service (Kiln's, or a Dynamo frontend's, which its
    # operator creates) that the change moves: its DNS name <name>.<namespace>.svc changes
    moved_services: list = field(default_factory=list)
    # node pool -> why its node-tuning pods' clocks and power commands fail (each node labelled
    # kiln.io/gpu-tuning=failed with that reason): they run, but lack what the commands need
    tuning_failed: dict = field(default_factory=dict)
    # what kind of cause `stuck` is, for K858's fix (report.STUCK_FIX): "reshape" (a Deployment's pods
    # change shape, Pending, and its pace lets no old pod go), "room" (Pending for want of devices),
    # "worker-room" (a Dynamo or Grove worker's), "selector" (no node carries the pool's selector),
    # "budget" (evictions refused by a PodDisruptionBudget), "job", "pod-security", "webhook",
    # "immutable", "" (another)
    stuck_family: str = ""
    # node pool -> model -> the fewest ready pods its PodDisruptionBudgets declare there (disruption.
    # declared_floor), the lesser of the two revisions' in devices, as the base's pods; for a model on
    # the pool in both
    floors: dict = field(default_factory=dict)


class Stuck(Exception):
    pass


class Simulation:
    def __init__(self, base: Revision, new: Revision, pools: list[PoolNodes], load_s: dict[str, float] | None = None):
        self.d = defaults()
        self.base, self.new, self.load = base, new, dict(load_s or {})
        self.now, self.seq = 0.0, 0
        self.steps: list[Step] = []
        self.strategy = base.strategy
        self.config = dict(base.layouts)  # the live layouts ConfigMap mig-manager mounts
        self.defs = {**base.layouts, **new.layouts}  # what each layout is, for the devices a node carries
        # the live objects (Argo CD's view): the base tree's, which the Application tracks, and the live
        # layouts ConfigMap a base re-layout Job wrote (untracked: no tree holds it)
        self.live, self.tracked = dict(base.objects), set(base.objects)
        if base.relayout is not None and base.mig_config and base.mig_config not in base.objects:
            self.live[base.mig_config] = self._written(None, base.relayout)
        self.mounted = dict(self.config)  # its copy in mig-manager's pods, refreshed by the kubelet
        self.refresh_at, self.written = 0.0, None  # when that copy catches up; the Job's last change
        self.nodes: dict[str, Node] = {}
        for p in pools:
            layout = base.pools[p.name].layout if p.name in base.pools else "all-disabled"
            had = base.pools[p.name].nodes if p.name in base.pools else 0
            for i in range(p.count):
                name = f"{p.name}-{i}"
                # a node the edit adds joins as the GPU Operator leaves it: MIG off (its default)
                mig = migmanager.MigNode(name, layout, layout) if i < had else \
                    migmanager.MigNode(name, "all-disabled", "all-disabled")
                if name in p.preset:
                    mig.label, mig.state, mig.applied = p.preset[name]
                self.nodes[name] = Node(name, p.name, p.gpus, p.product, dict(p.labels), mig, list(p.taints),
                                        unschedulable=mig.state != "success")
        self.budgets = list(base.budgets)
        self.services = dict(base.services)
        self.deploys: dict[str, Deploy] = {}
        self.pods: list[Pod] = []
        self.job = None  # the running re-layout script (a generator) and its wake-up time
        self.job_failed: str | None = None
        self.job_blocked = False  # the Job failed on evictions a PodDisruptionBudget refused
        self.refused_pods: dict[tuple, str] = {}  # DaemonSet key -> why the API server refuses its pods
        self.tuning_failed: dict[str, str] = {}
        for w in base.workloads.values():
            self._apply_deployment(w)
        self._settle(initial=True)
        self.steps = []
        self.gaps: list[tuple[Step, Workload]] = []  # a Dynamo roll's routing-gap step and its model (review N10)
        self.events: list[tuple] = []
        self.before = self.ready_by_model()
        self.pool_before = self.ready_by_pool()

    # --- helpers -----------------------------------------------------------------------------------
    def _say(self, text: str, pool: str | None = None) -> None:
        self.steps.append(Step(self.now, text, self.ready_by_model(), pool, self.ready_by_pool()))

    def _event(self, event: tuple) -> None:
        if event not in self.events:
            self.events.append(event)

    def _changed(self, w: Workload, shown: str) -> None:
        """The events of applying `w` (named `shown` in the plan) over what runs."""
        d = self.deploys.get(w.key)
        if d is None:
            self._event(("new", w.pool, shown))
            return
        if d.templates[d.rss[-1].name].template != w.template:
            self._event(("workload-roll", w.pool, shown))
        if d.spec.replicas != w.replicas:
            self._event(("replicas", w.pool, shown))

    @staticmethod
    def _shown(w: Workload, dgd: str | None) -> str:
        return f"{dgd}/{w.labels['nvidia.com/dynamo-component']}" if dgd else w.name

    def _pool_of(self, key: tuple) -> str | None:
        """The pool an object is of: its kiln.io/pool label (meta.labels), in either revision."""
        o = self.new.objects.get(key) or self.base.objects.get(key) or {}
        return ((o.get("metadata") or {}).get("labels") or {}).get("kiln.io/pool")

    def _load(self, model: str) -> float:
        return float(self.load.get(model, self.d["pod_load_s"]))

    def node_devices(self, n: Node) -> list:
        return devices.gpus_of(self.defs.get(n.mig.applied, []), n.gpus) if n.mig.applied in self.defs \
            else devices.gpus_of([], n.gpus)

    def _node_view(self, n: Node) -> scheduler.NodeView:
        devs = self.node_devices(n)
        labels = dict(n.labels)
        labels[migmanager.CONFIG_LABEL] = n.mig.label
        if n.mig.state:
            labels[migmanager.STATE_LABEL] = n.mig.state
        if n.product:
            labels["nvidia.com/gpu.product"] = devices.product_label(n.product, self.strategy, devs)
        alloc = devices.advertised(self.strategy, devs) if n.mig.busy_until is None else Counter()
        used: Counter = Counter()
        for p in self.pods:
            if p.node == n.name:
                used.update(self._tmpl(p).requests)
        return scheduler.NodeView(n.name, labels, alloc, used, n.unschedulable, n.taints)

    def _terminating(self) -> set[str]:
        """The pods a ReplicaSet (or PodClique) holds over its replicas: the controller deletes them in
        its next sync, and a pod with a deletionTimestamp is no longer a ready endpoint of its Service
        (kubernetes v1.34 staging/src/k8s.io/endpointslice/utils.go podToEndpoint: ready :=
        publishNotReadyAddresses || (serving && !terminating), terminating := DeletionTimestamp != nil;
        Kiln's Services do not publish not-ready addresses). So the step that scales a generation down
        counts without them, whatever its grace period. Left out: kube-proxy's fallback to serving
        terminating endpoints when a Service has no ready one (KEP-1669)."""
        out: set[str] = set()
        for d in self.deploys.values():
            for rs in d.rss:
                mine = [p for p in self.pods if p.rs == rs.name]
                out.update(p.name for p in _doomed(mine, rs.replicas))
        return out

    def ready_by_model(self) -> dict:
        """Each model's ready pods behind its Service: Ready and not being deleted (_terminating)."""
        gone = self._terminating()
        out = {}
        for model in sorted({m for m, _ in self.services.values()}):
            sels = [sel for m, sel in self.services.values() if m == model]
            out[model] = sum(1 for p in self.pods if p.ready and p.name not in gone and any(
                all(p.labels.get(k) == v for k, v in sel.items()) for sel in sels))
        return out

    def ready_by_pool(self) -> dict:
        """Each pool's share of ready_by_model: the ready pods behind a model's Service on its nodes."""
        gone = self._terminating()
        out: dict = {}
        for model in sorted({m for m, _ in self.services.values()}):
            sels = [sel for m, sel in self.services.values() if m == model]
            for p in self.pods:
                if p.ready and p.node is not None and p.name not in gone and any(
                        all(p.labels.get(k) == v for k, v in sel.items()) for sel in sels):
                    mine = out.setdefault(self.nodes[p.node].pool, {})
                    mine[model] = mine.get(model, 0) + 1
        return out

    # --- the Deployment and ReplicaSet controllers ---------------------------------------------------
    def _apply_deployment(self, w: Workload) -> None:
        d = self.deploys.get(w.key)
        if d is None:
            d = self.deploys[w.key] = Deploy(w, last_progress=self.now)
        d.spec = w
        if d.rss and d.templates[d.rss[-1].name].template != w.template and w.dynamo \
                and w.replicas - _unavailable(w) <= 1:
            self._say(f"{w.name}: Dynamo routes to a new worker once it registers with the frontend, after "
                      "Kubernetes marks it Ready; with one worker left in service the frontend may have none "
                      "to route to for a moment (Dynamo's rolling-update guide, ai-dynamo/dynamo#13622)", w.pool)
            self.gaps.append((self.steps[-1], w))
        if not d.rss or d.templates[d.rss[-1].name].template != w.template:
            same = [r for r in d.rss if d.templates[r.name].template == w.template]
            if same:  # the template of an older ReplicaSet: it becomes the new one (rollback)
                d.rss.remove(same[0])
                d.rss.append(same[0])
            else:
                self.seq += 1
                rs = dc.RS(f"{w.name}-rs{self.seq}", 0, 0, self.seq)
                d.rss.append(rs)
                d.templates[rs.name] = w
            d.last_progress, d.timed_out, d.selected = self.now, False, 0

    def _delete_deployment(self, name: str) -> None:
        self.deploys.pop(name, None)
        self.pods = [p for p in self.pods if p.workload != name]

    def _deployment_step(self, d: Deploy) -> bool:
        w = d.spec
        for rs in d.rss:
            rs.available = sum(1 for p in self.pods if p.rs == rs.name and p.ready)
        new, olds = d.rss[-1], d.rss[:-1]
        before = [(r.name, r.replicas) for r in d.rss]
        if w.grove:  # Grove: the worker is a PodClique, its old-hash pods the old generations (sim/grove.py)
            changed, d.selected = grove.rollout(w.replicas, GROVE["min_available_default"], olds, new, d.selected)
            moved = "pclq" if changed else ""
        elif w.dynamo:  # Dynamo's operator: a worker generation is a DynamoComponentDeployment (sim/dynamo.py)
            moved = "dcd" if dyn.rollout(w.replicas, w.max_surge, w.max_unavailable, olds, new) else ""
        else:
            moved = dc.rollout_rolling(w.replicas, w.max_surge, w.max_unavailable, olds, new)
        if moved:
            after = {r.name: r.replicas for r in d.rss}
            if w.grove:  # one PodClique: its old-hash and new-hash pods in one line
                old_n = sum(n for name, n in before if name != new.name)
                self._say(f"{w.name}: Grove PodClique, old-hash pods {old_n} -> "
                          f"{sum(after[r.name] for r in olds)}, new-hash {dict(before)[new.name]} -> {new.replicas} "
                          "(rollingupdate.go processPendingUpdates: each old pod deleted before its replacement)",
                          w.pool)
            for name, n in before if not w.grove else ():
                if after[name] != n:
                    role = "new" if name == new.name else "old"
                    if w.dynamo:
                        self._say(f"{w.name}: {role} worker generation {n} -> {after[name]} pod(s) (Dynamo "
                                  "dgd_worker_rollout_reconciler.go buildRollingUpdateContext)", w.pool)
                    else:
                        self._say(f"{w.name}: {role} ReplicaSet {n} -> {after[name]} pod(s) (rolling.go "
                                  f"{'reconcileNewReplicaSet' if moved == 'up' else 'reconcileOldReplicaSets'})",
                                  w.pool)
            d.last_progress = self.now
        return bool(moved)

    def _replicaset_step(self) -> bool:
        changed = False
        for d in self.deploys.values():
            for rs in d.rss:
                mine = [p for p in self.pods if p.rs == rs.name]
                if len(mine) < rs.replicas:
                    for _ in range(rs.replicas - len(mine)):
                        self.seq += 1
                        self.pods.append(Pod(f"{rs.name}-{self.seq}", d.spec.key, rs.name,
                                             dict(d.templates[rs.name].labels), self.seq))
                    changed = True
                elif len(mine) > rs.replicas:
                    gone = {p.name for p in _doomed(mine, rs.replicas)}
                    self.pods = [p for p in self.pods if p.name not in gone]
                    changed = True
        return changed

    def _schedule(self) -> bool:
        changed = False
        pending = sorted((p for p in self.pods if p.node is None), key=lambda p: p.created)
        if not pending:
            return False
        views = {n.name: self._node_view(n) for n in self.nodes.values()}
        for p in pending:
            w = self._tmpl(p)
            node, _ = scheduler.place(list(views.values()), w.node_selector, w.tolerations, w.requests)
            if node is not None:
                views[node].requested.update(w.requests)
                p.node, p.ready_at = node, self.now + self._load(w.model)
                changed = True
        return changed

    def pending_reasons(self, p: Pod) -> str:
        w = self._tmpl(p)
        _, reasons = scheduler.place([self._node_view(n) for n in self.nodes.values()], w.node_selector,
                                     w.tolerations, w.requests)
        return f"0/{len(self.nodes)} nodes are available: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))

    def _kubelet(self) -> bool:
        changed = False
        for p in self.pods:
            if p.node is not None and not p.ready and p.ready_at is not None and p.ready_at <= self.now:
                p.ready = True
                d = self.deploys[p.workload]
                d.last_progress = self.now
                changed = True
        return changed

    def _settle(self, initial: bool = False) -> None:
        for _ in range(10000):
            changed = self._replicaset_step()
            changed |= self._schedule()
            if initial:
                for p in self.pods:
                    if p.node is not None and not p.ready:
                        p.ready, p.ready_at = True, 0.0
            changed |= self._kubelet()
            for d in list(self.deploys.values()):
                changed |= self._deployment_step(d)
            changed |= self._mig_step()
            if not changed:
                return
        raise RuntimeError("the controllers did not settle")

    # --- mig-manager, GFD ------------------------------------------------------------------------------
    def _mig_step(self) -> bool:
        changed = False
        for n in self.nodes.values():
            if n.mig.busy_until is not None and n.mig.busy_until <= self.now:
                held = any(p.node == n.name and self._tmpl(p).requests for p in self.pods)
                layouts_differ = self.defs.get(n.mig.applied) != self.defs.get(n.mig.label)
                state = migmanager.finish(n.mig, self._mounted(), held and layouts_differ)
                self._say(f"node {n.name}: MIG manager reports {state} ({migmanager.CONFIG_LABEL}={n.mig.label})",
                          n.pool)
                changed = True
        return changed

    # --- the re-layout Job: label-nodes.sh, step by step -------------------------------------------------
    def _tmpl(self, p: Pod) -> Workload:
        """The pod template a pod was made from (its ReplicaSet's)."""
        return self.deploys[p.workload].templates[p.rs]

    def _gpu_pods(self, node: str) -> list[Pod]:
        return [p for p in self.pods if p.node == node and self._tmpl(p).requests]

    def _pod_views(self) -> list[disruption.PodView]:
        return [disruption.PodView(p.name, p.workload.split("/")[0], p.labels,
                                   (p.workload, self.deploys[p.workload].spec.replicas),
                                   "Running" if p.node else "Pending", p.ready) for p in self.pods]

    def _relayout(self, job):
        """A generator: yields the seconds it sleeps; returns normally or raises Stuck."""
        # retire(): Deployments of the spec that left it are scaled to 0 (kubectl scale)
        if job.keep is not None:
            for name in sorted(k for k in set(self.deploys) - set(job.keep) if k.startswith(job.namespace + "/")):
                denied = rbac.denied(job.rules, "scale deployment", name.split("/", 1)[1])
                if denied:
                    raise Stuck(f"re-layout Job: `kubectl scale deployment {name.split('/', 1)[1]}` is forbidden "
                                f"(its Role lacks {', '.join(denied)}); the Job fails (backoffLimit 0)")
                self.deploys[name].spec.replicas = 0
                self._say(f"re-layout Job: {name} left the spec, scaled to 0", self.deploys[name].spec.pool)
                self._settle()
        # write_layouts(): desired + layouts in use; the kubelet refreshes the mounted file
        merged = {**{n.mig.label: self.config[n.mig.label] for n in self.nodes.values() if n.mig.label in self.config},
                  **self.new.layouts}
        for lost in sorted({n.mig.label for n in self.nodes.values() if n.mig.label} - set(merged)):
            self._say(f"re-layout Job: layout {lost} on a node is in neither ConfigMap: left out of the live one")
        self._job_writes(job)
        if merged != self.config:
            self._write_config(merged)
            self._say("re-layout Job: live layouts ConfigMap written; the MIG manager sees it once the kubelet "
                      f"refreshes its pods' copy (within {self.d['configmap_refresh_s']}s)")
        for pool in job.pools:
            members = [n for n in self.nodes.values() if n.pool == pool.name]
            todo = [n for n in members if not (n.mig.label == pool.layout and n.mig.state == "success")]
            if job.bounce:  # the script takes nodes labelled with the layout but not at success first
                todo = [n for n in todo if n.mig.label == pool.layout] + [n for n in todo if n.mig.label != pool.layout]
            for i in range(0, len(todo), pool.max_unavailable):
                group = todo[i:i + pool.max_unavailable]
                for n in group:
                    n.unschedulable = True
                self._say(f"re-layout Job: {', '.join(n.name for n in group)} cordoned", pool.name)
                for n in group:
                    deadline = self.now + job.evict_s
                    while True:
                        left = self._gpu_pods(n.name)
                        if not left:
                            break
                        if self.now >= deadline:
                            self.job_blocked = True
                            raise Stuck(f"re-layout Job: node {n.name}: GPU pods still there after {job.evict_s}s "
                                        f"({', '.join(sorted({p.workload for p in left}))}: evictions refused by "
                                        f"their PodDisruptionBudget); the node stays cordoned, the Job fails")
                        views = self._pod_views()
                        allowed: dict = {}  # the budgets' status in this round
                        evicted = []
                        for p in left:
                            view = next(v for v in views if v.name == p.name)
                            if disruption.evict(view, self.budgets, views, allowed) is None:
                                evicted.append(p)
                        if evicted:
                            gone = {p.name for p in evicted}
                            self.pods = [p for p in self.pods if p.name not in gone]
                            what = Counter(p.workload for p in evicted)
                            self._say(f"re-layout Job: node {n.name}: evicted " +
                                      ", ".join(f"{c} {w}" for w, c in sorted(what.items())), pool.name)
                            self._settle()
                        if self._gpu_pods(n.name):
                            # retries every few seconds change nothing until another event: skip to it
                            retry = self.d["eviction_retry_s"]
                            nxt = self._next_event(job=False)
                            wait = retry if evicted or nxt is None else max(retry, nxt - self.now)
                            yield min(-(-wait // retry) * retry, max(retry, deadline - self.now))
                for n in group:  # a node labelled with the layout but not at success goes through all-disabled
                    if n.mig.label == pool.layout and job.bounce:
                        migmanager.on_label(n.mig, job.bounce, self.now, self.d["mig_reconfigure_s"], self._mounted())
                        self._say(f"re-layout Job: node {n.name} labelled {migmanager.CONFIG_LABEL}={job.bounce} "
                                  "first (the MIG manager acts on a change of the value only)", pool.name)
                        yield from self._wait_state(n, job)
                prev = {n.name: n.mig.label or "all-disabled" for n in group}  # label-nodes.sh prev-<node>
                for n in group:
                    started = migmanager.on_label(n.mig, pool.layout, self.now, self.d["mig_reconfigure_s"],
                                                  self._mounted())
                    self._event(("node-relayout", pool.name))
                    n.mig.state = n.mig.state if started else ""  # `nvidia.com/mig.config.state-`
                    self._say(f"re-layout Job: node {n.name} labelled {migmanager.CONFIG_LABEL}={pool.layout}"
                              + ("" if started else " (the same value: the MIG manager does not act)"), pool.name)
                for n in group:
                    yield from self._settle_node(n, pool.layout, prev[n.name], job)
                for n in group:
                    n.unschedulable = False
                self._say(f"re-layout Job: {', '.join(n.name for n in group)} uncordoned", pool.name)
                self._settle()
        self._job_writes(job)
        self._write_config({**{n.mig.label: self.config[n.mig.label] for n in self.nodes.values()
                                if n.mig.label in self.config}, **self.new.layouts})

    def _job_writes(self, job) -> None:
        if self._mig_key() is not None:
            self.live[self._mig_key()] = self._written(self.live.get(self._mig_key()), job)

    def _mig_key(self) -> tuple | None:
        return self.new.mig_config or self.base.mig_config

    @staticmethod
    def _written(live: dict | None, job) -> dict:
        """The live layouts ConfigMap after the script's write: its data, the annotations it writes
        (`writes`), the other metadata as it was (a merge patch; an apply's three-way merge of
        metadata another client wrote is not modelled)."""
        md = dict((live or {}).get("metadata") or {})
        md["annotations"] = {**(md.get("annotations") or {}), **job.writes}
        return {**(live or {"apiVersion": "v1", "kind": "ConfigMap"}), "metadata": md,
                "data": {"written-by": "label-nodes.sh"}}

    def _write_config(self, layouts: dict) -> None:
        self.mounted, self.config = self._mounted(), layouts
        self.refresh_at, self.written = self.now + self.d["configmap_refresh_s"], self.now

    def _mounted(self) -> dict:
        """The layouts file as mig-manager's pods see it now."""
        if self.now >= self.refresh_at:
            self.mounted = self.config
        return self.mounted

    def _settle_node(self, n: Node, layout: str, prev: str, job):
        """label-nodes.sh settle: a `failed` within the script's window after its ConfigMap write is
        answered by labelling the node back to `prev` and again to `layout` every poll, until the
        MIG manager's copy of the file has the name."""
        said = False
        while True:
            try:
                yield from self._wait_state(n, job)
                return
            except Stuck:
                if n.mig.state != "failed" or self.written is None or self.now >= self.written + job.config_sync_s:
                    raise
            if not said:
                self._say(f"re-layout Job: node {n.name}: the MIG manager's copy of the layouts lacks {layout} "
                          f"yet (failed, no GPU touched); labelled back to {prev} and again every "
                          f"{self.d['state_poll_s']}s until it has it", n.pool)
                said = True
            migmanager.on_label(n.mig, prev, self.now, self.d["mig_reconfigure_s"], self._mounted())
            yield from self._wait_state(n, job)
            yield self.d["state_poll_s"]
            migmanager.on_label(n.mig, layout, self.now, self.d["mig_reconfigure_s"], self._mounted())

    def _wait_state(self, n: Node, job):
        """label-nodes.sh wait_state: poll the node's state label until success, failed or the bound."""
        deadline = self.now + job.mig_s
        while n.mig.state != "success":
            if n.mig.state == "failed":
                raise Stuck(f"re-layout Job: node {n.name}: the MIG manager reports failed; the node stays cordoned")
            if self.now >= deadline:
                raise Stuck(f"re-layout Job: node {n.name}: state '{n.mig.state}' after {job.mig_s}s; the node "
                            "stays cordoned (the MIG manager acts on a change of the label's value only)")
            yield self.d["state_poll_s"]

    # --- health (gitops-engine pkg/health) --------------------------------------------------------------
    def _health(self, key: tuple) -> str:
        kind, ns, name = key
        if kind == "Deployment" and f"{ns}/{name}" in self.deploys:
            d = self.deploys[f"{ns}/{name}"]
            if d.timed_out:
                return "Degraded"
            new, olds = d.rss[-1], d.rss[:-1]
            for rs in d.rss:
                rs.available = sum(1 for p in self.pods if p.rs == rs.name and p.ready)
            done = dyn.complete if d.spec.dynamo else dc.complete
            return "Healthy" if done(d.spec.replicas, olds, new) else "Progressing"
        if kind == "DynamoGraphDeployment":  # Kiln's dgd-health.lua: Healthy once the operator's rollout is done
            ks = self.new.groups.get(key, [])
            return "Healthy" if all(self._health(("Deployment",) + tuple(k.split("/", 1))) == "Healthy"
                                    for k in ks if k in self.deploys) else "Progressing"
        if kind == "DaemonSet" and key in self.refused_pods:  # gitops-engine health_daemonset.go: 0 available
            return "Progressing"
        if kind == "Job" and self.job is not None and self.job[2] == key:
            return "Degraded" if self.job_failed else "Progressing" if self.job[0] is not None else "Healthy"
        return "Healthy"

    def _apply(self, task: argocd.Task) -> None:
        kind, ns, name = task.key
        key = f"{ns}/{name}"
        if task.prune:
            live = self.live.get(task.key)
            if live is None:
                return
            code, message = argocd.prune_result(live, argocd.prunes(self.new.app))
            if code != "Pruned":  # sync_context.go pruneObject, on the live object as this wave finds it
                why = f"its live sync-options hold {argocd.DISABLE_PRUNE}" if argocd.prunes(self.new.app) \
                    else "the Application's automated sync does not prune"
                self._say(f"Argo CD does not prune {kind} {key}: {message} ({why})", self._pool_of(task.key))
                return
            del self.live[task.key]
            self.tracked.discard(task.key)
            self._say(f"Argo CD prunes {kind} {key}", self._pool_of(task.key))
            if task.key == self._mig_key():  # review N9
                # running MIG manager pods keep the files they have (the kubelet cannot refresh them)
                self.mounted, self.config, self.refresh_at = self._mounted(), {}, float("inf")
                self._say(f"the ConfigMap the MIG manager reads is gone: a MIG manager pod that restarts cannot "
                          f"mount it, and the re-layout script finds no layout a node carries in it")
            if kind == "Deployment":
                if key in self.deploys:
                    self._event(("workload-delete", self.deploys[key].spec.pool, name))
                self._delete_deployment(key)
            elif kind == "DynamoGraphDeployment":
                for k in self.base.groups.get(task.key, []):
                    if k in self.deploys:
                        spec = self.deploys[k].spec
                        self._event(("workload-delete", spec.pool, self._shown(spec, name)))
                    self._delete_deployment(k)
            elif kind == "PodDisruptionBudget":
                self.budgets = [b for b in self.budgets if b.name != key]
            elif kind == "Service":
                self.services.pop(key, None)
            elif kind == "DaemonSet":
                labels = ((self.base.objects.get(task.key) or {}).get("metadata") or {}).get("labels") or {}
                if labels.get("app.kubernetes.io/component") == "gpu-tuning":
                    self._say(f"the nodes of {labels.get('kiln.io/pool', name)} keep the clocks and power limit "
                              "it set until a reboot or a driver reload: nothing restores the defaults",
                              labels.get("kiln.io/pool"))
            return
        self._say(f"Argo CD applies {kind} {key}", self._pool_of(task.key))
        obj, live = self.new.objects[task.key], self.live.get(task.key)
        self.live[task.key] = argocd.applied(self.new.app, obj, live)
        self.tracked.add(task.key)
        if task.key == self.new.mig_config:  # the tree holds the ConfigMap the MIG manager reads
            kept = live is not None and argocd.respects_ignored(self.new.app) \
                and "/data" in argocd.ignored_pointers(self.new.app, obj)
            if not kept:
                self._write_config(dict(self.new.layouts))
                self._say(f"{key}: written with the tree's layouts" + (
                    "" if live is None else " (over the live ones: the Application does not ignore its data)"))
            else:
                self._say(f"{key}: its live data stays (the Application's ignoreDifferences /data with "
                          f"{argocd.RESPECT_IGNORE})")
        if kind == "DynamoGraphDeployment":
            for k in self.new.groups.get(task.key, []):
                self._changed(self.new.workloads[k], self._shown(self.new.workloads[k], name))
                self._apply_deployment(Workload(**dict(self.new.workloads[k].__dict__)))
            gone = set(self.base.groups.get(task.key, [])) - set(self.new.groups.get(task.key, []))
            for k in sorted(gone):
                if k in self.deploys:
                    self._event(("workload-delete", self.deploys[k].spec.pool, self._shown(self.deploys[k].spec, name)))
                self._delete_deployment(k)
        elif kind == "Deployment":
            self._changed(self.new.workloads[key], name)
            self._apply_deployment(Workload(**dict(self.new.workloads[key].__dict__)))
        elif kind == "PodDisruptionBudget":
            prev = next((b for b in self.budgets if b.name == key), None)
            now = next(b for b in self.new.budgets if b.name == key)
            if prev is not None and prev.max_unavailable != now.max_unavailable:  # review N14: say what it allows
                self._say(f"{key}: a voluntary disruption (a drain, the autoscaler) may now take "
                          f"{now.max_unavailable} pods at once, was {prev.max_unavailable}", self._pool_of(task.key))
            self.budgets = [b for b in self.budgets if b.name != key] + [now]
        elif kind == "Service":
            self.services[key] = self.new.services[key]
        else:
            self._runs(task.key, obj)

    def _runs(self, key: tuple, obj: dict) -> None:
        """What an applied object starts: the re-layout Job's script, a DaemonSet's pods."""
        if key[0] == "Job" and self.new.relayout is not None and key == self.new.relayout.key:
            self.job = [self._relayout(self.new.relayout), self.now, key]
        elif key[0] == "DaemonSet":
            self._daemonset(key, obj)

    def _daemonset(self, key: tuple, ds: dict) -> None:
        """A DaemonSet's pods on the nodes its nodeSelector picks: refused by Pod Security admission (the
        sync waits on its health), or running with commands that fail (podsecurity.py); a node-tuning
        pod's script then labels each node kiln.io/gpu-tuning=failed with the reason."""
        self.refused_pods.pop(key, None)
        refused, failed = podsecurity.daemonset(ds, self.new.objects)
        labels = ds["metadata"].get("labels") or {}
        pool = labels.get("kiln.io/pool")
        if refused:
            self.refused_pods[key] = f"DaemonSet {key[1]}/{key[2]}: {refused}"
            self._say(self.refused_pods[key], pool)
            return
        if failed and labels.get("app.kubernetes.io/component") == "gpu-tuning":
            select = (ds["spec"]["template"]["spec"].get("nodeSelector") or {}).items()
            nodes = [n.name for n in self.nodes.values() if all(n.labels.get(k) == v for k, v in select)]
            self.tuning_failed[pool or key[2]] = failed
            for n in nodes:
                self._say(f"node {n}: its clocks and power are NOT set, kiln.io/gpu-tuning=failed ({failed})", pool)

    # --- the run --------------------------------------------------------------------------------------
    def _next_event(self, job: bool = True) -> float | None:
        times = [p.ready_at for p in self.pods if p.node is not None and not p.ready and p.ready_at is not None]
        times += [n.mig.busy_until for n in self.nodes.values() if n.mig.busy_until is not None]
        if job and self.job is not None and self.job[0] is not None:
            times.append(self.job[1])
        times += [d.last_progress + d.spec.progress_deadline_s for d in self.deploys.values()
                  if not d.timed_out and self._health(("Deployment", d.spec.namespace, d.spec.name)) == "Progressing"]
        later = [t for t in times if t > self.now]
        return min(later) if later else None

    def _advance(self) -> bool:
        t = self._next_event()
        if t is None or t > self.d["horizon_s"]:
            return False
        self.now = t
        self._settle()
        for d in self.deploys.values():  # deployment_util.go DeploymentTimedOut
            if not d.timed_out and self._health(("Deployment", d.spec.namespace, d.spec.name)) == "Progressing" \
                    and self.now >= d.last_progress + d.spec.progress_deadline_s:
                d.timed_out = True
                self._say(f"{d.spec.name}: ProgressDeadlineExceeded after {d.spec.progress_deadline_s}s without "
                          f"progress; Argo CD marks it Degraded", d.spec.pool)
        if self.job is not None and self.job[0] is not None and self.job[1] <= self.now:
            self._run_job()
        return True

    def _run_job(self) -> None:
        gen = self.job[0]
        try:
            self.job[1] = self.now + next(gen)
        except StopIteration:
            self.job[0] = None
            self._say("re-layout Job completed")
        except Stuck as e:
            self.job[0], self.job_failed = None, str(e)
            self._say(str(e))
        self._settle()

    def refused(self) -> str | None:
        """An update the API server refuses (kubernetes pkg/apis/apps/validation ValidateDeploymentSpecUpdate:
        spec.selector is immutable; pkg/apis/batch/validation ValidateJobSpecUpdate: spec.template is)."""
        for key in sorted(set(self.base.objects) & set(self.new.objects)):
            kind, b, a = key[0], self.base.objects[key], self.new.objects[key]
            if kind == "Deployment" and (b.get("spec") or {}).get("selector") != (a.get("spec") or {}).get("selector"):
                return (f"the API server refuses the update of Deployment {key[1]}/{key[2]}: spec.selector is immutable; "
                        "Argo CD's sync fails on every retry")
            if kind == "Job" and (b.get("spec") or {}).get("template") != (a.get("spec") or {}).get("template"):
                return (f"the API server refuses the update of Job {key[1]}/{key[2]}: spec.template is immutable; "
                        "Argo CD's sync fails on every retry")
        return None

    def webhook_refusals(self) -> set:
        """DynamoGraphDeployments whose update Dynamo's webhook refuses: a changed set of component
        names (catalog k8s_controllers.json dynamo_webhook `component-set`); Kiln plans a recreate (K855)."""
        out = set()
        for key in set(self.base.groups) & set(self.new.groups):
            names = [{c["name"] for c in rev.objects[key]["spec"].get("components") or []}
                     for rev in (self.base, self.new)]
            if names[0] != names[1]:
                out.add(key)
        return out

    def run(self) -> Result:
        webhook = sorted(self.webhook_refusals())
        refused = self.refused() or (
            f"Dynamo's webhook refuses the update of DynamoGraphDeployment {webhook[0][1]}/{webhook[0][2]} (a changed "
            "set of components: 'component topology is immutable'); Argo CD's sync fails on every retry until "
            "it is deleted by hand (K855)" if webhook else None)
        if refused is not None:
            self._say(refused)
            return Result(self.steps, False, refused, 0.0, self.before, {}, self.ready_by_model(), self._low(),
                          pool_before=self.pool_before, pool_low=self._pool_low(), pool_end=self.ready_by_pool(),
                          stuck_family="immutable" if self.refused() else "webhook")
        self.strategy = self.new.strategy
        if self.new.strategy != self.base.strategy:
            self._say(f"the GPU Operator's MIG strategy is {self.new.strategy} from now on (helm upgrade); "
                      "the device plugin re-advertises every MIG node")
            for pool in sorted(p for p, lay in self.new.pools.items() if lay.layout != "all-disabled"):
                self._event(("node-relayout", pool))
        self._settle()
        stuck, stuck_on = None, None
        for wave, tasks in argocd.plan(self.live, self.new.objects, self.tracked, self.new.app):
            self._say(f"Argo CD sync wave {wave}")
            for t in tasks:
                self._apply(t)
                if self.job is not None and self.job[2] == t.key and self.job[0] is not None:
                    self._run_job()
            self._settle()
            while True:
                health = {t.key: self._health(t.key) for t in tasks if not t.prune}
                bad = [k for k, h in health.items() if h == "Degraded"]
                if bad:
                    stuck, stuck_on = self._cause(bad[0]), bad[0]
                    break
                if all(h == "Healthy" for h in health.values()):
                    break
                if not self._advance():
                    waiting = [k for k, h in health.items() if h != "Healthy"]
                    stuck = self._cause(waiting[0]) if waiting else "nothing left to happen"
                    stuck_on = waiting[0] if waiting else None
                    break
            if stuck:
                break
        if stuck is None:  # rollouts the sync did not wait for (none in a Kiln tree) still settle
            while self._advance():
                pass
        desired = Counter()
        for w in self.new.workloads.values():
            desired[w.model] += w.replicas
        low = self._low()
        for step, w in self.gaps:  # the gap's capacity floor, as the whole simulation found it
            lowest, since, span = low.get(w.model, (0, 0.0, 0.0))
            why = "; Grove rolls a PodClique with no surge worker, whatever the pool's room" if w.grove else \
                "" if dyn.resolve_params(w.max_surge, w.max_unavailable, w.replicas)[0] else \
                ("; maxSurge 0: the pool had no free device for a surge worker when its surge was chosen "
                 "(Kiln surges where a pool has room, and kiln.lock keeps the choice while the room holds it)")
            step.text += (f"{why}; {w.model}'s fewest ready pods during the change: {lowest} of "
                          f"{self.before.get(w.model, 0)} (from +{since:.0f} s for {span:.0f} s)")
        return Result(self.steps, stuck is None, stuck, self.now, self.before, dict(desired), self.ready_by_model(),
                      low, stuck_on,
                      {w.name: (w.replicas, w.max_surge, w.max_unavailable) for w in self.new.workloads.values()},
                      self._pool_models(), self.events, self.pool_before, self._pool_low(),
                      self.ready_by_pool(), self._stuck_pool(stuck_on),
                      {w.name: w.model for w in [*self.base.workloads.values(), *self.new.workloads.values()]},
                      (self.base.strategy, self.new.strategy) if self.base.strategy != self.new.strategy else (),
                      _moved(self.base.services, self.new.services), dict(self.tuning_failed),
                      self._family(stuck_on) if stuck else "", self._floors())

    def _floors(self) -> dict:
        """The floor each model's budgets declare on each pool, in both revisions, the lesser (a
        scale-down's is the new one's, a scale-up's the base's), counted in the base's pods: the
        revisions compare in devices (a change of pod shape, tp 4 -> 8, halves the pods, not the floor)."""
        was, now = (disruption.declared_floor(list(r.workloads.values()), r.budgets) for r in (self.base, self.new))
        out = {}
        for p, fs in sorted(was.items()):
            for m, f in sorted(fs.items()):
                mine = [w for w in self.base.workloads.values() if (w.pool, w.model) == (p, m)]
                pods, devs = sum(w.replicas for w in mine), sum(w.replicas * disruption.devices(w) for w in mine)
                if m in now.get(p, {}) and devs:
                    out.setdefault(p, {})[m] = min(f, now[p][m]) * pods // devs
        return out

    def _stuck_pool(self, key: tuple | None) -> str | None:
        """The node pool a stuck object runs in: a Deployment's, a DynamoGraphDeployment's workers' (the
        first), else its kiln.io/pool label; None for the cluster's (the re-layout Job)."""
        if key is None:
            return None
        kind, ns, name = key
        keys = self.new.groups.get(key, []) if kind == "DynamoGraphDeployment" else [f"{ns}/{name}"]
        for k in keys:
            w = self.new.workloads.get(k) or self.base.workloads.get(k)
            if w is not None:
                return w.pool
        return self._pool_of(key)

    def _pool_models(self) -> dict:
        out: dict = {}
        for w in [*self.base.workloads.values(), *self.new.workloads.values()]:
            out.setdefault(w.pool, set()).add(w.model)
        return {p: sorted(ms) for p, ms in sorted(out.items())}

    def _cause(self, key: tuple) -> str:
        kind, ns, name = key
        if kind == "Job":
            return self.job_failed or "the re-layout Job did not finish"
        if kind == "DaemonSet" and key in self.refused_pods:
            return self.refused_pods[key]
        if kind == "DynamoGraphDeployment":  # the first worker whose rollout is not done
            waiting = [k for k in self.new.groups.get(key, []) if k in self.deploys
                       and self._health(("Deployment",) + tuple(k.split("/", 1))) != "Healthy"]
            if waiting:
                return self._cause(("Deployment",) + tuple(waiting[0].split("/", 1)))
        if kind == "Deployment" and f"{ns}/{name}" in self.deploys:
            d = self.deploys[f"{ns}/{name}"]
            pending = [p for p in self.pods if p.workload == d.spec.key and p.node is None]
            why = f"; its new pods stay Pending: {self.pending_reasons(pending[0])}" if pending else ""
            new, olds = d.rss[-1], d.rss[:-1]
            if d.spec.grove:
                return (f"Dynamo worker {name} (a Grove PodClique) never completes: new-hash pods "
                        f"{new.available}/{new.replicas} ready, old {sum(r.replicas for r in olds)} pod(s) left, and "
                        f"Grove (processPendingUpdates) may neither delete nor create one{why}")
            if d.spec.dynamo:
                return (f"Dynamo worker {name} never completes: new generation {new.available}/{new.replicas} "
                        f"available, old {sum(r.replicas for r in olds)} pod(s) left, and Dynamo's operator "
                        f"(buildRollingUpdateContext) may neither add nor remove one{why}")
            return (f"Deployment {name} never completes: new ReplicaSet {new.available}/{new.replicas} available, "
                    f"old {sum(r.replicas for r in olds)} pod(s) left, and rolling.go may neither add nor remove one"
                    f"{why}")
        return f"{kind} {name} is not healthy"

    def _family(self, key: tuple | None) -> str:
        """Result.stuck_family of the object the sync waits on, from the state it stuck in."""
        if key is None:
            return ""
        kind, ns, name = key
        if kind == "Job":
            return "budget" if self.job_blocked else "job"
        if kind == "DaemonSet" and key in self.refused_pods:
            return "pod-security"
        if kind == "DynamoGraphDeployment":
            waiting = [k for k in self.new.groups.get(key, []) if k in self.deploys
                       and self._health(("Deployment",) + tuple(k.split("/", 1))) != "Healthy"]
            return self._family(("Deployment",) + tuple(waiting[0].split("/", 1))) if waiting else ""
        d = self.deploys.get(f"{ns}/{name}") if kind == "Deployment" else None
        pending = [p for p in self.pods if d is not None and p.workload == d.spec.key and p.node is None]
        if not pending:
            return ""
        w = self._tmpl(pending[0])
        _, reasons = scheduler.place([self._node_view(n) for n in self.nodes.values()], w.node_selector,
                                     w.tolerations, w.requests)
        if sum(n for r, n in reasons.items() if "node affinity/selector" in r) == len(self.nodes):
            return "selector"
        if d.spec.dynamo or d.spec.grove:
            return "worker-room"
        was = self.base.workloads.get(d.spec.key)
        olds = sum(r.replicas for r in d.rss[:-1])
        # the pods' shape changed and the controller may remove no old pod: the pace frees no node
        return "reshape" if was is not None and was.requests != d.spec.requests and olds >= was.replicas else "room"

    def _low(self) -> dict:
        return _lowest([(0.0, self.before)] + [(s.t, s.ready) for s in self.steps], self.now)

    def _pool_low(self) -> dict:
        pools = set(self.pool_before) | {p for s in self.steps for p in s.by_pool} | set(self._pool_models())
        return {pool: _lowest([(0.0, self.pool_before.get(pool, {}))] + [(s.t, s.by_pool.get(pool, {}))
                                                                         for s in self.steps], self.now,
                              self._pool_models().get(pool, []))
                for pool in sorted(pools)}


def _doomed(mine: list, replicas: int) -> list:
    """The pods a ReplicaSet of `replicas` deletes of its pods `mine`: kubernetes controller_utils.go
    ActivePods Less (unassigned, then not ready, then the newest go first). Grove's PodClique deletes
    the oldest Ready old-hash pod (grove.py), one generation's pods all alike, so the same count."""
    return sorted(mine, key=lambda p: (p.node is not None, p.ready, -p.created))[:max(len(mine) - replicas, 0)]


def _moved(before: dict, after: dict) -> list:
    """(name, old namespace, new namespace) of the Services (keyed namespace/name) in another namespace."""
    was = {k.split("/", 1)[1]: k.split("/", 1)[0] for k in before}
    now = {k.split("/", 1)[1]: k.split("/", 1)[0] for k in after}
    return sorted((n, was[n], now[n]) for n in was.keys() & now.keys() if was[n] != now[n])


def _lowest(samples: list, end: float, models: list = ()) -> dict:
    """model -> (fewest ready pods over the samples (t, model -> ready), from when, for how long in all)."""
    out = {}
    for model in sorted({m for _, r in samples for m in r} | set(models)):
        lowest, since, span = None, 0.0, 0.0
        for i, (t, ready) in enumerate(samples):
            n = ready.get(model, 0)
            until = samples[i + 1][0] if i + 1 < len(samples) else end
            if lowest is None or n < lowest:
                lowest, since, span = n, t, until - t
            elif n == lowest and until > t:
                span += until - t
        out[model] = (lowest, since, span)
    return out


def simulate(base: Revision, new: Revision, pools: list[PoolNodes], load_s: dict[str, float] | None = None) -> Result:
    return Simulation(base, new, pools, load_s).run()
