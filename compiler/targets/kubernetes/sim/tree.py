"""A revision for the simulation from a Kubernetes tree's documents (the files Kiln writes): the
Deployments, PodDisruptionBudgets and Services, the GPU Operator values (the MIG strategy and the
ConfigMap the MIG manager reads), the desired layouts ConfigMap, the re-layout Job with the script
its ConfigMap holds (its `pool` lines, its retire list, its bounds and what it writes on the live
layouts ConfigMap are what the Job runs), and the Argo CD Application (its ignoreDifferences and
sync options)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from . import argocd
from .disruption import Budget
from .model import PoolLayout, Relayout, Revision, Workload

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SKIP_KINDS = {"Kustomization", "Application", "AnnotationsTransformer"}  # kustomize's and Argo CD's, not synced objects


def _int_or_str(v):
    return v if isinstance(v, int) else str(v)


def read_dir(root: Path) -> tuple[list[dict], dict, dict | None]:
    """(every object of the tree, the GPU Operator's values, the Argo CD Application or None)."""
    objects, values, app = [], {}, None
    for path in sorted(root.rglob("*.yaml")):
        docs = [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_LOADER) if isinstance(d, dict)]
        if path.name == "gpu-operator-values.yaml":
            values = docs[0] if docs else {}
            continue
        app = next((d for d in docs if d.get("kind") == "Application"), app)
        objects += [d for d in docs if "kind" in d and d["kind"] not in SKIP_KINDS and "metadata" in d]
    return objects, values, app


def _script_pools(script: str) -> list[PoolLayout]:
    out = []
    for line in script.splitlines():
        if line.startswith("pool "):
            _, name, selector, layout, nodes, batch = shlex.split(line)
            out.append(PoolLayout(name, dict(kv.split("=", 1) for kv in selector.split(",")), layout, int(nodes), int(batch)))
    return out


def _script_var(script: str, name: str) -> str | None:
    m = re.search(rf"^{name}=(.*)$", script, re.MULTILINE)
    return shlex.split(m.group(1))[0] if m and shlex.split(m.group(1)) else ("" if m else None)


def _bound(script: str, var: str, default: int) -> int:
    m = re.search(rf"\${{{var}:-(\d+)}}", script)
    return int(m.group(1)) if m else default


def worker_hash(spec: dict) -> str:
    """The input of Dynamo's worker hash (ai-dynamo/dynamo deploy/operator/api/v1beta1
    ComputeDGDWorkersSpecHash, workerHashInputForSpec; catalog k8s_controllers.json
    rolling_update.hash_covers): the backend and, per worker component by name, its type and whole
    podTemplate (metadata, annotations included), sharedMemorySize, multinode and the other
    pod-shaping fields, and the DGD-wide env, annotations and labels merged into it; replicas
    and the fields hash_excludes names are not in it. Equal inputs, equal hash."""
    from compiler.catalog import k8s_controllers

    ru = k8s_controllers.dynamo_rollout()
    comps = {c["name"]: c for c in spec.get("components") or [] if c.get("type") in ru["worker_types"]}
    return yaml.safe_dump({"spec": {k: spec.get(k) for k in ru["hash_covers"]["dgd"]},
                           "workers": {n: {k: c.get(k) for k in ru["hash_covers"]["component"]}
                                       for n, c in sorted(comps.items())}}, sort_keys=True)


def dgd_workloads(o: dict) -> list[Workload]:
    """A DynamoGraphDeployment's worker components as the rollouts Dynamo's operator runs: one hash
    covers every worker component (worker_hash), so a change to any worker's pod template, its
    surge/unavailable annotations included, rolls them all; replicas are not in it. Each component
    rolls within its podTemplate's surge/unavailable annotations (default 25%) by the operator's
    own arithmetic (dynamo.py); on the Grove pathway it is a PodClique that Grove rolls 1 at a time
    (grove.py), every worker too: the worker-hash suffix of a Grove DGD puts that hash in each
    worker's pod template (catalog k8s_controllers.json rolling_update.grove_rollout.rolls_source)."""
    from compiler.catalog import k8s_controllers

    ru = k8s_controllers.dynamo_rollout()
    md, comps = o["metadata"], o["spec"].get("components") or []
    workers = [c for c in comps if c.get("type") in ru["worker_types"]]
    template = worker_hash(o["spec"])
    # the pathway the tree declares (Kiln writes nvidia.com/enable-grove either way); a DGD without it,
    # from an earlier Kiln, ran where the platform chart's default put it: no Grove
    grove = str(((md.get("annotations") or {}).get(ru["grove_rollout"]["annotation"]) or "false")).lower() != "false"
    out = []
    for c in workers:
        t = c.get("podTemplate") or {}
        spec, tmd = t.get("spec") or {}, t.get("metadata") or {}
        # GetDGDComponentResourceAnnotations: the DGD's spec.annotations, the pod template's over them
        ann = {**(o["spec"].get("annotations") or {}), **(tmd.get("annotations") or {})}
        limits = {k: int(v) for k, v in ((spec.get("containers") or [{}])[0].get("resources", {}).get("limits") or {}).items()
                  if k.startswith("nvidia.com/")}
        labels = {**(tmd.get("labels") or {}), "nvidia.com/dynamo-component": c["name"]}

        def num(v):
            return int(v) if str(v).isdigit() else str(v)
        out.append(Workload(f"{md['name']}-{c['name']}", md.get("namespace", ""), labels.get("kiln.io/model", md["name"]),
                            labels.get("kiln.io/pool", ""), int(c.get("replicas", 1)), template, labels,
                            spec.get("nodeSelector") or {}, spec.get("tolerations") or [], limits,
                            # on Grove the annotations are not read: its PodClique rolls 1 unavailable, 0 surge
                            *((0, 1) if grove else (num(ann.get(ru["max_surge"], ru["default"])),
                                                    num(ann.get(ru["max_unavailable"], ru["default"])))),
                            10 ** 9, dynamo=True, grove=grove))  # no progress deadline: a stuck rollout waits
    return out


def _writes(script: str) -> dict:
    """The annotations the script puts on the live layouts ConfigMap (`kubectl annotate --local`)."""
    return dict(re.findall(r"kubectl annotate -f - --local -o yaml ([a-z0-9./-]+)=(\S+)", script))


def _layouts(o: dict) -> dict:
    return yaml.load(o["data"]["config.yaml"], Loader=_LOADER)["mig-configs"]


def _bounce(script: str) -> str | None:
    """The layout the script relabels a node through when the node already carries its target."""
    m = re.search(r"nvidia\.com/mig\.config=([a-z0-9-]+)(?: nvidia\.com/mig\.config\.state-)? --overwrite\n\s*wait_state",
                  script)
    return m.group(1) if m else None


def revision(objects: list[dict], values: dict, app: dict | None = None) -> Revision:
    by_key = {argocd.key_of(o): o for o in objects}
    workloads, budgets, services, layouts, relayout, groups = {}, [], {}, {}, None, {}
    scripts = {}
    for o in objects:
        md, kind = o["metadata"], o["kind"]
        ns = md.get("namespace", "")
        if kind == "Deployment":
            spec, tmpl = o["spec"], o["spec"]["template"]
            c = tmpl["spec"]["containers"][0]
            limits = {k: int(v) for k, v in (c.get("resources", {}).get("limits") or {}).items() if k.startswith("nvidia.com/")}
            ru = (spec.get("strategy") or {}).get("rollingUpdate") or {}
            labels = tmpl["metadata"].get("labels") or {}
            w = Workload(md["name"], ns, labels.get("kiln.io/model", md["name"]), labels.get("kiln.io/pool", ""),
                         spec.get("replicas", 1), yaml.safe_dump(tmpl, sort_keys=True), labels,
                         tmpl["spec"].get("nodeSelector") or {}, tmpl["spec"].get("tolerations") or [], limits,
                         _int_or_str(ru.get("maxSurge", "25%")), _int_or_str(ru.get("maxUnavailable", "25%")),
                         spec.get("progressDeadlineSeconds", 600))
            workloads[w.key] = w
        elif kind == "DynamoGraphDeployment":
            ws = dgd_workloads(o)
            workloads.update({w.key: w for w in ws})
            groups[argocd.key_of(o)] = [w.key for w in ws]
            model = (md.get("labels") or {}).get("kiln.io/model", md["name"])
            services[f"{ns}/{md['name']}-frontend"] = (model, {"kiln.io/model": model})
        elif kind == "PodDisruptionBudget":
            budgets.append(Budget(f"{ns}/{md['name']}", o["spec"]["selector"].get("matchLabels") or {},
                                  int(o["spec"].get("maxUnavailable", 0))))
        elif kind == "Service":
            sel = o["spec"].get("selector") or {}
            services[f"{ns}/{md['name']}"] = (sel.get("kiln.io/model", md["name"]), sel)
        elif kind == "ConfigMap" and "label-nodes.sh" in (o.get("data") or {}):
            scripts[md["name"]] = o["data"]["label-nodes.sh"]
    for o in objects:
        if o["kind"] != "Job":
            continue
        vols = o["spec"]["template"]["spec"].get("volumes") or []
        name = next((v["configMap"]["name"] for v in vols if "configMap" in v and v["configMap"]["name"] in scripts),
                    None)
        if name is None:
            continue
        script = scripts[name]
        sa = o["spec"]["template"]["spec"].get("serviceAccountName")
        kiln_ns = _script_var(script, "kiln_ns") or ""
        keep = _script_var(script, "workloads")
        rules = [r for x in objects if x["kind"] == "Role" and x["metadata"]["name"] == sa
                 and x["metadata"].get("namespace") == kiln_ns for r in x.get("rules", [])]
        relayout = Relayout(key=argocd.key_of(o), pools=_script_pools(script),
                            keep=[f"{kiln_ns}/{w}" for w in keep.split()] if keep else None, namespace=kiln_ns,
                            rules=rules, evict_s=_bound(script, "KILN_EVICT_S", 600),
                            mig_s=_bound(script, "KILN_MIG_S", 900),
                            config_sync_s=_bound(script, "KILN_CONFIG_SYNC_S", 120),
                            bounce=_bounce(script), script=name)
    # the ConfigMap the MIG manager reads (helm values migManager.config.name) and the desired layouts:
    # the script's `desired`, or where no script reads one (a tree from Kiln before 14199f6), that one
    live_name = ((values.get("migManager") or {}).get("config") or {}).get("name")
    script = next(iter(scripts.values()), None)
    desired = (_script_var(script, "desired") if script else None) or live_name
    cms = [o for o in objects if o["kind"] == "ConfigMap" and "config.yaml" in (o.get("data") or {})]
    found = next((o for o in cms if o["metadata"]["name"] == desired), None)
    if found is not None:
        layouts = _layouts(found)
    ns = (found or {}).get("metadata", {}).get("namespace") or (_script_var(script, "ns") if script else "") or ""
    if relayout is not None:
        relayout.writes = _writes(script_of_job) if (script_of_job := scripts.get(relayout.script)) else {}
    pools = {p.name: p for p in relayout.pools} if relayout is not None else {}
    strategy = ((values.get("mig") or {}).get("strategy")) or "mixed"
    return Revision(by_key, workloads, budgets, services, strategy, layouts, pools, relayout, groups, app,
                    ("ConfigMap", ns, live_name) if live_name else None)


def read_tree(root: Path) -> Revision:
    return revision(*read_dir(root))
