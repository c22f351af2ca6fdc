"""The configuration-space walk (issue 33): specs over the space users write, and the property that
every spec `kiln validate` accepts builds and emits only files their consumers accept.

The space is read from the project's data, not listed by hand: the GPUs and their MIG profiles
(compiler/catalog/data/gpus.json), the model architectures (models.json), the weight, activation
and KV formats and the MoE backends (formats.json), the KV-transfer backends of the pinned
TensorRT-LLM (disaggregated.json), the Dynamo releases (dynamo.json) and the spec's own choices
(compiler/spec/models.py Literals). A spec is made by `generate(chooser)`: every decision is one
`chooser.pick(options)`, the simplest option first, so a spec is a list of choice indexes and
shrinks by lowering them (`shrink`); hypothesis drives the same function in the test
(tests/test_space_walk.py: DrawChooser), a seeded random.Random in the benchmark
(benchmarks/space_walk.py: RandomChooser).

`walk_one` is the property: validate; if accepted, build with a builder that has no torch, GPU,
Docker or network (what `kiln build --allow-partial` runs on such a machine), render the Kubernetes
tree as tests/k8s_tree.py does (the pushed images given as data), and check every emitted file with
its consumer's rules as Kiln holds them (`artifact_problems`).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence, get_args

from ruamel.yaml import YAML

from compiler.catalog import disaggregated as disagg_facts
from compiler.catalog import dynamo as dynamo_facts
from compiler.catalog.formats import load_format_table
from compiler.catalog.gpus import load_gpu_catalog
from compiler.catalog.models import load_model_catalog
from compiler.spec import models as spec_models

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ("nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:"
         "1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0")
# Dynamo's runtime pins a TensorRT-LLM newer than any Triton tag of images.json: the k8s tests'
# choice (tests/test_k8s.py _dynamo_text), an image Kiln only names (K804 warns).
DYNAMO_TRITON = IMAGE.replace("26.04-", "26.09-")
DIGEST = "@sha256:" + "1" * 64
LOG = logging.getLogger("space-walk")


# --- choosers --------------------------------------------------------------------------------------

def _site(counts: dict) -> tuple:
    """The decision being made: where in the generator it is asked (function and line, through
    `_bool`) and how many times that place asked before in this spec. A trace keyed by it replays
    every other decision unchanged when one is lowered, even where that removes or adds decisions
    before the others (an unquantized recipe asks nothing about calibration)."""
    f = sys._getframe(2)
    while f.f_code.co_name == "_bool":
        f = f.f_back
    site = (f.f_code.co_name, f.f_lineno)
    counts[site] = counts.get(site, 0) + 1
    return (*site, counts[site])


class RandomChooser:
    """Choices from a seeded random.Random; `trace` records them (decision -> index) for replay and
    shrinking. The first (simplest) option is taken a third of the time besides its uniform share,
    so that a spec combines a few departures from the defaults rather than one at every decision
    (which nearly every spec would fail validation on: too big a model for a MIG slice, and so on)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.trace: dict[tuple, int] = {}
        self._counts: dict = {}

    def pick(self, options: Sequence[Any]) -> Any:
        i = 0 if self.rng.random() < 1 / 3 else self.rng.randrange(len(options))
        self.trace[_site(self._counts)] = i
        return options[i]


class ReplayChooser:
    """Replays a trace; a decision it does not hold, or whose index is out of range, takes the first option."""

    def __init__(self, trace: dict) -> None:
        self.given = dict(trace)
        self.trace: dict[tuple, int] = {}
        self._counts: dict = {}

    def pick(self, options: Sequence[Any]) -> Any:
        key = _site(self._counts)
        i = self.given.get(key, 0)
        i = i if i < len(options) else 0
        self.trace[key] = i
        return options[i]


class DrawChooser:
    """Hypothesis's `data.draw` as a chooser: hypothesis shrinks towards the first option."""

    def __init__(self, data) -> None:
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def pick(self, options: Sequence[Any]) -> Any:
        return self.data.draw(self.st.sampled_from(list(options)))


# --- the space, from the project's data -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Space:
    gpus: tuple[str, ...]
    mig: dict  # GPU -> its MIG profile names ((): none)
    gpu_clocks: dict  # GPU -> (graphics max MHz, first memory clock or None)
    models: tuple[str, ...]
    moe_models: frozenset
    moe_backends: tuple[str | None, ...]
    transfer_backends: tuple[str, ...]
    dynamo: tuple[tuple[str, str], ...]  # (Dynamo release, its TensorRT-LLM)
    toolchains: tuple[tuple[str, str], ...]  # (TensorRT-LLM, the Triton tag that ships it), 1.2.1 first
    attention: tuple[str, ...]
    schedulers: tuple[str, ...]
    block_sizes: tuple[int, ...]


def _default_first(model, name: str) -> tuple:
    """A spec field's choices (its Literal), its default first: the simplest spec leaves it out."""
    field = model.model_fields[name]
    return tuple(sorted(get_args(field.annotation), key=lambda v: v != field.default))


def _toolchains() -> tuple[tuple[str, str], ...]:
    """Each TensorRT-LLM release a Triton tag ships (images.json), with the last such tag."""
    from compiler.catalog.images import load_image_table

    family = load_image_table().family("nvcr.io/nvidia/tritonserver")
    last = {version: tag for tag, version in family.tags.items()}
    return tuple(sorted(last.items(), key=lambda vt: (vt[0] != "1.2.1", vt[0])))


@functools.lru_cache(maxsize=None)
def space() -> Space:
    gpus = load_gpu_catalog()
    models = load_model_catalog()
    table = load_format_table()
    names = tuple(gpus.names)
    # the quickstart's tiny model first: the simplest spec a failure shrinks to is the cheapest one
    arch = sorted(models.names, key=lambda n: (n != "tinyllama-kiln-quickstart", n))
    return Space(
        gpus=tuple(sorted(names, key=lambda n: (n != "H100-SXM5-80GB", n))),
        mig={n: tuple(p.name for p in gpus.get(n).mig.profiles) if gpus.get(n).mig.supported else ()
             for n in names},
        gpu_clocks={n: (gpus.get(n).graphics_mhz[1], (gpus.get(n).memory_mhz or (None,))[0]) for n in names},
        models=tuple(arch),
        moe_models=frozenset(n for n in models.names if models.get(n).experts),
        moe_backends=(None, *[b.lower() for b in table.moe_backends]),
        transfer_backends=disagg_facts.transceiver("1.2.1").backends,
        toolchains=_toolchains(),
        dynamo=tuple((f"{line}.1", dynamo_facts.release(line).tensorrt_llm) for line in dynamo_facts.known_lines()),
        attention=_default_first(spec_models.Kernels, "attention"),
        schedulers=_default_first(spec_models.Runtime, "scheduler"),
        block_sizes=_default_first(spec_models.Runtime, "tokens_per_block"),
    )


LIMITS = [{"max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512},
          {"max_batch_size": 64, "max_input_len": 2048, "max_seq_len": 4096, "max_num_tokens": 8192},
          {"max_batch_size": 256, "max_input_len": 8192, "max_seq_len": 16384, "max_num_tokens": 16384}]
PARALLEL = [1, 2, 4, 8]


def _bool(c) -> bool:
    return c.pick([False, True])


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What the walk needs of a format-table recipe (a failure's draws print it in one line)."""

    weights: str
    activations: str | None
    default: bool
    quantized: bool


def _recipes(target: str, sm: int) -> list:
    """The (weights, activations) pairs the format table says Kiln builds for the target and the
    target runs on this SM: the rest is refused (K301..K312) and the walk is about what is accepted."""
    from compiler.catalog.formats import load_format_table

    table = load_format_table()
    ok = [Recipe(r.weights, r.activations, r.default, r.quantized) for r in table.recipes
          if table.buildable(r, target) and table.supports(r, target, sm)]
    return sorted(ok, key=lambda r: (r.quantized, r.weights, r.activations or ""))


def _kv_formats(target: str, sm: int) -> list[str]:
    from compiler.catalog.formats import load_format_table

    out = []
    for name, kv in load_format_table().kv_formats.items():
        support = kv.llmapi if target == "llmapi" else kv.engine
        if support.allows(sm):
            out.append(name)
    return out


def _model(c, s: Space, target: str, sm: int) -> dict:
    arch = c.pick(s.models)
    source = c.pick(["path", "hub"])
    m: dict[str, Any] = {"source": {"path": checkpoint(arch)} if source == "path"
                         else {"huggingface": "kiln/walk", "revision": "0" * 40},
                         "architecture": arch}
    recipe = c.pick(_recipes(target, sm))
    kv = c.pick(_kv_formats(target, sm))
    q: dict[str, Any] = {}
    if recipe.weights != "bf16":
        q["weights"] = recipe.weights
    if not recipe.default or (recipe.activations is not None and _bool(c)):
        q["activations"] = recipe.activations or "bf16"
    if kv != "auto":
        q["kv_cache"] = kv
    if recipe.quantized or kv not in ("auto", "bf16", "fp16"):
        q["calibration"] = {"data": "calib.jsonl", "samples": 16}
        # a quality gate where Kiln can run one (llmapi), always with an NVFP4 KV cache (K305)
        if target == "llmapi" and (kv == "nvfp4" or _bool(c)):
            q["quality_gate"] = {"eval": "eval.jsonl", "max_regression_pct": 5.0}
    if q:
        m["quantization"] = q
    limits = dict(c.pick(LIMITS))
    m["limits"] = limits
    kernels: dict[str, Any] = {}
    if target == "llmapi":  # the engine target has TensorRT-LLM's own kernels only (K604)
        attention = c.pick(s.attention)
        if attention != "trtllm":
            kernels["attention"] = attention
        if arch in s.moe_models:
            moe = c.pick(s.moe_backends)
            if moe is not None:
                kernels["moe"] = moe
    if kernels:
        m["kernels"] = kernels
    runtime: dict[str, Any] = {}
    if _bool(c):
        runtime["chunked_prefill"] = True
    sched = c.pick(s.schedulers)
    if sched != "guaranteed_no_evict":
        runtime["scheduler"] = sched
    if c.pick([True, False]) is False:
        runtime["block_reuse"] = False
    tpb = c.pick(s.block_sizes)
    if tpb != 32:
        runtime["tokens_per_block"] = tpb
    mbs = limits["max_batch_size"]
    # CudaGraphConfig is the PyTorch backend's: the engine target has no such option (K603)
    graphs = c.pick([None, [b for b in (1, 2, 4, 8) if b <= mbs], [1, mbs]]) if target == "llmapi" else None
    if graphs is not None:
        runtime["cuda_graph_batch_sizes"] = graphs
    if runtime:
        m["runtime"] = runtime
    return m


def _serving(c, target: str, runtime: str) -> dict:
    serving: dict[str, Any] = {}
    if runtime != "triton":
        serving["runtime"] = runtime
        return serving
    if _bool(c):
        serving["streaming"] = True
        if target == "llmapi" and _bool(c):
            serving["stream_text"] = "delta"
    if _bool(c):
        serving.update(max_queue_size=64, queue_timeout_ms=500)
    if target == "engine" and _bool(c):
        serving["max_queue_delay_us"] = 100
    return serving


def _parallelism(c, arch: str, s: Space, target: str) -> dict:
    p: dict[str, Any] = {}
    tp = c.pick(PARALLEL)
    pp = c.pick([1, 2])
    if tp != 1:
        p["tp"] = tp
    if pp != 1:
        p["pp"] = pp
    if arch in s.moe_models and tp > 1:
        ep = c.pick([1, tp, 2])
        if ep != 1:
            p["ep"] = ep
        if target == "llmapi" and _bool(c):
            p["attention_dp"] = True
    return p


def _host(c, s: Space, gpu: str, k8s: bool) -> dict:
    from compiler.catalog.gpus import load_gpu_catalog

    h: dict[str, Any] = {"gpu": gpu, "count": 8}
    graphics, memory = s.gpu_clocks[gpu]
    extra = c.pick(["none", "clocks", "persistence", "driver", "application_clocks", "power_limit"])
    if extra == "clocks":
        h["clocks"] = {"graphics_mhz": graphics} if memory is None else {"graphics_mhz": graphics, "memory_mhz": memory}
    elif extra == "application_clocks" and memory is not None:
        h["application_clocks"] = {"memory_mhz": memory, "graphics_mhz": graphics}
    elif extra == "power_limit":
        h["power_limit_w"] = load_gpu_catalog().get(gpu).tdp_w
    elif extra == "persistence":
        h["persistence"] = False
    elif extra == "driver":
        h["driver"] = ">=580.82.07"
    if k8s:
        h["deploy"] = "kubernetes"
        h["node_pool"] = {"nodes": c.pick([1, 2])}
    return h


def _model_options(c, m: dict, shape: str, runtime: str, dynamo, hosts: dict) -> None:
    """Ports, the traffic and its sla, and a disaggregated model's per-role settings."""
    if _bool(c):
        triton = m.get("serving", {}).get("runtime", "triton") == "triton"
        m.setdefault("serving", {})["ports"] = {"http": 9000, "grpc": 9001, "metrics": 9002} if triton \
            else {"http": 9000}
    if _bool(c):
        m["workload"] = {"input_tokens": m["limits"]["max_input_len"] // 2, "output_tokens": 64,
                         "requests_per_second": c.pick([1, 20])}
        if _bool(c):
            m["sla"] = {"ttft_ms": 2000, "tpot_ms": 50, "percentile": c.pick(["p99", "p50"])}
    if shape != "disaggregated":
        return
    d = m["serving"]["disaggregated"]
    for role in ("prefill", "decode"):
        extra = c.pick(["none", "limits", "runtime", "overlap"])
        r = d.setdefault(role, {})
        if extra == "limits":
            r["limits"] = {"max_batch_size": 4} if role == "prefill" else {"max_num_tokens": 256}
        elif extra == "runtime":
            r["runtime"] = {"kv_cache_memory_fraction": 0.8, "block_reuse": False, "cuda_graph_batch_sizes": [1, 2]}
        elif extra == "overlap":
            r["runtime"] = {"overlap_scheduler": role == "decode"}
        if not r:
            del d[role]
    if _bool(c):
        d.setdefault("kv_transfer", {})["timeout_ms"] = 5000
    if "h2" in hosts and _bool(c):
        d.setdefault("router", {})["host"] = "h2"
    if runtime == "dynamo" and _bool(c):
        d["planner"] = {"image": f"nvcr.io/nvidia/ai-dynamo/dynamo-planner:{dynamo[0]}{DIGEST}", "max_gpus": 16}


def _kubernetes_options(c, kube: dict, host: dict) -> None:
    """The options of the Kubernetes section and of a node pool that change the tree."""
    extra = c.pick(["none", "namespace", "argocd", "resources", "version", "mig_strategy"])
    if extra == "namespace":
        kube["namespace"] = "inference"
    elif extra == "argocd":
        kube["argocd"] = {"repo_url": "https://git.example.com/walk.git", "path": "releases/walk"}
    elif extra == "resources":
        kube["pod_resources"] = {"m": {"cpu": 8, "memory_gib": 64}}
    elif extra == "version":
        kube["version"] = "1.33"
    elif extra == "mig_strategy":
        kube["mig_strategy"] = "mixed"
    pool = c.pick(["none", "in-image", "selector", "gpu_product"])
    if pool == "in-image":
        host["node_pool"]["weights"] = "in-image"
    elif pool == "selector":
        host["node_pool"]["selector"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    elif pool == "gpu_product":
        host["node_pool"]["gpu_product"] = "NVIDIA-" + host["gpu"]


def _disaggregated(c, s: Space, m: dict, host: dict, hosts: dict) -> dict:
    """Prefill and decode roles: their tp, the KV transfer, the router; on one host or two."""
    serving = {"runtime": "trtllm-serve"}
    d: dict[str, Any] = {}
    for role in ("prefill", "decode"):
        tp = c.pick([1, 2, 4])
        if tp != 1:
            d[role] = {"parallelism": {"tp": tp}}
    backend = c.pick(s.transfer_backends)
    kv: dict[str, Any] = {"backend": backend} if backend != "DEFAULT" else {}
    placement = c.pick(["same-host", "two-hosts", "mig"])
    if placement == "mig" and not s.mig[host["gpu"]]:
        placement = "same-host"
    ucx = c.pick([None, {"tls": ["cuda_copy", "cuda_ipc", "tcp"]},
                  {"tls": ["cuda_copy", "rc"], "net_devices": ["mlx5_0:1"]}])
    if ucx is not None:
        kv["ucx"] = ucx
    if _bool(c):
        kv["max_tokens_in_buffer"] = m["limits"]["max_input_len"]
    if kv:
        d["kv_transfer"] = kv
    if not c.pick([True, False]):
        d["router"] = {"kv_aware": False}
    serving["disaggregated"] = d
    ptp = d.get("prefill", {}).get("parallelism", {}).get("tp", 1)
    dtp = d.get("decode", {}).get("parallelism", {}).get("tp", 1)
    pre = {"index": list(range(ptp)) if ptp > 1 else 0, "serves": "m", "role": "prefill"}
    first = 0 if placement == "two-hosts" else ptp
    dec = {"index": list(range(first, first + dtp)) if dtp > 1 else first, "serves": "m", "role": "decode"}
    if placement == "mig":  # both roles as MIG instances of one GPU, one GPU each (K-case mig-role-parallel)
        d.pop("prefill", None)
        d.pop("decode", None)
        profile = c.pick(s.mig[host["gpu"]])
        host["gpus"] = [{"index": 0, "mig": [{"profile": profile, "serves": "m", "role": "prefill"},
                                             {"profile": profile, "serves": "m", "role": "decode"}]}]
    elif placement == "two-hosts":
        host["gpus"] = [pre]
        hosts["h2"] = {**{k: v for k, v in host.items() if k != "gpus"}, "gpus": [dec]}
    else:
        host["gpus"] = [pre, dec]
    return serving


def generate(c) -> dict:
    """One spec (as YAML data) from the chooser's decisions."""
    from compiler.catalog.gpus import load_gpu_catalog

    s = space()
    deploy = c.pick(["hosts", "kubernetes"])
    k8s = deploy == "kubernetes"
    target = c.pick(["llmapi", "engine"])
    # trtllm-serve and Dynamo serve the llmapi target only (K811, K852)
    runtimes = ["triton"] if target == "engine" else ["triton", "trtllm-serve", "dynamo"] if k8s \
        else ["triton", "trtllm-serve"]
    runtime = c.pick(runtimes)
    dynamo = None
    toolchain = {"tensorrt_llm": "1.2.1", "triton_image": IMAGE}
    if runtime == "dynamo":
        dynamo = c.pick(s.dynamo)
        toolchain = {"tensorrt_llm": dynamo[1], "triton_image": DYNAMO_TRITON}
    serving_runtime = "trtllm-serve" if runtime == "dynamo" else runtime
    gpu = c.pick(s.gpus)
    m = _model(c, s, target, load_gpu_catalog().get(gpu).sm_version)
    if "quantization" in m:
        toolchain["modelopt"] = "0.47.0"
    shape = c.pick(["whole", "group", "mig", "disaggregated"])
    if shape == "mig" and not s.mig[gpu]:
        shape = "whole"
    # disaggregated serving: trtllm-serve on hosts, Dynamo on Kubernetes (K162)
    if shape == "disaggregated" and (target == "engine" or (k8s and runtime != "dynamo")):
        shape = "group"
    host = _host(c, s, gpu, k8s)
    hosts = {"h": host}
    serving = _serving(c, target, serving_runtime)
    if shape == "whole":
        host["gpus"] = [{"index": 0, "serves": "m"}]
    elif shape == "group":
        p = _parallelism(c, m["architecture"], s, target)
        if p:
            m["parallelism"] = p
        width = p.get("tp", 1) * p.get("pp", 1)
        host["gpus"] = [{"index": list(range(width)) if width > 1 else 0, "serves": "m"}]
    elif shape == "mig":
        instances = [{"profile": c.pick(s.mig[gpu]), "serves": "m"}]
        if _bool(c):
            instances.append({"profile": c.pick([instances[0]["profile"], *s.mig[gpu]]), "serves": "m"})
        host["gpus"] = [{"index": c.pick([0, [0, 1]]), "mig": instances}]
    else:
        serving = _disaggregated(c, s, m, host, hosts)
    if serving:
        m["serving"] = serving
    if runtime != "dynamo":
        # the llmapi target needs the PyTorch backend's LLM API of 1.2 on (K805)
        version, tag = c.pick([vt for vt in s.toolchains if target == "engine" or vt[0].startswith("1.2")])
        toolchain["tensorrt_llm"] = version
        toolchain["triton_image"] = IMAGE.replace("26.04-", tag + "-")
    _model_options(c, m, shape, runtime, dynamo, hosts)
    models = {"m": m}
    if shape != "disaggregated" and _bool(c):  # a second model on a GPU of its own, on its own ports
        ports = {"http": 8100, "grpc": 8101, "metrics": 8102}
        if serving_runtime != "triton":  # trtllm-serve listens on http alone (K812)
            ports = {"runtime": serving_runtime, "ports": {"http": 8100}}
        else:
            ports = {"ports": ports}
        models["m2"] = {"source": {"path": checkpoint(s.models[0])}, "architecture": s.models[0], "limits": dict(LIMITS[0]),
                        "serving": ports}
        host["gpus"].append({"index": 7, "serves": "m2"})
    spec: dict[str, Any] = {"kiln": "v1", "name": "walk"}
    if target != "llmapi":
        spec["target"] = target
    spec["toolchain"] = toolchain
    spec["models"] = models
    spec["hosts"] = hosts
    if k8s:
        kube: dict[str, Any] = {}
        if runtime == "dynamo":
            kube = {"runtime": "dynamo", "dynamo": {"version": dynamo[0]}}
        if _bool(c):
            kube["relayout_image"] = "docker.io/bitnami/kubectl:1.34" + DIGEST
        _kubernetes_options(c, kube, host)
        spec["kubernetes"] = kube
    if k8s or _bool(c):
        image: dict[str, Any] = {"repository": "registry.example.com/walk"}
        if runtime == "dynamo":
            image["base"] = f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{dynamo[0]}{DIGEST}"
        spec["image"] = image
    return spec


def dump(spec: dict) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = None
    yaml.width = 120
    buf = io.StringIO()
    yaml.dump(spec, buf)
    return buf.getvalue()


# --- where the specs live ---------------------------------------------------------------------------

def checkpoint(arch: str) -> str:
    """Where the workspace keeps a local checkpoint of catalog model `arch` (its config.json only)."""
    return f"models/{arch}"


def hf_config(arch) -> dict[str, Any]:
    """A Hugging Face config.json of a catalog architecture's shape (what K918 compares with the
    catalog: layers, hidden size, heads, KV heads, vocabulary, experts); no weights."""
    config: dict[str, Any] = {
        "model_type": "mixtral" if arch.experts else "llama",
        "architectures": [arch.hf_architecture or "LlamaForCausalLM"],
        "num_hidden_layers": arch.layers, "hidden_size": arch.hidden, "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads, "head_dim": arch.head_dim, "intermediate_size": arch.intermediate,
        "vocab_size": arch.vocab, "max_position_embeddings": arch.max_position,
        "tie_word_embeddings": arch.tied_embeddings, "torch_dtype": "bfloat16"}
    if arch.experts:
        config.update(num_local_experts=arch.experts, num_experts_per_tok=arch.experts_per_token,
                      moe_intermediate_size=arch.moe_intermediate or arch.intermediate)
    return config


def workspace(root: Path) -> Path:
    """A spec directory with what generated specs name: the quickstart's model files (config and
    tokenizer: no weights, nothing reads them without a GPU), calibration and evaluation data, a git
    marker so that the store and the lock stay inside it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ".git").mkdir(exist_ok=True)
    model = root / "model"
    model.mkdir(exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(ROOT / "examples" / "quickstart" / "model" / name, model / name)
    from compiler.catalog import load_model_catalog

    catalog = load_model_catalog()
    for name in catalog.names:  # a checkpoint of each catalog model's shape, so the spec's `architecture` is its own
        own = root / checkpoint(name)
        own.mkdir(parents=True, exist_ok=True)
        (own / "config.json").write_text(json.dumps(hf_config(catalog.get(name)), indent=1), encoding="utf-8")
        for tokenizer in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(model / tokenizer, own / tokenizer)
    shutil.copyfile(ROOT / "examples" / "quickstart" / "data" / "calib-prose.jsonl", root / "calib.jsonl")
    shutil.copyfile(ROOT / "examples" / "quickstart" / "data" / "eval-prose.jsonl", root / "eval.jsonl")
    return root


# --- the property -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    status: str  # "refused" (validate said no), "built" (everything held), "failed" (the property broke)
    cause: str = ""  # for a failure: what broke, without the numbers that differ between specs
    detail: str = ""
    codes: tuple[str, ...] = ()  # for a refusal: the error codes
    artifacts: int = 0  # files checked


def _cause(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else text
    return re.sub(r"\d+", "N", first)[:120]


PREFLIGHT = ("engine", "model-source")


def walk_one(text: str, spec_dir: Path, store_root: Path, check: bool = True, quantize: bool = False) -> Outcome:
    """validate -> build (no torch, GPU, Docker or network) -> the deferred actions' preflights ->
    Kubernetes tree -> each file's checks. `quantize` adds the quantize action's preflight (the
    ModelOpt configuration built from the pinned ModelOpt's named configs: ModelOpt's import costs
    seconds once, so the benchmark asks for it and the test leaves it to test_format_walk.py)."""
    from compiler.build import build_spec
    from compiler.graph.builder import Builder
    from compiler.pipeline import validate_text
    from compiler.store.local import LocalStore
    from compiler.targets.registry import REGISTRY

    try:
        result = validate_text(text, spec_dir)
    except Exception as e:  # noqa: BLE001 - a crash is an outcome of the walk, reported with its cause
        return Outcome("failed", "validate raised " + _cause(f"{type(e).__name__}: {e}"), repr(e))
    if not result.ok:
        return Outcome("refused", codes=tuple(sorted({d.code for d in result.diagnostics if d.is_error})))
    spec = spec_dir / "kiln.yaml"
    spec.write_text(text, encoding="utf-8")
    store = LocalStore(store_root)
    try:
        outcome = build_spec(spec, store, builder=Builder(fixed=frozenset()))
    except Exception as e:  # noqa: BLE001
        return Outcome("failed", "build raised " + _cause(f"{type(e).__name__}: {e}"), repr(e))
    if not outcome.validation.ok:
        return Outcome("failed", "build's validation differs from validate's")
    if outcome.failed:
        r = sorted(outcome.failed, key=lambda r: r.id)[0]
        kind = outcome.graph.actions[r.id].kind
        return Outcome("failed", f"build {kind}: " + _cause(r.error or r.status), f"{r.id}: {r.error}")
    for r in sorted(outcome.deferred, key=lambda r: r.id):
        # what a deferred action refuses before it touches a model (the engine's trtllm-build and
        # quantize.py flags against trtllm_cli.json); the quantize preflight imports ModelOpt and is
        # tests/test_format_walk.py's
        action = outcome.graph.actions[r.id]
        if action.kind in PREFLIGHT or (quantize and action.kind == "quantize"):
            try:
                REGISTRY[action.kind].preflight(action.params)
            except Exception as e:  # noqa: BLE001
                return Outcome("failed", f"preflight {action.kind}: " + _cause(f"{type(e).__name__}: {e}"),
                               f"{r.id}: {e}")
    if not check:
        return Outcome("built")
    files: dict[str, dict[str, bytes]] = {}
    for aid, r in outcome.results.items():
        if r.tree:
            files[aid] = {e.path: store.read_bytes(e.digest) for e in store.tree(r.tree)}
    if any(a.kind == "k8s-release" for a in outcome.graph.actions.values()):
        from tests.k8s_tree import render, tree_files

        with tempfile.TemporaryDirectory(prefix="kiln-walk-k8s-") as work:
            try:
                files["k8s-release"] = tree_files(render(outcome.graph, Path(work)))
            except Exception as e:  # noqa: BLE001
                return Outcome("failed", "k8s render raised " + _cause(f"{type(e).__name__}: {e}"), repr(e))
    checked = 0
    for aid, tree in sorted(files.items()):
        kind = outcome.graph.actions[aid].kind if aid in outcome.graph.actions else aid
        for problem in artifact_problems(kind, tree, result):
            return Outcome("failed", f"{kind} rejected: " + _cause(problem), f"{aid}: {problem}",
                           artifacts=checked)
        checked += len(tree)
    return Outcome("built", artifacts=checked)


# --- each file's consumer -----------------------------------------------------------------------------

def _yaml(data: bytes) -> Any:
    return YAML(typ="safe", pure=True).load(data.decode("utf-8"))


def _llmapi_problems(opts: Any, where: str, version: str) -> list[str]:
    """The LLM-API options against the pinned TensorRT-LLM's fields (compiler/actions/data/
    trtllm_llmapi.json, the 1.2 line): names, types, choices, nested configs."""
    if not version.startswith("1.2"):
        return []  # the table is the 1.2 line's; Dynamo's releases pin 1.3/1.4 (their own check is K851)
    from tests.test_llmapi_options import FIELDS, check

    if not isinstance(opts, dict):
        return [f"{where}: not a mapping"]
    try:
        check(FIELDS, opts, f"{where}: ")
    except AssertionError as e:
        return [f"{where}: LLM-API option refused: {e}"]
    return []


def _shell_problems(path: str, data: bytes) -> list[str]:
    return [f"{path}: {p}" for p in _shell_verdict(data)]


@functools.lru_cache(maxsize=4096)  # scripts repeat across specs; shellcheck takes a good part of a second
def _shell_verdict(data: bytes) -> tuple[str, ...]:
    shell = "sh" if data.startswith(b"#!/bin/sh") else "bash"
    with tempfile.NamedTemporaryFile(suffix=".sh") as f:
        f.write(data)
        f.flush()
        proc = subprocess.run([shell, "-n", f.name], capture_output=True, text=True)
        if proc.returncode:
            return (f"{shell} -n: {proc.stderr.strip().replace(f.name, 'script')}",)
        if shutil.which("shellcheck"):
            proc = subprocess.run(["shellcheck", "--severity=style", f"--shell={shell}", "--format=gcc", f.name],
                                  capture_output=True, text=True)
            if proc.returncode:
                return ("shellcheck: " + proc.stdout.strip().replace(f.name, "script"),)
    return ()


def _unit_problems(path: str, data: bytes) -> list[str]:
    return [f"{path}: systemd-analyze: {ln}" for ln in _unit_verdict(Path(path).name, data)]


@functools.lru_cache(maxsize=4096)
def _unit_verdict(name: str, data: bytes) -> tuple[str, ...]:
    """systemd's own parser on the unit (`systemd-analyze verify`), where it runs: a unit file
    whose ExecStart names a script that is not on this machine is judged on its syntax alone."""
    if not shutil.which("systemd-analyze"):
        return ()
    with tempfile.TemporaryDirectory() as d:
        unit = Path(d) / name
        unit.write_bytes(data)
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines()
             if ln.strip() and "is not executable" not in ln and "No such file" not in ln
             and "Command " not in ln and "Failed to" not in ln and "System has not been booted" not in ln
             and "Unit configuration has fatal error" not in ln]
    return tuple(ln for ln in lines if "Unknown key" in ln or "Unknown section" in ln
            or "Invalid" in ln or "Missing" in ln or "parse" in ln.lower())


def _k8s_problems(tree: dict[str, bytes]) -> list[str]:
    """Core objects with kubernetes-validate, the DGD against its v1beta1 shape (each podTemplate a
    core PodTemplate), the ClusterPolicy patch against the GPU Operator's CRD, the mig-parted config
    with mig-parted's rules, the node scripts with sh and shellcheck (tests/test_k8s.py's checks)."""
    import kubernetes_validate

    from compiler.targets.kubernetes import nodelayer
    from tests.test_k8s import _pod_template, _shape, _validate_core

    problems: list[str] = []
    for path, data in sorted(tree.items()):
        if path.endswith(".sh"):
            problems += _shell_problems(path, data)
            continue
        if not path.endswith((".yaml", ".yml")):
            continue
        docs = [d for d in YAML(typ="safe", pure=True).load_all(data.decode("utf-8")) if d]
        for obj in docs:
            if path.endswith("clusterpolicy-patch.yaml"):
                errors = list(_patch_validator().iter_errors(obj))
                problems += [f"{path}: ClusterPolicy CRD: {e.message}" for e in errors]
                continue
            if not isinstance(obj, dict) or "apiVersion" not in obj:
                continue
            try:
                if obj["apiVersion"] in ("v1", "apps/v1", "policy/v1", "batch/v1", "rbac.authorization.k8s.io/v1"):
                    _validate_core(obj)
                elif obj.get("kind") == "DynamoGraphDeployment":
                    errors = list(_shape().iter_errors(obj))
                    problems += [f"{path}: DGD v1beta1: {e.message}" for e in errors]
                    for comp in obj["spec"].get("components", []):
                        _validate_core(_pod_template(comp["podTemplate"]))
            except kubernetes_validate.ValidationError as e:
                problems.append(f"{path}: {obj.get('kind')}: {e}")
            if obj.get("kind") == "ConfigMap" and "config.yaml" in obj.get("data", {}) and "mig" in path:
                problems += [f"{path}: mig-parted: {p}"
                             for p in nodelayer.mig_parted_problems(_yaml(obj["data"]["config.yaml"].encode()))]
    return problems


@functools.lru_cache(maxsize=1)
def _patch_validator():
    import jsonschema

    from tests.test_k8s import _patch_schema

    return jsonschema.Draft7Validator(_patch_schema())


def artifact_problems(kind: str, tree: dict[str, bytes], result) -> list[str]:
    """What the consumers of one action's files would refuse in them."""
    version = result.spec.toolchain.tensorrt_llm
    problems: list[str] = []
    if kind == "k8s-release":
        return _k8s_problems(tree)
    for path, data in sorted(tree.items()):
        if path.endswith(".json"):
            try:
                json.loads(data)
            except ValueError as e:
                problems.append(f"{path}: not JSON: {e}")
        elif path.endswith(".sh"):
            problems += _shell_problems(path, data)
        elif path.endswith(".service"):
            problems += _unit_problems(path, data)
        elif path.endswith("llm-api-options.yaml") or (kind == "triton-repo" and path.endswith("/1/model.yaml")):
            problems += _llmapi_problems(_yaml(data), path, version)
        elif path.endswith("disagg-config.yaml"):
            problems += _server_config_problems(_yaml(data), path)
        elif path.endswith("mig-parted.yaml"):
            from compiler.targets.kubernetes import nodelayer

            problems += [f"{path}: mig-parted: {p}" for p in nodelayer.mig_parted_problems(_yaml(data))]
    if kind == "triton-repo":
        from compiler.serving import rules

        problems += [f"Triton: {p}" for p in rules.check_repository(tree)]
    return problems


def _server_config_problems(config: Any, where: str) -> list[str]:
    """`trtllm-serve disaggregated -c`: only the keys its parser reads, one url per instance."""
    keys = disagg_facts.server_config_keys()
    problems = [f"{where}: unknown key {k}" for k in set(config) - keys["top_level"]]
    for section in ("context_servers", "generation_servers"):
        servers = config.get(section) or {}
        problems += [f"{where}: {section}: unknown key {k}" for k in set(servers) - keys["servers"]]
        if len(servers.get("urls", [])) != servers.get("num_instances"):
            problems.append(f"{where}: {section}: urls do not match num_instances")
        router = servers.get("router")
        if router is not None and (set(router) - keys["router"] or router.get("type") not in keys["router_types"]):
            problems.append(f"{where}: {section}: router {router}")
    return problems


# --- shrinking --------------------------------------------------------------------------------------------

def shrink(trace: dict, fails: Callable[[dict], bool], budget: int = 300) -> dict:
    """The trace lowered decision by decision (to the first, simplest option, else one lower) while
    the spec it makes still fails the same way: greedy passes over the decisions until none can be
    lowered or `budget` specs were tried."""
    best = dict(trace)
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        for key in sorted(best, key=str):
            for lower in sorted({0, best.get(key, 0) - 1}):
                if tries >= budget or key not in best or not 0 <= lower < best[key]:
                    continue
                tries += 1
                c = ReplayChooser({**best, key: lower})
                if fails(generate(c)):
                    best = c.trace
                    changed = True
                    break
    return best
