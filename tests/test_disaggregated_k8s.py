"""Disaggregated serving on Kubernetes (runtime dynamo): the DynamoGraphDeployment has the roles as
components of type prefill and decode running `dynamo.trtllm --disaggregation-mode <role>` on their
own options, the frontend routes by KV in the workers' block size, and the planner is a component
of type planner when asked (as Dynamo's own v1beta1 disagg_planner.yaml lays it out)."""

from __future__ import annotations

import json
from pathlib import Path

from ruamel.yaml import YAML

from compiler.catalog import disaggregated as facts
from compiler.catalog import k8s_controllers

from .k8s_tree import graph_of, kustomize, render
from .test_k8s import needs_kubectl

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "disaggregated" / "kiln.yaml"
PLANNER_IMAGE = "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.3.1@sha256:" + "1" * 64
RUNTIME_IMAGE = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.3.1@sha256:" + "2" * 64


def _spec() -> str:
    text = EXAMPLE.read_text()
    text = text.replace('tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.3.0rc19"')
    text = text.replace("  h200:\n    gpu", "  h200:\n    deploy: kubernetes\n    node_pool: {nodes: 2}\n    gpu")
    text = text.replace("      runtime: trtllm-serve\n", "")
    text = text.replace("        router: {kv_aware: true}",
                        f"        router: {{kv_aware: true}}\n        planner: {{image: {PLANNER_IMAGE}, max_gpus: 16}}")
    text = text.replace("ucx: {tls: [cuda_copy, cuda_ipc, tcp]}", "ucx: {tls: [cuda_copy, cuda_ipc, rc], "
                                                                   "net_devices: [mlx5_0:1]}")
    return text + ("kubernetes:\n  runtime: dynamo\n  dynamo: {version: \"1.3.0\"}\n"
                   f"image:\n  repository: registry.example.com/x/disagg\n  base: {RUNTIME_IMAGE}\n")


def test_the_dgd_has_prefill_decode_and_planner_components(tmp_path: Path) -> None:
    graph = graph_of(EXAMPLE, tmp_path / "work", _spec())
    assert "disagg-options/chat" in graph.actions["k8s-dgd/chat"].deps
    tree = render(graph, tmp_path / "work")
    docs = list(YAML(typ="safe", pure=True).load_all((tree / "workloads" / "chat.yaml").read_text()))
    [dgd] = [d for d in docs if d["kind"] == "DynamoGraphDeployment"]
    configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    components = {c["name"]: c for c in dgd["spec"]["components"]}
    types = sorted(c["type"] for c in components.values())
    assert types == ["decode", "frontend", "planner", "prefill"]
    assert set(types) <= set(facts.fact("dynamo")["component_types_v1beta1"])

    frontend = components["frontend"]["podTemplate"]["spec"]["containers"][0]
    assert frontend["args"] == ["-m", "dynamo.frontend", "--router-mode", "kv", "--kv-cache-block-size", "32"]

    planner = components["planner"]["podTemplate"]["spec"]["containers"][0]
    assert planner["image"] == PLANNER_IMAGE and planner["args"][:3] == ["-m", "dynamo.planner", "--config"]
    config = json.loads(planner["args"][3])
    assert set(config) <= set(facts.fact("dynamo_planner")["config_keys"]) and config["mode"] == "disagg"

    options = {}
    for c in components.values():
        if c["type"] not in ("prefill", "decode"):
            continue
        main = c["podTemplate"]["spec"]["containers"][0]
        # a KV-routed worker publishes its KV-cache events, or the frontend's router learns nothing (N4)
        assert main["args"][-3:] == ["--disaggregation-mode", c["type"], "--publish-events-and-metrics"]
        assert {e["name"]: e["value"] for e in main["env"]} == {"UCX_TLS": "cuda_copy,cuda_ipc,rc",
                                                               "UCX_NET_DEVICES": "mlx5_0:1"}
        cm = c["podTemplate"]["spec"]["volumes"][0]["configMap"]["name"]
        options[c["type"]] = YAML(typ="safe", pure=True).load(configmaps[cm]["llm-api-options.yaml"])
    # each role runs its own options: its parallelism, one transfer setting for both
    assert (options["prefill"]["tensor_parallel_size"], options["decode"]["tensor_parallel_size"]) == (1, 4)
    assert options["prefill"]["cache_transceiver_config"] == options["decode"]["cache_transceiver_config"]
    assert components["worker-h200-prefill"]["replicas"] == 4 and components["worker-h200-decode"]["replicas"] == 2


# --- the plan per role: what a change to one role, the router or both rolls on the DGD -------------
def _plan(tmp_path: Path, old: str, new: str) -> dict[str, str]:
    """component -> detail of what going from the spec to the spec with `old` replaced by `new` does."""
    from compiler.gitops.semplan import host_disruptions

    text = _spec()
    assert old in text
    base = graph_of(EXAMPLE, tmp_path / "work", text)
    head = graph_of(EXAMPLE, tmp_path / "work", text.replace(old, new, 1))
    found = host_disruptions(base, head)
    assert {d.kind for d in found} <= {"workload-roll", "container-restart"} and {d.host for d in found} == {"h200"}
    rolls = {d.detail.split(":", 1)[0]: d.detail for d in found if d.kind == "workload-roll"}
    assert len(rolls) == len([d for d in found if d.kind == "workload-roll"])  # one pool: one line per component
    return rolls


def test_a_prefill_only_change_is_the_prefill_components_and_decode_rolls_by_the_worker_hash(tmp_path: Path) -> None:
    rolls = _plan(tmp_path, "limits: {max_batch_size: 4}", "limits: {max_batch_size: 8}")
    assert set(rolls) == {"chat/worker-h200-prefill", "chat/worker-h200-decode"}  # no frontend, no planner
    assert "(options sha256:" in rolls["chat/worker-h200-prefill"]  # its own options ConfigMap changed
    decode = rolls["chat/worker-h200-decode"]
    assert "worker hash" in decode and "its own pod template unchanged" in decode and "options" not in decode
    # one DGD cannot order the roles: the plan says so where prefill rolls
    assert "no order" in rolls["chat/worker-h200-prefill"]
    assert k8s_controllers.dynamo_rollout()["worker_hash_covers_all_workers"] is True


def test_a_decode_only_change_is_the_decode_components(tmp_path: Path) -> None:
    rolls = _plan(tmp_path, "runtime: {kv_cache_memory_fraction: 0.9}", "runtime: {kv_cache_memory_fraction: 0.85}")
    assert "(options sha256:" in rolls["chat/worker-h200-decode"]
    prefill = rolls["chat/worker-h200-prefill"]
    assert "its own pod template unchanged" in prefill and "rolled with chat/worker-h200-decode" in prefill


def test_a_router_change_replaces_the_frontend_and_rolls_the_workers(tmp_path: Path) -> None:
    """round robin instead of KV-aware: the frontend's arguments change, and so do the workers',
    which stop publishing KV-cache events (their options lose the event buffer): N4."""
    rolls = _plan(tmp_path, "router: {kv_aware: true}", "router: {kv_aware: false}")
    assert set(rolls) == {"chat/frontend", "chat/worker-h200-prefill", "chat/worker-h200-decode"}
    assert rolls["chat/frontend"].startswith("chat/frontend: router/frontend replaced in place (router arguments")
    assert "--router-mode kv" in rolls["chat/frontend"] and "workers keep running" not in rolls["chat/frontend"]


def test_a_transport_change_rolls_both_roles_and_says_they_are_unordered(tmp_path: Path) -> None:
    rolls = _plan(tmp_path, "net_devices: [mlx5_0:1]", "net_devices: [mlx5_1:1]")
    assert set(rolls) == {"chat/worker-h200-prefill", "chat/worker-h200-decode"}
    assert all("environment" in detail for detail in rolls.values())
    assert "no order" in rolls["chat/worker-h200-prefill"] and "no order" not in rolls["chat/worker-h200-decode"]


def test_a_dgd_planned_by_an_earlier_kiln_is_not_a_change_of_options(tmp_path: Path) -> None:
    """Workers planned before they carried their role's options digest: the same options are no roll."""
    from compiler.targets.kubernetes.k8s_dgd import disruptions

    new = graph_of(EXAMPLE, tmp_path / "work", _spec()).actions["k8s-dgd/chat"].params
    assert {w.role for w in new.workers if w.options} == {"prefill", "decode"}
    old = new.model_copy(update={"workers": [w.model_copy(update={"options": None}) for w in new.workers]})
    assert "options" not in old.workers[0].to_json()  # left out when unset: the key of a DGD without roles
    assert disruptions(old, new, frozenset()) == []  # no image it runs rebuilt
    changed = new.model_copy(update={"options_digest": "sha256:" + "0" * 64})
    assert {d.detail.split(":", 1)[0] for d in disruptions(old, changed, frozenset())} == {
        "chat/worker-h200-prefill", "chat/worker-h200-decode"}


@needs_kubectl
def test_the_disaggregated_tree_validates_and_builds(tmp_path: Path) -> None:
    """The tree of a disaggregated model passes what every Kubernetes tree passes: the DGD has the
    v1beta1 shape, every core object and component pod template validates against the Kubernetes
    schemas, and `kubectl kustomize` builds it."""
    from tests.test_k8s import _objects, _pod_template, _shape, _validate_core

    tree = render(graph_of(EXAMPLE, tmp_path / "work", _spec()), tmp_path / "work")
    objects = _objects(tree)
    [dgd] = [o for o in objects if o["kind"] == "DynamoGraphDeployment"]
    errors = [e.message for e in _shape().iter_errors(dgd)]
    assert not errors, errors
    for c in dgd["spec"]["components"]:
        _validate_core(_pod_template(c["podTemplate"]))
    core = [o for o in objects if o["apiVersion"] in ("v1", "apps/v1", "policy/v1", "batch/v1",
                                                     "rbac.authorization.k8s.io/v1")]
    assert any(o["kind"] == "ConfigMap" for o in core)
    for o in core:
        _validate_core(o)
    assert [o["metadata"]["name"] for o in kustomize(tree) if o["kind"] == "DynamoGraphDeployment"] == ["chat"]


def test_the_planners_replicas_are_not_self_healed(tmp_path: Path) -> None:
    """Review N11: Dynamo's planner writes the prefill and decode components' replicas; Argo CD's
    self-heal reverted each decision to the tree's. The Application ignores exactly those fields
    (checked with jq on the tree's DGD where jq is installed)."""
    import shutil
    import subprocess

    argo = 'kubernetes:\n  runtime: dynamo\n  argocd: {repo_url: "https://git.example.com/x.git", path: x}\n'
    text = _spec().replace("kubernetes:\n  runtime: dynamo\n", argo)
    tree = render(graph_of(EXAMPLE, tmp_path / "work", text), tmp_path / "work")
    app = YAML(typ="safe", pure=True).load((tree / "argocd" / "application.yaml").read_text())
    [ignore] = [i for i in app["spec"]["ignoreDifferences"] if i["kind"] != "ConfigMap"]  # ConfigMap: review N9
    assert (ignore["kind"], ignore["name"]) == ("DynamoGraphDeployment", "chat")
    assert app["spec"]["syncPolicy"]["syncOptions"] == ["RespectIgnoreDifferences=true"]
    if shutil.which("jq"):
        docs = list(YAML(typ="safe", pure=True).load_all((tree / "workloads" / "chat.yaml").read_text()))
        [dgd] = [d for d in docs if d["kind"] == "DynamoGraphDeployment"]
        out = subprocess.run(["jq", "-c", ignore["jqPathExpressions"][0]], input=json.dumps(dgd), text=True,
                             capture_output=True, check=True).stdout.split()
        roles = [c for c in dgd["spec"]["components"] if c["type"] in ("prefill", "decode")]
        assert sorted(map(int, out)) == sorted(c["replicas"] for c in roles) and len(out) == 2
    # without a planner no DGD field is ignored
    plain = text.replace(f"\n        planner: {{image: {PLANNER_IMAGE}, max_gpus: 16}}", "")
    tree = render(graph_of(EXAMPLE, tmp_path / "plain", plain), tmp_path / "plain")
    spec = YAML(typ="safe", pure=True).load((tree / "argocd" / "application.yaml").read_text())["spec"]
    assert not [i for i in spec.get("ignoreDifferences", []) if i["kind"] == "DynamoGraphDeployment"]
