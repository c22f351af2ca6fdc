"""The Kubernetes target (issue 14): the example fleet compiles to a golden Kustomize tree that
`kubectl kustomize` builds; every object validates against the real schemas (core objects with
kubernetes-validate at the pinned Kubernetes version, the ClusterPolicy patch against the GPU
Operator's CRD, the DynamoGraphDeployment against the v1beta1 shape with each podTemplate as a
core PodTemplate, compared with the DGD Dynamo itself ships), the mig-parted config parses with
mig-parted's rules, and each of those checks rejects a broken object. A one-field change (a MIG
profile) changes exactly the layout, the pool's label and the affected workload, and the plan
says what it does to the pool.

`pytest tests/test_k8s.py --update-expectations` regenerates tests/golden/k8s/.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from compiler.targets.disruption import render_disruptions
from compiler.gitops.semplan import host_disruptions
from compiler.targets.kubernetes import meta, nodelayer
from tests.k8s_tree import graph_of, kustomize, render, tree_files

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "k8s-two-pools" / "kiln.yaml"
GOLDEN = ROOT / "tests" / "golden" / "k8s"
DATA = ROOT / "tests" / "data" / "k8s"
YAML_ = YAML(typ="safe", pure=True)

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None,
                                   reason="kubectl is not installed (kustomize is built into it); "
                                          "the other checks of the tree still run")


def _dynamo_text() -> str:
    """The example on runtime dynamo: Dynamo 1.6.1, its TensorRT-LLM, its runtime image as the base."""
    text = EXAMPLE.read_text(encoding="utf-8")
    for old, new in (('tensorrt_llm: "1.2.1"', 'tensorrt_llm: "1.3.0rc29"'),
                     ("tritonserver:26.04-trtllm-python-py3", "tritonserver:26.09-trtllm-python-py3"),
                     ("  runtime: deployment\n", '  runtime: dynamo\n  dynamo: {version: "1.6.1"}\n'),
                     ("image: {repository: registry.example.com/inference/fleet}",
                      "image:\n  repository: registry.example.com/inference/fleet\n"
                      "  base: nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1@sha256:" + "1" * 64)):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


VARIANTS = {"k8s-two-pools": None, "k8s-two-pools-dynamo": _dynamo_text}


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, text in VARIANTS.items():
        work = tmp_path_factory.mktemp(name)
        out[name] = render(graph_of(EXAMPLE, work, text() if text else None), work)
    return out


def _objects(root: Path) -> list[dict]:
    """Every object of the tree's YAML files (what kustomize reads and what is applied by hand)."""
    out = []
    for p in sorted(root.rglob("*.yaml")):
        if p.name in ("kustomization.yaml", "release-stamp.yaml", "clusterpolicy-patch.yaml", "gpu-operator-values.yaml",
                      "argo-cd-values.yaml", "argocd-operator-health.yaml"):  # values and patches, not objects
            continue
        out += [d for d in YAML_.load_all(p.read_text(encoding="utf-8")) if d]
    return out


# --- golden tree, determinism, kustomize ---------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden_tree(variant: str, trees, update_expectations: bool) -> None:
    got = tree_files(trees[variant])
    golden = GOLDEN / variant
    if update_expectations:
        shutil.rmtree(golden, ignore_errors=True)
        for rel, data in got.items():
            (golden / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden / rel).write_bytes(data)
        return
    assert sorted(got) == sorted(tree_files(golden)), "files differ; run with --update-expectations and review"
    for rel, data in got.items():
        assert data == (golden / rel).read_bytes(), f"{rel} differs from the golden tree"


def test_rendering_is_deterministic(tmp_path: Path, trees) -> None:
    again = render(graph_of(EXAMPLE, tmp_path), tmp_path)
    assert tree_files(again) == tree_files(trees["k8s-two-pools"])


@needs_kubectl
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_kubectl_kustomize_builds_the_tree(variant: str, trees) -> None:
    built = kustomize(trees[variant])
    kinds = sorted({o["kind"] for o in built})
    if variant == "k8s-two-pools":
        assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment", "Job", "Namespace",
                         "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]
        assert len([o for o in built if o["kind"] == "Deployment"]) == 4
    else:
        # a PodDisruptionBudget per worker too (review N16: a drain could evict every worker of a model)
        assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "DynamoGraphDeployment", "Job",
                         "Namespace", "PodDisruptionBudget",
                         "Role", "RoleBinding", "ServiceAccount"]
        budgets = {o["metadata"]["name"]: o["spec"]["selector"]["matchLabels"] for o in built
                   if o["kind"] == "PodDisruptionBudget"}
        workers = [c for o in built if o["kind"] == "DynamoGraphDeployment" for c in o["spec"]["components"]
                   if c["type"] == "worker"]
        assert len(budgets) == len(workers) == 4  # each budget selects its worker's pods, and only those
        for c in workers:
            labels = c["podTemplate"]["metadata"]["labels"]
            assert sum(all(labels.get(k) == v for k, v in sel.items()) for sel in budgets.values()) == 1
    spec_digest = YAML_.load((trees[variant] / "release-stamp.yaml").read_text())["annotations"][
        meta.SPEC_DIGEST_ANNOTATION]
    for o in built:  # the release stamp: every object, never a pod template
        assert o["metadata"]["annotations"][meta.SPEC_DIGEST_ANNOTATION] == spec_digest, o["metadata"]["name"]
        assert meta.SPEC_DIGEST_ANNOTATION not in json.dumps(o.get("spec", {})), o["metadata"]["name"]


@needs_kubectl
def test_kustomize_refuses_a_broken_tree(tmp_path: Path, trees) -> None:
    broken = tmp_path / "tree"
    shutil.copytree(trees["k8s-two-pools"], broken)
    (broken / "workloads" / "intent-h100-pool.yaml").unlink()
    proc = subprocess.run(["kubectl", "kustomize", str(broken)], capture_output=True, text=True)
    assert proc.returncode != 0 and "intent-h100-pool.yaml" in proc.stderr


def test_tree_content(trees) -> None:
    root = trees["k8s-two-pools"]
    deployments = {o["metadata"]["name"]: o for o in _objects(root) if o["kind"] == "Deployment"}
    chat = deployments["chat-h100-pool"]["spec"]
    assert chat["replicas"] == 32  # 8 GPUs x 1 instance x 4 nodes
    pod = chat["template"]["spec"]
    c = pod["containers"][0]
    # not BestEffort: CPU and memory for the checkpoint the server loads (8B fp8: 8 GiB + runtime + shm)
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "19Gi", "nvidia.com/mig-3g.40gb": "1"},
                              "limits": {"cpu": "4", "memory": "28Gi", "nvidia.com/mig-3g.40gb": "1"}}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["securityContext"]["runAsNonRoot"]
    assert pod["terminationGracePeriodSeconds"] >= 60 and c["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    # the progress deadline covers a pull and the startup window: Argo CD never sees a slow load as Degraded
    assert chat["progressDeadlineSeconds"] > c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"]
    # the immutable selector names the workload only: no spec name, no Argo CD tracking label
    assert chat["selector"] == {"matchLabels": {"kiln.io/workload": "chat-h100-pool"}}
    for o in _objects(root):
        assert "app.kubernetes.io/instance" not in json.dumps(o), o["metadata"]["name"]
    assert c["image"].startswith("registry.example.com/inference/fleet@sha256:")  # by digest
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] == 1800
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
    assert pod["nodeSelector"] == {"kiln.io/pool": "h100-pool", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    big = deployments["big-b200-pool"]["spec"]
    big_c = big["template"]["spec"]["containers"][0]
    assert big["replicas"] == 2 and big_c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in big["template"]["spec"]["volumes"]
    artifacts = json.loads(deployments["big-b200-pool"]["metadata"]["annotations"][meta.ARTIFACTS_ANNOTATION])
    assert list(artifacts) == ["image/b200-pool/big", "weights-image/big"] and \
        big["template"]["spec"]["containers"][0]["image"].endswith("@" + artifacts["image/b200-pool/big"])
    # the weights are the model's own image, mounted read-only where the runtime reads them; the
    # pool's serving image holds the runtime alone
    weights = {"name": "weights", "image": {"reference": "registry.example.com/inference/fleet@"
                                                         + artifacts["weights-image/big"], "pullPolicy": "IfNotPresent"}}
    assert weights in big["template"]["spec"]["volumes"]
    assert {"name": "weights", "mountPath": "/opt/kiln/models/big", "readOnly": True} in big_c["volumeMounts"]
    chat_weights = next(v for v in pod["volumes"] if v["name"] == "weights")["image"]["reference"]
    assert chat_weights != weights["image"]["reference"] and chat_weights != c["image"]
    pdbs = {o["metadata"]["name"]: o for o in _objects(root) if o["kind"] == "PodDisruptionBudget"}
    # one re-layout batch (1 node) holds 8 chat pods: the PDB lets them all be evicted
    assert set(pdbs) == set(deployments) and pdbs["chat-h100-pool"]["spec"]["maxUnavailable"] == 8
    config = YAML_.load(next(o for o in _objects(root) if o["metadata"]["name"] == "fleet-mig-layouts-desired")
                        ["data"]["config.yaml"])
    layouts = config["mig-configs"]
    assert set(layouts) == {"all-disabled", "kiln-0ee2259fad"}
    assert layouts["kiln-0ee2259fad"] == [{"devices": list(range(8)), "mig-enabled": True,
                                           "mig-devices": {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}}]
    labels = (root / "node-layer" / "label-nodes.sh").read_text()
    assert "pool h100-pool kiln.io/pool=h100-pool kiln-0ee2259fad 4 1\n" in labels  # one node at a time
    assert "pool b200-pool kiln.io/pool=b200-pool all-disabled 2 1\n" in labels
    values = YAML_.load((root / "node-layer" / "gpu-operator-values.yaml").read_text())
    assert values == {"mig": {"strategy": "mixed"}, "migManager": {
        "enabled": True, "config": {"name": "fleet-mig-layouts", "default": "all-disabled"}}}
    patch = YAML_.load((root / "node-layer" / "clusterpolicy-patch.yaml").read_text())
    assert patch == {"spec": {"mig": {"strategy": "mixed"}, "migManager": {
        "enabled": True, "config": {"name": "fleet-mig-layouts", "default": "all-disabled"}}}}
    # clocks of the MIG pool and power of the B200 pool are left to the node-tuning scripts
    assert "rc=0; gpu 7 1755,1755 '' '' '' || rc=$?" in (root / "node-layer" / "node-tuning-h100-pool.sh").read_text()
    assert "rc=0; gpu 0 '' '' '' 1000 || rc=$?" in (root / "node-layer" / "node-tuning-b200-pool.sh").read_text()
    app = YAML_.load((root / "argocd" / "application.yaml").read_text())
    assert app["spec"]["source"] == {"repoURL": "https://git.example.com/inference/fleet-deploy.git",
                                     "path": "releases/fleet", "targetRevision": "main"}
    assert app["spec"]["syncPolicy"]["retry"]["limit"] > 0 and "backoff" in app["spec"]["syncPolicy"]["retry"]
    ns = next(o for o in _objects(root) if o["kind"] == "Namespace")
    assert ns["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "Delete=false"
    # Argo CD creates by wave: the namespace exists before anything synced into it
    waves = [int(o["metadata"]["annotations"].get("argocd.argoproj.io/sync-wave", "0")) for o in _objects(root)
             if o["metadata"].get("namespace") == ns["metadata"]["name"]]
    assert min(waves) > int(ns["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])


def test_trtllm_serve_pods_run_the_host_command(tmp_path: Path) -> None:
    """A pool model on trtllm-serve runs the argv a host unit runs, probes trtllm-serve's /health
    and exposes its one port; the image carries the options file that argv names."""
    from compiler.actions import runtimes
    text = EXAMPLE.read_text(encoding="utf-8")
    old = "serving: {max_queue_size: 64, queue_timeout_ms: 1000, streaming: true}"
    assert text.count(old) == 1
    graph = graph_of(EXAMPLE, tmp_path, text.replace(old, "serving: {runtime: trtllm-serve}"))
    root = render(graph, tmp_path)
    objects = _objects(root)
    for o in objects:
        if o["apiVersion"] in ("v1", "apps/v1", "policy/v1"):
            _validate_core(o)
    coder = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "coder-h100-pool")
    c = coder["spec"]["template"]["spec"]["containers"][0]
    want = runtimes.unit_serving("trtllm-serve", "llmapi", "coder", {"http": 8000, "grpc": 8001, "metrics": 8002})
    assert c["command"] == want.command and c["command"][0] == "trtllm-serve"
    assert runtimes.options_path("coder") in c["command"]
    assert c["livenessProbe"]["httpGet"]["path"] == c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert [p["name"] for p in c["ports"]] == ["http"]
    service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].startswith("coder"))
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    chat = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-h100-pool")
    assert chat["spec"]["template"]["spec"]["containers"][0]["command"][0] == "tritonserver"  # the others stay
    assert "llmapi-options/coder" in graph.actions["image-context/h100-pool/coder"].deps  # the options file (--extra_llm_api_options)
    # each model's image on the pool holds its own files: chat's has no options of coder's, coder's no repository
    assert "llmapi-options/coder" not in graph.actions["image-context/h100-pool/chat"].deps
    assert not graph.actions["image-context/h100-pool/coder"].params.repository


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_node_scripts_pass_shellcheck(trees) -> None:
    scripts = sorted((trees["k8s-two-pools"] / "node-layer").glob("*.sh"))
    assert len(scripts) == 3
    proc = subprocess.run(["shellcheck", "-s", "sh", *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


# --- core objects against the Kubernetes schemas -------------------------------------------------
def _validate_core(obj: dict) -> None:
    kubernetes_validate.validate(obj, meta.KUBERNETES_VERSION, strict=True)


def _pod_template(pod_template: dict) -> dict:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "component"}, "template": pod_template}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_core_objects_validate(variant: str, trees) -> None:
    objects = _objects(trees[variant])
    core = [o for o in objects if o["apiVersion"] in ("v1", "apps/v1", "policy/v1", "batch/v1",
                                                     "rbac.authorization.k8s.io/v1")]
    assert len(core) >= 4
    for o in core:
        _validate_core(o)
    for o in objects:
        if o["kind"] == "DynamoGraphDeployment":
            for c in o["spec"]["components"]:
                _validate_core(_pod_template(c["podTemplate"]))


def test_core_validation_rejects_broken_objects(trees) -> None:
    deployment = next(o for o in _objects(trees["k8s-two-pools"]) if o["kind"] == "Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["replica"] = typo["spec"].pop("replicas")
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    for broken in (typo, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            _validate_core(broken)


# --- the ClusterPolicy patch against the GPU Operator's CRD ------------------------------------
def _patch_schema() -> dict:
    """The CRD's openAPIV3Schema for a merge patch: no field is required (the patch carries only
    Kiln's), and an object that lists its properties admits no other (the API server would prune
    an unknown field silently, so a misspelled one must fail here)."""
    crd = YAML_.load((DATA / "nvidia.com_clusterpolicies.yaml").read_text(encoding="utf-8"))
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]

    def strict(node):
        if isinstance(node, dict):
            node.pop("required", None)
            if "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for v in node.values():
                strict(v)
        elif isinstance(node, list):
            for v in node:
                strict(v)
    strict(schema)
    return schema


def test_cluster_policy_patch_validates_against_the_crd(trees) -> None:
    validator = jsonschema.Draft7Validator(_patch_schema())
    for variant in VARIANTS:
        patch = YAML_.load((trees[variant] / "node-layer" / "clusterpolicy-patch.yaml").read_text())
        errors = list(validator.iter_errors(patch))
        assert not errors, [e.message for e in errors]
    for broken in ({"spec": {"mig": {"strategy": "auto"}}},
                   {"spec": {"migManger": {"enabled": True}}},
                   {"spec": {"migManager": {"config": {"default": "kiln-abc"}}}}):
        assert list(validator.iter_errors(broken)), broken


# --- the DynamoGraphDeployment: v1beta1 shape, and Dynamo's own DGD --------------------------------
def _shape() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((DATA / "dynamo-v1beta1-shape.json").read_text()))


def _dgds(trees) -> list[dict]:
    return [o for o in _objects(trees["k8s-two-pools-dynamo"]) if o["kind"] == "DynamoGraphDeployment"]


def test_dgd_has_the_v1beta1_shape(trees) -> None:
    shape = _shape()
    dgds = _dgds(trees)
    assert sorted(d["metadata"]["name"] for d in dgds) == ["big", "chat", "coder", "intent"]
    for d in dgds:
        errors = list(shape.iter_errors(d))
        assert not errors, [e.message for e in errors]
    big = next(d for d in dgds if d["metadata"]["name"] == "big")
    worker = next(c for c in big["spec"]["components"] if c["type"] == "worker")
    assert worker["replicas"] == 2 and worker["runtimeVersionOverride"] == "1.6.1"
    assert worker["podTemplate"]["metadata"]["annotations"] == {  # one worker at a time, no surge: not 25%/25%
        "nvidia.com/deployment-rolling-update-max-surge": "0",
        "nvidia.com/deployment-rolling-update-max-unavailable": "1"}
    assert worker["name"] == "worker-b200-pool" and worker["sharedMemorySize"] == "8Gi"
    main = worker["podTemplate"]["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "8" and main["resources"]["requests"]["memory"]
    options = next(o for o in _objects(trees["k8s-two-pools-dynamo"])
                   if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("big-llm-api-options-"))
    artifacts = json.loads(big["metadata"]["annotations"][meta.ARTIFACTS_ANNOTATION])
    assert worker["podTemplate"]["spec"]["volumes"] == [
        {"name": "llm-api-options", "configMap": {"name": options["metadata"]["name"]}},
        {"name": "weights", "image": {"reference": "registry.example.com/inference/fleet@" + artifacts["weights-image/big"],
                                      "pullPolicy": "IfNotPresent"}}]
    assert {"name": "weights", "mountPath": "/opt/kiln/models/big", "readOnly": True} in main["volumeMounts"]
    assert main["args"][main["args"].index("--model-path") + 1] == "/opt/kiln/models/big"
    assert YAML_.load(options["data"]["llm-api-options.yaml"])["tensor_parallel_size"] == 8
    chat = next(d for d in dgds if d["metadata"]["name"] == "chat")
    chat_worker = next(c for c in chat["spec"]["components"] if c["type"] == "worker")
    # power is the node tuning's on every worker (the Power Agent is a chart nothing installs)
    assert "dynamo.nvidia.com/gpu-power-limit" not in chat_worker["podTemplate"]["metadata"]["annotations"]
    assert "rc=0; gpu 0 '' '' '' 1000 || rc=$?" in (trees["k8s-two-pools-dynamo"] / "node-layer" /
                                               "node-tuning-b200-pool.sh").read_text()
    assert chat_worker["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    # the options ConfigMap outlives the old workers that mount it: pruned last, once the DGD is healthy
    assert options["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "PruneLast=true"


def test_dgd_shape_rejects_broken_objects(trees) -> None:
    shape = _shape()
    dgd = _dgds(trees)[0]
    bad_name = copy.deepcopy(dgd)
    bad_name["spec"]["components"][1]["name"] = "worker_1"
    no_main = copy.deepcopy(dgd)
    no_main["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["name"] = "server"
    unknown = copy.deepcopy(dgd)
    unknown["spec"]["components"][0]["replica"] = 1
    bad_backend = copy.deepcopy(dgd)
    bad_backend["spec"]["backendFramework"] = "tensorrt"
    for broken in (bad_name, no_main, unknown, bad_backend):
        assert list(shape.iter_errors(broken))
    bad_pod = copy.deepcopy(dgd["spec"]["components"][1]["podTemplate"])
    bad_pod["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_core(_pod_template(bad_pod))


def test_dgd_matches_what_dynamo_itself_writes(trees) -> None:
    """Dynamo's profiler DGD for TensorRT-LLM (ai-dynamo 1.6.1 wheel, tests/data/k8s/SOURCE.md) passes
    the same checks, and Kiln's components run the same programs with the same flags."""
    theirs = YAML_.load((DATA / "dynamo-1.6.1" / "trtllm-agg.yaml").read_text())
    assert not list(_shape().iter_errors(theirs))
    for c in theirs["spec"]["components"]:
        _validate_core(_pod_template(c["podTemplate"]))

    def argv(component: dict) -> list[str]:
        main = next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")
        return main.get("command", []) + main.get("args", [])

    def flags(words: list[str]) -> set[str]:
        return {w for w in words if w.startswith("--")}

    their = {c["type"]: c for c in theirs["spec"]["components"]}
    for dgd in _dgds(trees):
        assert (dgd["apiVersion"], dgd["kind"]) == (theirs["apiVersion"], theirs["kind"])
        mine = {c["type"]: c for c in dgd["spec"]["components"]}
        assert set(mine) == set(their) == {"frontend", "worker"}
        assert argv(mine["frontend"]) == argv(their["frontend"]) == ["python3", "-m", "dynamo.frontend"]
        assert argv(mine["worker"])[:3] == argv(their["worker"])[:3] == ["python3", "-m", "dynamo.trtllm"]
        assert {"--model-path", "--served-model-name", "--extra-engine-args"} <= flags(argv(mine["worker"])) \
            <= flags(argv(their["worker"]))
        limits = next(c for c in mine["worker"]["podTemplate"]["spec"]["containers"])["resources"]["limits"]
        their_limits = their["worker"]["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
        assert any(k.startswith("nvidia.com/") for k in limits) and "nvidia.com/gpu" in their_limits


# --- mig-parted's parsing rules ------------------------------------------------------------------
def test_mig_parted_config_parses_with_mig_parted_rules(trees) -> None:
    for variant in VARIANTS:
        cm = next(o for o in _objects(trees[variant]) if o["metadata"]["name"] == "fleet-mig-layouts-desired")
        assert nodelayer.mig_parted_problems(YAML_.load(cm["data"]["config.yaml"])) == []


@pytest.mark.parametrize("doc, problem", [
    ({"mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, "missing 'version'"),
    ({"version": "v2", "mig-configs": {}}, "unknown version: v2"),
    ({"version": "v1", "mig-configs": {}}, "at least one entry in 'mig-configs'"),
    ({"version": "v1", "mig-configs": {"a": []}}, "at least one entry in 'a'"),
    ({"version": "v1", "configs": {}}, "unexpected field: configs"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all"}]}}, "missing required field: mig-enabled"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": False}]}}, "invalid string input"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0], "mig-enabled": True}]}}, "missing required field 'mig-devices'"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0], "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]}},
     "MIG devices included"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0], "mig-enabled": True, "mig-devices": {"5g.40gb": 1}}]}},
     "unknown Compute Instance slice size: 5"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.24gb+gfx": 1}}]}},
     "unknown MigProfile attribute: gfx"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]}},
     "invalid count"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0], "mig-enabled": True, "device-filter": 7,
                                              "mig-devices": {"1g.10gb": 1}}]}}, "device-filter"),
])
def test_mig_parted_rules_reject(doc, problem: str) -> None:
    problems = nodelayer.mig_parted_problems(doc)
    assert any(problem in p for p in problems), problems


def test_mig_parted_profile_names() -> None:
    # names mig-parted parses, with and without the compute-slice prefix and the +me attribute
    for ok in ("1g.10gb", "3g.40gb", "7g.80gb", "1g.10gb+me", "1c.2g.20gb", "4g.96gb"):
        assert nodelayer.mig_profile_problem(ok) is None, ok
    for bad in ("1g.24gb-me", "2g.48gb+me.all", "1g", "1g.10", "g.10gb", "1g.10gb+me,me", "9g.80gb"):
        assert nodelayer.mig_profile_problem(bad), bad


def test_dgd_health_check_for_each_way_argo_cd_is_installed(trees) -> None:
    """Review S9: an argocd-cm patched by hand is undone by Argo CD's Helm chart or its operator; the
    tree carries the same check as chart values and as an ArgoCD resourceHealthChecks patch."""
    argo = trees["k8s-two-pools-dynamo"] / "argocd"
    key = "resource.customizations.health.nvidia.com_DynamoGraphDeployment"
    lua = YAML_.load((argo / "argocd-cm-health.yaml").read_text())["data"][key]
    assert YAML_.load((argo / "argo-cd-values.yaml").read_text())["configs"]["cm"][key] == lua
    check, = YAML_.load((argo / "argocd-operator-health.yaml").read_text())["spec"]["resourceHealthChecks"]
    assert check == {"group": "nvidia.com", "kind": "DynamoGraphDeployment", "check": lua}
    assert not (trees["k8s-two-pools"] / "argocd" / "argo-cd-values.yaml").exists()  # runtime deployment needs none


# --- Argo CD's health check for the DGD, in the Lua Argo CD runs -------------------------------------
def test_dgd_health_check_in_lua_5_1(trees) -> None:
    lua51 = pytest.importorskip("lupa.lua51", reason="lupa (a Lua 5.1 runtime, as Argo CD's gopher-lua) is not installed")
    cm = YAML_.load((trees["k8s-two-pools-dynamo"] / "argocd" / "argocd-cm-health.yaml").read_text())
    script = cm["data"]["resource.customizations.health.nvidia.com_DynamoGraphDeployment"]
    _validate_core(cm)

    def health(obj: dict) -> str:
        lua = lua51.LuaRuntime(unpack_returned_tuples=True)
        to_table = lua.eval("function(f) return f end")  # identity; tables come from python via lua.table_from
        table = _lua_table(lua, obj)
        fn = lua.execute("return function(obj) " + script + " end")
        return to_table(fn)(table)["status"]

    gen = {"metadata": {"generation": 2}}
    assert health({**gen}) == "Progressing"
    assert health({**gen, "status": {"observedGeneration": 2, "state": "successful",
                                     "conditions": [{"type": "Ready", "status": "True"}]}}) == "Healthy"
    assert health({**gen, "status": {"observedGeneration": 1, "state": "successful",
                                     "conditions": [{"type": "Ready", "status": "True"}]}}) == "Progressing"
    assert health({**gen, "status": {"observedGeneration": 2, "state": "failed",
                                     "conditions": [{"type": "Ready", "status": "False", "message": "x"}]}}) == "Degraded"
    assert health({**gen, "status": {"observedGeneration": 2, "state": "pending"}}) == "Progressing"


def _lua_table(lua, value):
    if isinstance(value, dict):
        return lua.table_from({k: _lua_table(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_lua_table(lua, v) for v in value])
    return value


# --- a one-field change ----------------------------------------------------------------------------
ONE_FIELD = ("          - {profile: 1g.10gb, serves: intent}", "          - {profile: 1g.20gb, serves: intent}")


def test_one_mig_profile_changes_exactly_its_layout_label_and_workload(tmp_path: Path, trees) -> None:
    base = graph_of(EXAMPLE, tmp_path / "a")
    text = EXAMPLE.read_text(encoding="utf-8")
    assert text.count(ONE_FIELD[0]) == 1
    head = graph_of(EXAMPLE, tmp_path / "b", text.replace(*ONE_FIELD))
    changed = {aid for aid in head.order if base.keys.get(aid) != head.keys[aid]}
    assert changed == {"k8s-node-layer", "k8s-deployment/intent-h100-pool", "k8s-release",
                       "capacity-report/h100-pool", "spec-snapshot"}  # the image is untouched
    before, after = tree_files(trees["k8s-two-pools"]), tree_files(render(head, tmp_path / "b"))
    assert sorted(before) == sorted(after)
    assert {rel for rel in after if before[rel] != after[rel]} == {
        "node-layer/mig-parted-config.yaml", "node-layer/label-nodes.sh", "node-layer/relayout-job.yaml",
        "workloads/intent-h100-pool.yaml", "disruption-budgets/intent-h100-pool.yaml",
        "release-stamp.yaml"}  # the release stamp carries the spec digest
    intent = after["workloads/intent-h100-pool.yaml"].decode()
    assert "nvidia.com/mig-1g.20gb: '1'" in intent and "mig-1g.10gb" not in intent


def test_plan_shows_relayout_roll_and_replicas(tmp_path: Path) -> None:
    base = graph_of(EXAMPLE, tmp_path / "a")
    text = EXAMPLE.read_text(encoding="utf-8").replace(*ONE_FIELD).replace(
        "node_pool: {nodes: 4,", "node_pool: {nodes: 6,")
    head = graph_of(EXAMPLE, tmp_path / "b", text)
    items = host_disruptions(base, head)
    text_plan = render_disruptions(items, "text")
    pool_items = [d for d in items if d.pool]
    kinds = {(d.host, d.kind) for d in pool_items}
    assert kinds == {("h100-pool", "node-relayout"), ("h100-pool", "workload-roll"), ("h100-pool", "replicas")}
    assert text_plan.splitlines()[0] == "Disruption: 1 node pool(s)"
    relayout = next(d for d in pool_items if d.kind == "node-relayout")
    assert "6 node(s), 1 at a time: cordon, evict the node's GPU pods" in relayout.detail
    assert "drain" not in relayout.detail  # the MIG manager evicts nothing; the re-layout Job does
    # mig-parted destroys every instance of a changed GPU: the neighbours of intent's slice too
    assert relayout.detail.endswith("destroyed on each node: GPUs 0-7: 1g.10gb (intent), 2g.20gb (coder), 3g.40gb (chat)")
    assert "GPUs 0-7: -1g.10gb +1g.20gb" in relayout.detail
    roll = [d.detail for d in pool_items if d.kind == "workload-roll"]
    # the pace is the Deployment controller's arithmetic on the emitted strategy (a node's worth of 48)
    assert roll == ["intent-h100-pool: pods replaced 8 at a time, each old pod stopped before its replacement is "
                    "scheduled (maxSurge 0, maxUnavailable 8: at least 40 of 48 stay ready) (resource "
                    "nvidia.com/mig-1g.10gb -> nvidia.com/mig-1g.20gb)"]
    replicas = sorted(d.detail for d in pool_items if d.kind == "replicas")
    assert replicas == [f"{m}-h100-pool: 32 -> 48 replicas (+16 x 1 x nvidia.com/mig-{p})"
                        for m, p in (("chat", "3g.40gb"), ("coder", "2g.20gb"), ("intent", "1g.20gb"))]
    assert "h100-pool (node pool): node-relayout:" in text_plan
    assert json.loads(render_disruptions(items, "json"))[0]["node_pool"] is True
    # node pools get no host plan or host script: provision.sh would fight the GPU Operator
    assert not [a for a in head.order if a.startswith(("host-plan/", "host-script/"))]


def test_plan_words_node_pools_as_pools(tmp_path: Path) -> None:
    """Review S10: a spec rename listed each pool's GPUs as a host's container restarts ("16 GPU(s)
    on 2 host(s)") and no Kubernetes change; the pods roll (their template's part-of label)."""
    base = graph_of(EXAMPLE, tmp_path / "a")
    text = EXAMPLE.read_text(encoding="utf-8").replace("name: fleet\n", "name: fleet2\n", 1)
    items = host_disruptions(base, graph_of(EXAMPLE, tmp_path / "b", text))
    assert items and all(d.pool for d in items)
    assert render_disruptions(items, "text").splitlines()[0] == "Disruption: 2 node pool(s)"
    assert sorted(d.detail.split(":", 1)[0] for d in items if d.kind == "workload-roll") == [
        "big-b200-pool", "chat-h100-pool", "coder-h100-pool", "intent-h100-pool"]
    # the images carry the spec's name in their labels: they are rebuilt too, and the lines say so
    assert all(d.detail.endswith(f"(spec_name fleet -> fleet2, {m}'s serving image on {d.host} rebuilt, weights image "
                                 f"of {m} rebuilt)") for d in items for m in [d.detail.split('-', 1)[0]])


def test_plan_says_which_nodes_a_pool_change_touches(tmp_path: Path) -> None:
    """Review N14: a renamed pool's nodes, already at its layout, are not cordoned and evicted
    (label-nodes.sh skips a node at `<layout> success`); a pool that loses a node says that the tree
    removes none, and that the leaving node must be drained and unlabelled."""
    base = graph_of(EXAMPLE, tmp_path / "a")
    source = EXAMPLE.read_text(encoding="utf-8")
    renamed = source.replace("  h100-pool:\n", "  h100-pool-b:\n").replace("{kiln.io/pool: h100-pool}",
                                                                             "{kiln.io/pool: h100-pool-b}")
    items = host_disruptions(base, graph_of(EXAMPLE, tmp_path / "b", renamed))
    relayout, = [d.detail for d in items if d.kind == "node-relayout"]
    assert "the layout of h100-pool in the base revision: a node already at it" in relayout
    assert "left alone, nothing evicted" in relayout
    fewer = source.replace("node_pool: {nodes: 4,", "node_pool: {nodes: 3,")
    items = host_disruptions(base, graph_of(EXAMPLE, tmp_path / "c", fewer))
    scale_in, = [d.detail for d in items if d.kind == "node-relayout"]
    assert scale_in.startswith("4 -> 3 node(s): the tree removes no node")
    assert "drain them" in scale_in and "remove the label kiln.io/pool=h100-pool" in scale_in
    assert "cordon, evict" not in scale_in


def test_a_mig_strategy_change_relays_out_each_mig_pool_once(tmp_path: Path) -> None:
    """The cluster's MIG strategy declares its disruption on its field (NodeLayerParams.strategy):
    every MIG pool lists one node-relayout, worded as the strategy change; a pool without MIG none."""
    from compiler.targets.kubernetes.k8s_nodes import disruptions

    params = next(a.params for a in graph_of(EXAMPLE, tmp_path).actions.values() if a.kind == "k8s-node-layer")
    other = "single" if params.strategy == "mixed" else "mixed"
    items = disruptions(params, params.model_copy(update={"strategy": other}))
    mig = sorted(p.name for p in params.pools if p.mig)
    assert mig and sorted(d.host for d in items) == mig and {d.kind for d in items} == {"node-relayout"}
    assert all(d.detail.startswith(f"MIG strategy {params.strategy} -> {other}:") for d in items)
    assert disruptions(params, params) == []


def test_plan_says_what_is_left_to_the_node_scripts(tmp_path: Path) -> None:
    base = graph_of(EXAMPLE, tmp_path / "a")
    text = EXAMPLE.read_text(encoding="utf-8").replace("clocks: {graphics_mhz: 1755}", "clocks: {graphics_mhz: 1980}")
    items = [d for d in host_disruptions(base, graph_of(EXAMPLE, tmp_path / "b", text)) if d.pool]
    assert [(d.host, d.kind) for d in items] == [("h100-pool", "clocks")]
    assert "the DaemonSet fleet-gpu-tuning-h100-pool applies it" in items[0].detail
    # without a tools image there is no DaemonSet: the plan says the script is the user's to run
    bare = [ln for ln in text.splitlines(keepends=True) if ln.startswith("  relayout_image:")][0]
    base2 = graph_of(EXAMPLE, tmp_path / "c", EXAMPLE.read_text(encoding="utf-8").replace(bare, ""))
    items = [d for d in host_disruptions(base2, graph_of(EXAMPLE, tmp_path / "d", text.replace(bare, ""))) if d.pool]
    assert "not applied by the manifests" in items[0].detail and "node-tuning-h100-pool.sh" in items[0].detail


# --- the weights image's layers ------------------------------------------------------------------
def test_weights_image_layers() -> None:
    """Files go into layers of at most the limit in path order; a larger file is a layer of its own;
    the limit grows so that the layers never exceed the most an image may have."""
    from compiler.actions.weights_image import layer_groups

    files = [("config.json", 1), ("model-00001.safetensors", 6), ("model-00002.safetensors", 6),
             ("model-00003.safetensors", 20), ("tokenizer.json", 2)]
    assert layer_groups(files, limit=8, most=10) == [["config.json", "model-00001.safetensors"],
                                                     ["model-00002.safetensors"], ["model-00003.safetensors"],
                                                     ["tokenizer.json"]]
    shards = [(f"model-{i:05d}.safetensors", 5) for i in range(100)]
    groups = layer_groups(shards, limit=5, most=8)
    assert len(groups) <= 8 and [f for g in groups for f in g] == [f for f, _ in shards]
    assert layer_groups([("a", 1)], limit=8, most=1) == [["a"]]


def test_the_tree_says_which_kubernetes_it_needs(trees, tmp_path: Path) -> None:
    """Image volumes (the pools' weights) need Kubernetes 1.35 or a feature gate: the tree says so
    at its top, with the version it was written for; a tree whose pools carry the weights in their
    serving images names the version only."""
    head = (trees["k8s-two-pools"] / "kustomization.yaml").read_text(encoding="utf-8")
    assert head.startswith("# Written and schema-checked for Kubernetes 1.35 ")
    assert "image volumes" in head and "ImageVolume feature gate" in head and "node_pool.weights: in-image" in head
    text = EXAMPLE.read_text(encoding="utf-8")
    for old in ("node_pool: {nodes: 4, ", "node_pool: {nodes: 2, "):
        assert text.count(old) == 1, old
        text = text.replace(old, old + "weights: in-image, ")
    text = text.replace("kubernetes:\n", "kubernetes:\n  version: \"1.34\"\n", 1)
    assert 'version: "1.34"' in text
    root = render(graph_of(EXAMPLE, tmp_path, text), tmp_path)
    head = (root / "kustomization.yaml").read_text(encoding="utf-8")
    assert head.startswith("# Written and schema-checked for Kubernetes 1.34 ")
    assert "image volumes" not in head
    assert YAML_.load(head)["kind"] == "Kustomization"
