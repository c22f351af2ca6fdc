"""Spec v1: the typed form of `kiln.yaml`.

Field docstrings are the documentation: they flow into the JSON Schema (`kiln schema`) and from
there into editors. Names follow TensorRT-LLM and nvidia-smi where those have a name for the thing.
Only checks local to one section live here; checks against hardware facts live in `compiler.checks`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from compiler.deploy import DEPLOYS
from compiler.deploy import of as deploy_target

from .types import (
    DriverConstraint,
    Digest,
    GitHubRepo,
    GitRefName,
    HfRepo,
    ModuleGlob,
    Name,
    PinnedImage,
    RelPath,
    Repository,
    Revision,
    Version,
    formatted,
    one_or_many,
    scalar_or_list,
    scalar_or_mapping,
    value_error,
)

WeightFormat = Literal[
    "bf16", "fp16", "fp8", "fp8_block", "fp8_rowwise", "mxfp8", "nvfp4", "mxfp4", "int8", "int4_awq", "int4_gptq"
]
ActivationFormat = Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4", "int8"]
KvCacheFormat = Literal["auto", "bf16", "fp16", "fp8", "int8", "nvfp4"]
UNQUANTIZED: frozenset[str] = frozenset({"bf16", "fp16"})


def _unset(value: object) -> bool:
    """Fields added after a release leave the dump (and so spec_digest) of a spec that does not use
    them as it was: a new feature must not change the digest every deployed object carries."""
    return value is None


class SpecModel(BaseModel):
    # strict: YAML already has types; "4" is not 4. forbid: no key is ever silently ignored.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False,
                              use_attribute_docstrings=True, validate_default=False)


# --- toolchain --------------------------------------------------------------------------------

class Toolchain(SpecModel):
    """Pinned versions of the tools that produce and serve the artifacts. Every pin enters the
    content key of the artifacts that depend on it."""

    tensorrt_llm: Version
    """TensorRT-LLM version used to build and serve, e.g. "1.2.1". The `engine` target needs <= 1.2.x."""

    triton_image: PinnedImage
    """Triton server image with the TensorRT-LLM backend, pinned by digest
    (nvcr.io/nvidia/tritonserver:<tag>@sha256:<digest>)."""

    modelopt: Version | None = None
    """NVIDIA ModelOpt version used for post-training quantization (required when a model is quantized)."""


# --- models -----------------------------------------------------------------------------------

class Source(SpecModel):
    """Where the model's weights come from: a Hugging Face repository pinned to a commit, or a local path."""

    huggingface: HfRepo | None = None
    """Hugging Face repository id (owner/name)."""

    revision: Revision | None = None
    """Full commit id of the Hugging Face repository (required with `huggingface`)."""

    path: RelPath | None = None
    """Local directory with config.json, tokenizer and safetensors weights, relative to the spec file."""

    digest: Digest | None = None
    """Expected digest of the weights directory of a `huggingface` source; lets an offline build verify a
    local copy."""

    @model_validator(mode="after")
    def _one_source(self) -> "Source":
        if (self.huggingface is None) == (self.path is None):
            raise value_error("a model source needs exactly one of `huggingface` or `path`",
                              help="source: {huggingface: owner/name, revision: <commit>} or source: {path: models/x}")
        if self.huggingface is not None and self.revision is None:
            raise value_error("`huggingface` sources must be pinned with `revision`",
                              help="add `revision: <40-hex commit id>`; branches move, commits do not")
        if self.path is not None and self.revision is not None:
            raise value_error("`revision` applies only to `huggingface` sources", key="revision")
        if self.path is not None and self.digest is not None:
            # a local directory's files enter the artifacts' keys one by one: nothing would check the digest
            raise value_error("`digest` applies only to `huggingface` sources (it verifies a local copy of the "
                              "repository); the files under `path` enter the artifacts' keys themselves",
                              key="digest", help="remove `digest`")
        return self


class ArchitectureFile(SpecModel):
    """Read the architecture from a Hugging Face config.json."""

    config: RelPath
    """Path of the model's config.json, relative to the spec file."""


class Override(SpecModel):
    """Quantization settings for the modules whose names match a pattern (last match wins)."""

    match: ModuleGlob
    """Glob over module names, e.g. "*mlp.gate" (MoE routers) or "model.layers.0.*"."""

    weights: WeightFormat | None = None
    """Weight format for the matched modules; bf16/fp16 keep them unquantized."""

    block_size: Annotated[int, Field(ge=8, le=512)] | None = None
    """Block (group) size for block-scaled formats, e.g. 16 for NVFP4 MoE gates."""

    @model_validator(mode="after")
    def _does_something(self) -> "Override":
        if self.weights is None and self.block_size is None:
            raise value_error("an override must set `weights` or `block_size`",
                              help="without either it would match modules and change nothing")
        return self


class Calibration(SpecModel):
    """Calibration data for post-training quantization. Its digest enters the checkpoint's content key,
    so changing the data rebuilds exactly the checkpoints calibrated on it."""

    data: RelPath
    """Local JSONL (one {"text": ...} per line) or plain-text file, relative to the spec file.
    Use data from the serving domain: code models calibrate on code."""

    samples: Annotated[int, Field(ge=1, le=1_000_000)] = 512
    """Number of calibration samples (ModelOpt/quantize.py default: 512)."""

    max_seq_len: Annotated[int, Field(ge=1, le=1_048_576)] = 512
    """Tokens per calibration sample (quantize.py `--calib_max_seq_length`, default 512)."""

    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 1234
    """Seed for sample selection; fixed so that the same inputs give the same checkpoint."""

    batch_size: Annotated[int, Field(ge=1, le=1024)] = 1
    """Calibration batch size."""


class QualityGate(SpecModel):
    """Accuracy gate: the build evaluates the unquantized and the quantized model and fails when the
    regression is larger than allowed. Both figures go into the release manifest."""

    eval: RelPath
    """Evaluation set (JSONL or text), relative to the spec file."""

    metric: Literal["perplexity", "exact_match"] = "perplexity"
    """Metric: perplexity (lower is better) or exact match on short prompts (higher is better)."""

    max_regression_pct: Annotated[float, Field(gt=0, le=100)]
    """Largest allowed regression, in percent of the unquantized figure."""

    samples: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Evaluate on the first N samples only (default: all)."""


class Quantization(SpecModel):
    """Post-training quantization with NVIDIA ModelOpt. Leaving `weights` at bf16/fp16 means no quantization."""

    weights: WeightFormat = "bf16"
    """Weight format: bf16/fp16 (unquantized), fp8 (per-tensor), fp8_block, fp8_rowwise, mxfp8, nvfp4,
    mxfp4, int8 (SmoothQuant with int8 activations, or weight-only), int4_awq, int4_gptq."""

    activations: ActivationFormat | None = None
    """Activation format. Default follows the weights (fp8 -> fp8, nvfp4 -> nvfp4, int4_awq -> bf16 i.e. W4A16).
    int4_awq with fp8 activations is W4A8 AWQ; int8 with int8 activations is SmoothQuant."""

    kv_cache: KvCacheFormat = "auto"
    """KV-cache format: auto (the model dtype), fp8, int8 or nvfp4 (nvfp4 requires a quality gate)."""

    block_size: Annotated[int, Field(ge=8, le=512)] | None = None
    """Block (group) size for block-scaled and group-wise formats (nvfp4: 16, int4_awq: 128 by default)."""

    exclude: list[ModuleGlob] = Field(default_factory=lambda: ["lm_head"])
    """Module-name patterns kept unquantized (default: lm_head, as ModelOpt does)."""

    overrides: list[Override] = Field(default_factory=list)
    """Per-module settings by name pattern, applied in order (last match wins)."""

    calibration: Calibration | None = None
    """Calibration data; required for formats that need activation statistics (fp8, nvfp4, int8, AWQ, ...)."""

    quality_gate: QualityGate | None = None
    """Accuracy gate on the quantized checkpoint."""

    @property
    def quantized(self) -> bool:
        return self.weights not in UNQUANTIZED or self.kv_cache not in ("auto", "bf16", "fp16")


class Parallelism(SpecModel):
    """How one serving unit splits the model across GPUs."""

    tp: Annotated[int, Field(ge=1, le=64)] = 1
    """Tensor parallelism (TensorRT-LLM tensor_parallel_size). Must equal the GPUs of the assignment / pp."""

    pp: Annotated[int, Field(ge=1, le=64)] = 1
    """Pipeline parallelism (pipeline_parallel_size)."""

    ep: Annotated[int, Field(ge=1, le=256)] = 1
    """Expert parallelism for MoE models (moe_expert_parallel_size); must divide tp."""

    attention_dp: bool = False
    """Attention data parallelism (enable_attention_dp, llmapi target): each of the tp ranks runs
    attention for its own requests with a full copy of the attention weights and its own KV cache,
    while the routed experts stay split over the ranks. For MoE models with tp > 1 (DeepSeek-style);
    max_batch_size then applies per rank."""


class MeasuredLimit(SpecModel):
    """A limit measured by `kiln tune` rather than written down: the largest concurrency at which the
    serving unit met the model's `sla`, rounded down to a CUDA-graph batch size."""

    measured: RelPath
    """The measurement record `kiln tune` wrote (e.g. tune/dev-h100.gpu0.mig0.json), relative to the
    spec file. Commit it with the spec: its digest enters the keys of the artifacts that read the limit."""


_BATCH_DOC = ("Largest number of sequences scheduled together: a number, or {measured: tune/<unit>.json}, "
              "the concurrency `kiln tune` measured under the model's sla, rounded down to a CUDA-graph "
              "batch size.")


class Limits(SpecModel):
    """Build-time limits. For the engine target they are baked into the engine; for llmapi they go to
    the LLM-API options. Kiln's defaults are explicit (TensorRT-LLM's own max_batch_size default is 2048)."""

    max_batch_size: scalar_or_mapping(Annotated[int, Field(ge=1, le=65536)],  # type: ignore[valid-type]
                                      MeasuredLimit, description=_BATCH_DOC) = Field(default=64,
                                                                                     description=_BATCH_DOC)

    max_input_len: Annotated[int, Field(ge=1, le=4_194_304)] = 1024
    """Longest prompt in tokens."""

    max_seq_len: Annotated[int, Field(ge=1, le=4_194_304)] = 2048
    """Longest sequence (prompt + output) in tokens; the KV cache is sized for it."""

    max_num_tokens: Annotated[int, Field(ge=1, le=4_194_304)] = 8192
    """Most tokens in one forward pass (TensorRT-LLM default 8192)."""

    max_beam_width: Annotated[int, Field(ge=1, le=64)] = 1
    """Beam width; 1 disables beam search."""

    @model_validator(mode="after")
    def _consistent(self) -> "Limits":
        if self.max_input_len > self.max_seq_len:
            raise value_error(f"max_input_len ({self.max_input_len}) is larger than max_seq_len ({self.max_seq_len})",
                              help="max_seq_len counts prompt and output tokens; raise it or lower max_input_len",
                              key="max_input_len")
        return self


TokenCount = Annotated[int, Field(ge=1, le=4_194_304)]


class TokenShare(SpecModel):
    """A share of the requests that have one token count."""

    tokens: TokenCount
    """Tokens of these requests."""

    share: Annotated[float, Field(gt=0, le=1)]
    """Fraction of all requests (the shares of one list add up to 1)."""


class Workload(SpecModel):
    """The requests a model serves, for the capacity planner: prompt and output lengths, each as an
    average or as a distribution. With it, the decode bound charges each step the mean context a
    sequence really has (and the KV cache holds as many sequences as that traffic needs) instead of
    a full max_seq_len per sequence."""

    input_tokens: scalar_or_list(TokenCount, TokenShare,  # type: ignore[valid-type]
                                 description="Prompt tokens per request: an average, or a list of "
                                             "{tokens, share} that add up to 1.")
    output_tokens: scalar_or_list(TokenCount, TokenShare,  # type: ignore[valid-type]
                                  description="Generated tokens per request: an average, or a list of "
                                              "{tokens, share} that add up to 1.")

    requests_per_second: Annotated[float, Field(gt=0, le=1_000_000)] | None = Field(default=None, exclude_if=_unset)
    """Declared arrival rate of requests to the model, all replicas together; with an `sla`, the
    capacity check of disaggregated serving sizes the prefill and decode roles for it (K462)."""

    @model_validator(mode="after")
    def _shares(self) -> "Workload":
        for key in ("input_tokens", "output_tokens"):
            value = getattr(self, key)
            if isinstance(value, list) and abs(sum(b.share for b in value) - 1.0) > 1e-6:
                total = sum(b.share for b in value)
                raise value_error(f"the shares of {key} add up to {total:g}, not 1",
                                  help="give each share as a fraction of all requests", key=key)
        return self


class Sla(SpecModel):
    """Service-level targets for one model: what `kiln tune` holds a serving unit to while it searches
    for the largest concurrency (and so the batch limit) that still meets them. Latencies are client
    side, as AIPerf measures them against the unit's OpenAI-compatible endpoint."""

    ttft_ms: Annotated[float, Field(gt=0, le=3_600_000)] | None = None
    """Time to first token, in milliseconds, at `percentile`."""

    tpot_ms: Annotated[float, Field(gt=0, le=3_600_000)] | None = None
    """Time per output token (inter-token latency), in milliseconds, at `percentile`."""

    percentile: Literal["p50", "p90", "p95", "p99"] = "p99"
    """The statistic both latency targets apply to (p99: 99 of 100 tokens or requests meet them)."""

    max_error_rate: Annotated[float, Field(gt=0, lt=1)] = 0.01
    """Largest fraction of failed requests (rejections by admission control included)."""

    @model_validator(mode="after")
    def _a_target(self) -> "Sla":
        if self.ttft_ms is None and self.tpot_ms is None:
            raise value_error("an sla needs `ttft_ms`, `tpot_ms` or both",
                              help="e.g. sla: {ttft_ms: 500, tpot_ms: 30, percentile: p99}")
        return self


class Kernels(SpecModel):
    """Kernel choices. Names are validated here because TensorRT-LLM silently replaces unknown ones."""

    attention: Literal["trtllm", "vanilla", "flashinfer", "flashinfer_star_attention"] = "trtllm"
    """Attention backend (TorchLlmArgs.attn_backend)."""

    fp8_context_fmha: bool | None = None
    """FP8 context-phase fused attention; applies only to fp8, w4a8 and nvfp4 checkpoints."""

    moe: Literal["cutlass", "cutedsl", "wideep", "trtllm", "deepgemm", "vanilla", "triton"] | None = None
    """MoE kernel backend (MoeConfig.backend); only for MoE models. Default: cutlass."""


class Runtime(SpecModel):
    """Runtime options passed to the LLM API."""

    kv_cache_memory_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9
    """Fraction of the GPU memory left after weights and activations that the KV cache takes
    (KvCacheConfig.free_gpu_memory_fraction, default 0.9)."""

    scheduler: Literal["guaranteed_no_evict", "max_utilization", "static_batch"] = "guaranteed_no_evict"
    """Capacity scheduler policy."""

    chunked_prefill: bool = False
    """Split long prompts into chunks of max_num_tokens (enable_chunked_prefill)."""

    block_reuse: bool = True
    """Reuse KV-cache blocks across requests with a shared prefix (KvCacheConfig.enable_block_reuse)."""

    tokens_per_block: Literal[8, 16, 32, 64, 128] = 32
    """Tokens per KV-cache page."""

    cuda_graph_batch_sizes: list[Annotated[int, Field(ge=1, le=65536)]] | None = None
    """Batch sizes captured as CUDA graphs (CudaGraphConfig.batch_sizes); each must be <= max_batch_size.
    Unset: no CUDA graphs (the options file says `cuda_graph_config: null`; engines run with cuda_graph_mode off)."""

    @model_validator(mode="after")
    def _graphs(self) -> "Runtime":
        sizes = self.cuda_graph_batch_sizes
        if sizes is not None and len(set(sizes)) != len(sizes):
            raise value_error("cuda_graph_batch_sizes lists a size twice", key="cuda_graph_batch_sizes")
        return self


class Ports(SpecModel):
    """Ports of a serving container (host network). Triton listens on all three; trtllm-serve on
    `http` only (its /metrics is on that port too)."""

    http: Annotated[int, Field(ge=1, le=65535)] = 8000
    """HTTP/REST port."""

    grpc: Annotated[int, Field(ge=1, le=65535)] = 8001
    """gRPC port."""

    metrics: Annotated[int, Field(ge=1, le=65535)] = 8002
    """Prometheus metrics port."""

    @model_validator(mode="after")
    def _distinct(self) -> "Ports":
        if len({self.http, self.grpc, self.metrics}) != 3:
            raise value_error("http, grpc and metrics ports must differ")
        return self


# --- disaggregated serving -------------------------------------------------------------------

Role = Literal["prefill", "decode"]
#: The transports of KV-cache transfer, spelled as the pinned TensorRT-LLM spells them (checked by
#: K861/K862 against catalog/data/disaggregated.json, since the spelling changed between releases).
TransportName = formatted(r"[A-Za-z][A-Za-z0-9_]{0,31}", "a KV-transfer backend name as TensorRT-LLM spells it",
                          "UCX")
UcxTransport = formatted(r"\^?[a-z][a-z0-9_]{0,31}", "a UCX transport name (UCX_TLS entry)", "cuda_ipc")
# a Linux network interface name (IFNAMSIZ 16, so at most 15 characters)
NetInterface = formatted(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}", "a network interface name", "eth0")
UcxDevice = formatted(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", "a UCX network device (UCX_NET_DEVICES entry)",
                      "mlx5_0:1")


class RoleLimits(SpecModel):
    """Limits of one role's servers that may differ from the model's (`limits`): a prefill server
    schedules few long prompts, a decode server many sequences one token at a time."""

    max_batch_size: Annotated[int, Field(ge=1, le=65536)] | None = None
    """Largest number of sequences one server schedules together (default: the model's)."""

    max_num_tokens: Annotated[int, Field(ge=1, le=4_194_304)] | None = None
    """Most tokens in one forward pass of one server (default: the model's)."""


class RoleRuntime(SpecModel):
    """LLM-API runtime options of one role's servers that may differ from the model's `runtime`.
    Unset fields take the model's value. `tokens_per_block` is the KV-cache page the transfer and
    the router depend on: it must come out equal for both roles (K661); leave it to the model."""

    kv_cache_memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    """KvCacheConfig.free_gpu_memory_fraction of this role's servers."""

    chunked_prefill: bool | None = None
    """enable_chunked_prefill of this role's servers."""

    block_reuse: bool | None = None
    """KvCacheConfig.enable_block_reuse of this role's servers."""

    tokens_per_block: Literal[8, 16, 32, 64, 128] | None = None
    """KvCacheConfig.tokens_per_block; must equal the other role's (K661)."""

    cuda_graph_batch_sizes: list[Annotated[int, Field(ge=1, le=65536)]] | None = None
    """CudaGraphConfig.batch_sizes of this role's servers."""

    overlap_scheduler: bool | None = None
    """Run TensorRT-LLM's overlap scheduler (the inverse of disable_overlap_scheduler). Default: off
    on prefill where the pinned TensorRT-LLM needs it off on context servers, on otherwise (K662)."""


class DisaggRole(SpecModel):
    """One role (prefill or decode) of a disaggregated model: how each of its servers is split over
    GPUs and run. Where its servers run is said in `hosts`: every GPU assignment or MIG instance
    that serves the model names its `role`; each is one server (instance), and a node pool of N
    nodes runs N replicas of it."""

    parallelism: Parallelism = Field(default_factory=Parallelism)
    """Parallelism of one server of this role (tp * pp GPUs each)."""

    limits: RoleLimits = Field(default_factory=RoleLimits)
    """Batch and token limits of this role's servers."""

    runtime: RoleRuntime = Field(default_factory=RoleRuntime)
    """Runtime options of this role's servers."""

    attention: Literal["trtllm", "vanilla", "flashinfer", "flashinfer_star_attention"] | None = None
    """Attention backend of this role's servers (default: the model's `kernels.attention`)."""


class UcxEnvironment(SpecModel):
    """UCX settings of every server's KV transfer (the environment of both roles' containers)."""

    tls: Annotated[list[UcxTransport], Field(min_length=1)] | None = None  # type: ignore[valid-type]
    """UCX_TLS: the transports UCX may use. Must include a CUDA transport (cuda, cuda_copy or
    cuda_ipc) so that GPU memory is moved as GPU memory (K664). Default: UCX's own choice."""

    net_devices: Annotated[list[UcxDevice], Field(min_length=1)] | None = None  # type: ignore[valid-type]
    """UCX_NET_DEVICES: the network devices for KV traffic, e.g. [mlx5_0:1]. Needed when the roles
    run on different hosts (K664). Default: UCX's own choice."""

    interface: NetInterface | None = None  # type: ignore[valid-type]
    """The network interface (e.g. eth0, ib0) whose IPv4 address each server's cache transceiver
    advertises to its peers (TRTLLM_UCX_INTERFACE, and TRTLLM_NIXL_INTERFACE). Needed when the
    roles run on different hosts (K664): left unset, the transceiver takes the first interface it
    finds, which on a `--network host` container may be docker0 or link-local, the same address
    on every node. Default: TensorRT-LLM's own choice."""


class KvTransfer(SpecModel):
    """How the KV cache moves from prefill to decode servers: one setting for both roles, written
    into both roles' LLM-API `cache_transceiver_config`."""

    backend: TransportName = "DEFAULT"  # type: ignore[valid-type]
    """cache_transceiver_config.backend, spelled as the pinned TensorRT-LLM spells it (1.2: DEFAULT,
    UCX, NIXL or MPI; K861/K862). DEFAULT is the release's default transport."""

    max_tokens_in_buffer: Annotated[int, Field(ge=1, le=4_194_304)] | None = None
    """cache_transceiver_config.max_tokens_in_buffer: tokens the transfer buffer holds; at least the
    longest prompt (K461). Default: the model's limits.max_input_len."""

    timeout_ms: Annotated[int, Field(ge=1, le=3_600_000)] | None = None
    """cache_transceiver_config.kv_transfer_timeout_ms: a request whose KV cache is not sent or
    received in this time is cancelled. Default: TensorRT-LLM's."""

    ucx: UcxEnvironment | None = None
    """UCX environment of the servers."""


class DisaggRouter(SpecModel):
    """The server that takes requests and sends each to a prefill and then a decode server: on hosts
    `trtllm-serve disaggregated`, listening on the model's `serving.ports.http` (the servers take
    the ports after it); on Kubernetes Dynamo's frontend. Its KV block size is always the
    workers' tokens_per_block (never set here)."""

    kv_aware: bool = True
    """Route by KV-cache prefix overlap (trtllm-serve: router type kv_cache_aware; Dynamo:
    --router-mode kv) instead of round robin."""

    host: Name | None = None  # type: ignore[valid-type]
    """The host (under `hosts`, `deploy: host`) the router runs on. Default: the first host, in
    spec order, that runs a server of the model."""


class DisaggPlanner(SpecModel):
    """Dynamo's planner: a component of the model's DynamoGraphDeployment that scales the prefill
    and decode workers against the model's `sla` (ttft_ms and tpot_ms, its itl). Kubernetes with
    `runtime: dynamo` only (K162)."""

    image: PinnedImage
    """The planner's image, pinned by digest: Dynamo's `dynamo-planner:<version>` (from Dynamo 1.1
    the backend runtime images no longer carry the planner's dependencies)."""

    min_replicas: Annotated[int, Field(ge=1, le=10000)] = 1
    """Fewest workers the planner keeps of each role (its min_endpoint)."""

    max_gpus: Annotated[int, Field(ge=1, le=100000)] | None = None
    """Most GPUs the planner may give both roles together (its max_gpu_budget). Default: no limit
    but the node pools'."""

    adjustment_interval_s: Annotated[int, Field(ge=1, le=86400)] | None = None
    """Seconds between the planner's throughput-based scaling decisions
    (throughput_adjustment_interval_seconds). Default: Dynamo's."""


class Disaggregated(SpecModel):
    """Disaggregated serving: prefill (context) servers compute the prompt's KV cache and send it to
    decode (generation) servers, which generate the tokens; a router in front does both steps.
    The model's quantization, KV-cache format and checkpoint are the same for both roles."""

    prefill: DisaggRole = Field(default_factory=DisaggRole)
    """The prefill (context) servers."""

    decode: DisaggRole = Field(default_factory=DisaggRole)
    """The decode (generation) servers."""

    kv_transfer: KvTransfer = Field(default_factory=KvTransfer)
    """KV-cache transfer between the roles."""

    router: DisaggRouter = Field(default_factory=DisaggRouter)
    """The router in front of both roles."""

    planner: DisaggPlanner | None = None
    """Dynamo's planner (Kubernetes with runtime dynamo only)."""

    def role(self, name: str) -> DisaggRole:
        return self.prefill if name == "prefill" else self.decode


class Serving(SpecModel):
    """How the model is served: the runtime, its ports, and Triton's own queue (build-time limits
    live in `limits`)."""

    runtime: Literal["triton", "trtllm-serve"] = "triton"
    """Serving runtime of each unit: triton (Triton Inference Server with the target's model
    repository) or trtllm-serve (TensorRT-LLM's OpenAI-compatible HTTP server, llmapi target only).
    Both read the same LLM-API options file. The queue, batching-delay, instance and streaming
    settings below are Triton's and cannot be set with trtllm-serve (K812)."""

    max_queue_delay_us: Annotated[int, Field(ge=0, le=60_000_000)] = 0
    """How long Triton's dynamic batcher may hold a request to form a batch (microseconds). Engine
    target only: the llmapi model has no dynamic batcher (K613)."""

    max_queue_size: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Admission control: requests beyond this many queued are rejected at once (default: unbounded)."""

    queue_timeout_ms: Annotated[int, Field(ge=1, le=3_600_000)] | None = None
    """Admission control: a request queued longer than this is rejected instead of waiting on."""

    streaming: bool = False
    """Stream tokens as they are generated (Triton's decoupled transaction policy; with trtllm-serve
    each request asks for streaming itself)."""

    stream_text: Literal["cumulative", "delta"] = "cumulative"
    """What each streamed response's `text_output` holds on the llmapi target's Triton model:
    cumulative (the whole text so far, as TensorRT-LLM's own LLM-API model streams it, so its
    clients work unchanged) or delta (only the text this response adds)."""

    instances: Annotated[int, Field(ge=1, le=64)] = 1
    """Triton model instances per serving unit."""

    ports: Ports = Field(default_factory=Ports)
    """Ports of the serving container."""

    disaggregated: Disaggregated | None = Field(default=None, exclude_if=_unset)
    """Serve the model disaggregated: prefill and decode servers and a router (llmapi target,
    runtime trtllm-serve on hosts or dynamo on Kubernetes). Its GPUs name their `role` in `hosts`."""


_ARCH_DOC = ("Catalog architecture name (see `kiln catalog --models`) or {config: path/to/config.json}. "
             "Default: the config.json in a local source.")


class Model(SpecModel):
    """One model to serve."""

    source: Source
    """Where the weights come from."""

    architecture: scalar_or_mapping(str, ArchitectureFile,  # type: ignore[valid-type]
                                    description=_ARCH_DOC) | None = Field(default=None, description=_ARCH_DOC)

    dtype: Literal["bf16", "fp16"] = "bf16"
    """Compute dtype of the unquantized parts."""

    quantization: Quantization = Field(default_factory=Quantization)
    """Quantization recipe."""

    parallelism: Parallelism = Field(default_factory=Parallelism)
    """Parallelism inside one serving unit."""

    limits: Limits = Field(default_factory=Limits)
    """Build-time limits."""

    kernels: Kernels = Field(default_factory=Kernels)
    """Kernel backends."""

    runtime: Runtime = Field(default_factory=Runtime)
    """Runtime options."""

    serving: Serving = Field(default_factory=Serving)
    """Serving options: runtime, ports, Triton's queue."""

    workload: Workload | None = None
    """The traffic the model serves (prompt and output lengths); sharpens the capacity plan."""

    sla: Sla | None = None
    """Latency targets (TTFT, TPOT) that `kiln tune` measures the batch limit against."""

    def parallelism_of(self, role: str | None) -> Parallelism:
        """The parallelism of one server: its role's under disaggregated serving, else the model's."""
        d = self.serving.disaggregated
        return d.role(role).parallelism if d is not None and role in ("prefill", "decode") else self.parallelism


# --- hosts ------------------------------------------------------------------------------------

class Clocks(SpecModel):
    """Locked clocks (`nvidia-smi -lgc` / `-lmc`) for a physical GPU. Shared by all its MIG instances."""

    graphics_mhz: one_or_many(Annotated[int, Field(ge=1, le=10000)],  # type: ignore[valid-type]
                              description="Locked graphics clock in MHz, or [min, max] for a range.")
    memory_mhz: Annotated[int, Field(ge=1, le=40000)] | None = None
    """Locked memory clock in MHz (Ampere or later)."""


class ApplicationClocks(SpecModel):
    """Application clocks (`nvidia-smi -ac <memory,graphics>`); an alternative to locked clocks."""

    memory_mhz: Annotated[int, Field(ge=1, le=40000)]
    """Memory clock in MHz (given first to nvidia-smi -ac)."""

    graphics_mhz: Annotated[int, Field(ge=1, le=10000)]
    """Graphics clock in MHz."""


class MigInstance(SpecModel):
    """One MIG GPU instance and the model it serves."""

    profile: str
    """GPU-instance profile name as `nvidia-smi mig -lgip` prints it, e.g. 3g.40gb or 1g.10gb+me."""

    serves: Name
    """Name of the model (under `models`) this instance serves."""

    placement: Annotated[int, Field(ge=0, le=7)] | None = None
    """Pin the start slot (`-cgi <id>:<start>`); by default Kiln finds a placement that fits."""

    role: Role | None = Field(default=None, exclude_if=_unset)
    """The role this instance serves for a model with `serving.disaggregated` (prefill or decode)."""


class GpuAssignment(SpecModel):
    """What some GPUs of a host do: serve one model as a whole (a tensor-parallel group when several
    indexes are listed), or be split by MIG (the same layout on each listed GPU)."""

    index: one_or_many(Annotated[int, Field(ge=0, le=63)],  # type: ignore[valid-type]
                       description="GPU index, or a list of indexes (nvidia-smi -i).")
    serves: Name | None = None
    """Model served by these whole GPUs; several indexes form one tensor-parallel group."""

    mig: Annotated[list[MigInstance], Field(min_length=1)] | None = None
    """MIG layout applied to each listed GPU."""

    role: Role | None = Field(default=None, exclude_if=_unset)
    """The role these GPUs serve for a model with `serving.disaggregated` (prefill or decode); each
    entry is one server of that role."""

    clocks: Clocks | None = None
    """Per-GPU clock locks, overriding the host's."""

    power_limit_w: Annotated[int, Field(ge=1, le=5000)] | None = None
    """Per-GPU power limit in watts, overriding the host's."""

    @model_validator(mode="after")
    def _one_role(self) -> "GpuAssignment":
        if (self.serves is None) == (self.mig is None):
            raise value_error("a `gpus` entry needs exactly one of `serves` (whole GPUs) or `mig` (a MIG layout)")
        if self.role is not None and self.serves is None:
            raise value_error("`role` of a MIG layout goes on its instances, next to their `serves`", key="role")
        return self

    @property
    def indexes(self) -> list[int]:
        return list(self.index) if isinstance(self.index, list) else [self.index]


class Host(SpecModel):
    """A GPU server (or a class of identical servers) and what each of its GPUs does."""

    gpu: str
    """GPU model from the catalog, e.g. H100-SXM5-80GB or B200-180GB (see `kiln catalog`)."""

    count: Annotated[int, Field(ge=1, le=64)]
    """Number of GPUs in the host."""

    driver: DriverConstraint | None = None
    """NVIDIA driver constraint, e.g. ">=580.82.07"; checked against the GPU's MIG minimum and at provisioning."""

    persistence: bool = True
    """Enable persistence mode (`nvidia-smi -pm 1`)."""

    clocks: Clocks | None = None
    """Locked clocks applied to every GPU of the host."""

    application_clocks: ApplicationClocks | None = None
    """Application clocks applied to every GPU (instead of locked clocks)."""

    power_limit_w: Annotated[int, Field(ge=1, le=5000)] | None = None
    """Power limit in watts for every GPU (`nvidia-smi -pl`)."""

    price_per_gpu_hour: Annotated[float, Field(ge=0, le=10_000)] | None = None
    """Price of one GPU-hour in your currency; enables cost per million tokens in the capacity report."""

    gpus: list[GpuAssignment] = Field(default_factory=list)
    """Assignments of GPUs to models; GPUs not listed stay idle."""

    deploy: Literal[DEPLOYS] = DEPLOYS[0]
    """How this host is deployed: `host` (Kiln's provisioning script and serving containers) or
    `kubernetes` (a node pool of identical nodes, each with `count` GPUs laid out as `gpus` says:
    GPU Operator MIG layouts and Kubernetes workloads, see the top-level `kubernetes` section)."""

    node_pool: NodePool | None = None
    """The Kubernetes nodes this host stands for (`deploy: kubernetes` only; default: one node
    labelled `kiln.io/pool=<host name>`)."""

    @model_validator(mode="after")
    def _one_clock_kind(self) -> "Host":
        if self.clocks is not None and self.application_clocks is not None:
            raise value_error("set either `clocks` (locked) or `application_clocks`, not both",
                              help="locked clocks override application clocks on the GPU", key="application_clocks")
        if self.node_pool is not None and not deploy_target(self).node_pool:
            raise value_error("`node_pool` applies only to hosts with `deploy: kubernetes`",
                              help="add `deploy: kubernetes`, or remove `node_pool`", key="node_pool")
        return self


# --- Kubernetes -------------------------------------------------------------------------------

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
#: Kubernetes label syntax (apimachinery validation.IsQualifiedName / IsValidLabelValue).
LabelKey = formatted(f"({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}", "a Kubernetes label key ([prefix/]name, the name at "
                     "most 63 characters of letters, digits, '-', '_' and '.')", "node.kubernetes.io/instance-type")
LabelValue = formatted(f"({_LABEL_NAME})?", "a Kubernetes label value (at most 63 characters of letters, digits, "
                       "'-', '_' and '.', starting and ending with a letter or digit)", "p5.48xlarge")
DynamoVersion = formatted(r"(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})",
                          "a Dynamo release as MAJOR.MINOR.PATCH (quote it in YAML)", "1.6.1")
RepoUrl = formatted(r"[^\s]+", "a repository URL without spaces", "https://git.example.com/inference/deploy.git")
KubernetesVersion = formatted(r"1\.(0|[1-9][0-9]{0,2})", "a Kubernetes release as MAJOR.MINOR (quote it in YAML)",
                              "1.35")
#: The Kubernetes release the manifests are written for and validated against unless
#: `kubernetes.version` names the cluster's (compiler/targets/kubernetes/meta.py).
DEFAULT_KUBERNETES_VERSION = "1.35"


class NodePool(SpecModel):
    """The Kubernetes nodes a `deploy: kubernetes` host stands for: identical nodes, each with the
    host's `count` GPUs and its `gpus` layout. A workload gets `nodes` times the host's units of
    its model as replicas."""

    nodes: Annotated[int, Field(ge=1, le=10000)] = 1
    """Number of nodes in the pool."""

    selector: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)] | None = None  # type: ignore[valid-type]
    """Node labels that pick the pool's nodes: the workloads' nodeSelector and the node-label command
    select on them. Default: `{kiln.io/pool: <host name>}` (label the nodes with it)."""

    gpu_product: LabelValue | None = None  # type: ignore[valid-type]
    """GPU Feature Discovery's `nvidia.com/gpu.product` value of the pool's GPUs (e.g.
    NVIDIA-H100-80GB-HBM3); when given, workloads select on it as well (under the `single` MIG
    strategy as GFD rewrites it: `<product>-MIG-<profile>`)."""

    max_unavailable: Annotated[int, Field(ge=1, le=10000)] = 1
    """Nodes of the pool a MIG re-layout takes out of service at once (node-layer/relayout: cordon,
    evict, relabel, wait for the MIG manager, uncordon)."""

    weights: Literal["image-volume", "in-image"] = "image-volume"
    """Where the pool's pods find the checkpoints: `image-volume` (default) mounts each model's
    weights image (`weights-image/<model>`, the checkpoint alone, pushed to `image.repository`) read
    only at the model's directory, so the pool's serving image holds the runtime alone and a weight
    change pulls only that model's weights and rolls only its workloads (Kubernetes image volumes:
    on by default from 1.35, K857); `in-image` copies every checkpoint into the pool's serving
    image, as a host's, for clusters or container runtimes without image volumes."""


class PodResources(SpecModel):
    """CPU and memory of a model's pods, replacing Kiln's estimate from the checkpoint it loads."""

    cpu: Annotated[int, Field(ge=1, le=1024)] | None = None
    """CPU cores requested (the limit is twice this)."""

    memory_gib: Annotated[int, Field(ge=1, le=65536)] | None = None
    """Memory requested, GiB (the limit adds the checkpoint's size once more for the load)."""


class DynamoRuntime(SpecModel):
    """NVIDIA Dynamo on the cluster (runtime `dynamo`)."""

    version: DynamoVersion  # type: ignore[valid-type]
    """Dynamo release of the cluster's operator and of `image.base` (Dynamo's tensorrtllm-runtime
    image, which carries the `dynamo.trtllm` worker), e.g. "1.6.1" (the components'
    `runtimeVersionOverride`, which takes MAJOR.MINOR.PATCH). Each release pins one TensorRT-LLM
    version, which must be `toolchain.tensorrt_llm` (K851)."""

    grove: bool = False
    """The operator runs with Grove and the models' DGDs take it: their workers are PodCliques, which
    Grove rolls 1 pod at a time, the old one deleted before its replacement (maxUnavailable 1, maxSurge
    0), every worker of a model when one changes. Default false, the platform chart's
    `global.grove.enabled`: the operator's managed rolling update, at the surge Kiln chooses where the
    pool has room. Kiln writes `nvidia.com/enable-grove` on each DGD either way, so `false` holds on any
    cluster; `true` needs the operator's Grove enabled. The operator fixes a DGD's pathway when it first
    admits it: a change of this on a live model is refused (K850). A tree from an earlier Kiln wrote
    no annotation: on a cluster with Grove enabled, set this to true before upgrading."""


class ArgoCd(SpecModel):
    """The Argo CD Application that syncs the release's Kustomize tree."""

    repo_url: RepoUrl  # type: ignore[valid-type]
    """Git repository the published tree is committed to (Argo CD `spec.source.repoURL`)."""

    path: RelPath = "."  # type: ignore[valid-type]
    """Directory of the tree in that repository."""

    revision: Annotated[str, Field(min_length=1, max_length=255)] = "HEAD"
    """Branch, tag or commit Argo CD follows (`targetRevision`)."""

    namespace: Name = "argocd"  # type: ignore[valid-type]
    """Namespace Argo CD runs in."""

    project: Name = "default"  # type: ignore[valid-type]
    """Argo CD project of the Application."""


class Kubernetes(SpecModel):
    """The Kubernetes target of the hosts with `deploy: kubernetes` (node pools): NVIDIA GPU Operator
    MIG layouts for the nodes, workloads for the models, a Kustomize tree per release."""

    namespace: Name | None = None  # type: ignore[valid-type]
    """Namespace of the workloads (default: the spec's name)."""

    runtime: Literal["deployment", "dynamo"] = "deployment"
    """Workloads: `deployment` (Deployments, Services and PodDisruptionBudgets running Kiln's serving
    image) or `dynamo` (a DynamoGraphDeployment per model for NVIDIA Dynamo's operator)."""

    mig_strategy: Literal["none", "single", "mixed"] | None = None
    """GPU Operator MIG strategy (ClusterPolicy `spec.mig.strategy`): how MIG devices are advertised.
    Default: the least that serves every pool (`mixed` when a node has several profiles or MIG next
    to whole GPUs, `single` when every GPU of a MIG node has one profile, `none` without MIG)."""

    gpu_operator_namespace: Name = "gpu-operator"  # type: ignore[valid-type]
    """Namespace of the GPU Operator (its MIG manager reads the layout ConfigMap from there)."""

    dynamo: DynamoRuntime | None = None
    """Dynamo release (required with `runtime: dynamo`)."""

    argocd: ArgoCd | None = None
    """Emit an Argo CD Application for the tree."""

    pod_resources: dict[Name, PodResources] | None = None  # type: ignore[valid-type]
    """Per model, CPU and memory of its pods instead of Kiln's estimate."""

    version: KubernetesVersion = DEFAULT_KUBERNETES_VERSION  # type: ignore[valid-type]
    """Kubernetes release of the cluster (MAJOR.MINOR, e.g. "1.35"): what its API server and kubelets
    accept, e.g. image volumes for `node_pool.weights: image-volume` (K857)."""

    relayout_image: PinnedImage | None = None
    """Image with `sh`, `kubectl` and `chroot` (pinned by digest) for the MIG re-layout Job Argo CD
    runs (node-layer/relayout-job.yaml) and the clocks-and-power DaemonSets (gpu-tuning.yaml).
    Without it the tree has neither: run node-layer/label-nodes.sh and node-tuning-<pool>.sh."""

    @model_validator(mode="after")
    def _dynamo(self) -> "Kubernetes":
        if self.runtime == "dynamo" and self.dynamo is None:
            raise value_error("`runtime: dynamo` needs `dynamo: {version: ...}`",
                              help="name the Dynamo release of the cluster, e.g. dynamo: {version: \"1.6.1\"}",
                              key="runtime")
        return self


# --- outputs ----------------------------------------------------------------------------------

class Image(SpecModel):
    """The serving container image built from the spec."""

    repository: Repository
    """Repository the image is pushed to (tags are content digests)."""

    base: PinnedImage | None = None
    """Base image override, pinned by digest (default: toolchain.triton_image)."""


class SignedBy(SpecModel):
    """Who signs this spec's artifacts and releases: an EC key (`kiln publish --sign-key`) or the
    spec repository's release workflow, keyless through Sigstore (`kiln publish --keyless`)."""

    key: RelPath | None = None
    """The signer's EC P-256 public key (PEM), relative to the spec file."""

    repository: GitHubRepo | None = None
    """GitHub repository (owner/name) whose .github/workflows/kiln-release.yml signs keyless."""

    branch: GitRefName = "main"  # type: ignore[valid-type]
    """The branch that workflow releases from (keyless only)."""

    @model_validator(mode="after")
    def _one_signer(self) -> "SignedBy":
        if (self.key is None) == (self.repository is None):
            raise value_error("signed_by needs exactly one of `key` or `repository`",
                              help="signed_by: {key: keys/release.pub} or signed_by: {repository: owner/name}")
        return self


class Publish(SpecModel):
    """Where `kiln publish` pushes artifacts (as OCI artifacts) and the release manifest."""

    registry: Repository
    """OCI registry and namespace, e.g. registry.example.com/inference."""

    signed_by: SignedBy | None = None
    """Require signatures: `kiln build --cache` (and so the build of a rollback) imports only
    artifacts this signer signed, and the Kubernetes tree admits only images it signed."""

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        # unset, the field is left out: the spec digest of a spec without it stays what it was
        out = handler(self)
        if isinstance(out, dict) and out.get("signed_by") is None:
            out.pop("signed_by", None)
        return out


class Spec(SpecModel):
    """A Kiln deployment spec (kiln.yaml)."""

    kiln: Literal["v1"]
    """Spec format version."""

    name: Name
    """Name of the deployment; prefixes artifact names."""

    target: Literal["llmapi", "engine"] = "llmapi"
    """Serving target: llmapi (TensorRT-LLM PyTorch backend, quantized HF checkpoint + LLM-API options) or
    engine (legacy TensorRT engines with the inflight_batcher_llm ensemble; TensorRT-LLM <= 1.2.x)."""

    toolchain: Toolchain
    """Pinned tool versions."""

    models: Annotated[dict[Name, Model], Field(min_length=1)]  # type: ignore[valid-type]
    """Models by name."""

    hosts: dict[Name, Host] = Field(default_factory=dict)  # type: ignore[valid-type]
    """Hosts by name."""

    image: Image | None = None
    """Serving image (required to build images)."""

    publish: Publish | None = None
    """Publishing target."""

    kubernetes: Kubernetes | None = None
    """The Kubernetes target of the hosts with `deploy: kubernetes`."""
