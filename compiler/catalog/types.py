"""Typed, immutable views of the hardware and model catalogs.

The facts themselves live in ``compiler/catalog/data/*.json``; these classes only give them
names and types. Every fact keeps a status so that a check resting on an inferred fact can say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

Status = Literal["verified", "partially-verified", "inferred", "unverified"]

#: Statuses that a diagnostic must mention ("this rests on an inferred fact").
WEAK_STATUSES: frozenset[str] = frozenset({"inferred", "unverified"})


#: One direction of a PCIe x16 link, GB/s, by generation (PCI-SIG: 16 and 32 GT/s per lane x 16 lanes,
#: 128b/130b, rounded as the datasheets print them: the L40S's "PCIe Gen4 x16: 64 GB/s bidirectional").
PCIE_X16_GBPS = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


@dataclass(frozen=True)
class Source:
    """Where a table's facts come from (formats.json, checkpoint_config.json): a file of an upstream
    repository at a version or commit."""

    id: str
    repository: str
    path: str
    what: str
    version: str | None = None
    commit: str | None = None
    url: str | None = None

    def describe(self) -> str:
        at = f"@{self.commit[:8]}" if self.commit else (f" ({self.version})" if self.version else "")
        return f"{self.repository}:{self.path}{at}"


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile as `nvidia-smi mig -lgip` / `-lgipp` print it."""

    name: str  # e.g. "3g.90gb" or "1g.23gb+me"
    id: int  # GI profile ID accepted by `nvidia-smi mig -cgi <id>:<start>`
    compute_slices: int
    memory_slices: int
    memory_gb: int  # nominal GB in the name
    max_count: int
    placements: tuple[int, ...]  # legal start slots (-lgipp)
    placement_size: int  # memory slots occupied from the start slot
    attributes: tuple[str, ...] = ()  # "me", "me.all", "gfx", "-me"
    sm: int | None = None
    memory_mib: int | None = None  # usable memory per instance when known (NVML / -lgip)
    id_status: Status = "verified"
    placement_status: Status = "verified"
    sm_status: Status = "unverified"

    @property
    def has_media_extensions(self) -> bool:
        """True for `+me` and `+me.all` profiles: at most one such instance per GPU."""
        return "me" in self.attributes or "me.all" in self.attributes


@dataclass(frozen=True)
class MigGeometry:
    supported: bool
    max_instances: int = 0
    compute_slices: int = 0
    memory_slices: int = 0
    min_driver: str | None = None
    profiles: tuple[MigProfile, ...] = ()

    def profile(self, name: str) -> MigProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    @property
    def profile_names(self) -> list[str]:
        return [p.name for p in self.profiles]


@dataclass(frozen=True)
class GpuSpec:
    name: str  # catalog key, e.g. "H100-SXM5-80GB"
    arch: str  # "Ampere", "Hopper", "Blackwell", "Blackwell Ultra"
    compute_capability: tuple[int, int]  # (9, 0)
    sms: int | None
    memory_gb: int  # nominal
    memory_mib: int  # total as the driver reports it
    bandwidth_tbps: float
    tflops: Mapping[str, float | None]  # dense: "bf16", "fp8", "fp4", ...
    graphics_mhz: tuple[int, int]  # supported lockable range (min, max)
    memory_mhz: tuple[int, ...]  # supported memory clocks
    power_w: tuple[int, int]  # settable power-limit range (min, max)
    tdp_w: int
    nvlink_gbps: int | None
    pci_device_id: str | None
    min_driver: str | None
    mig: MigGeometry
    status: Mapping[str, Status] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    memory_type: str = ""  # "HBM3e", "GDDR7 (ECC)"...
    pcie_gen: int | None = None  # the host link's PCIe generation where the catalog gives it (x16)

    @property
    def memory_class(self) -> str:
        """"HBM" or "GDDR": the memory system a performance fit on one does not carry to the other."""
        return "GDDR" if self.memory_type.upper().startswith("GDDR") else "HBM"

    @property
    def link_gbps(self) -> float:
        """One direction of one GPU's interconnect, GB/s: half of NVLink's two directions, or a PCIe
        x16 link of the GPU's generation (Gen5 where the catalog does not say)."""
        if self.nvlink_gbps:
            return self.nvlink_gbps / 2
        return PCIE_X16_GBPS.get(self.pcie_gen or 5, PCIE_X16_GBPS[5])

    @property
    def sm_version(self) -> int:
        """Compute capability as TensorRT-LLM writes it: 90 for 9.0, 100 for 10.0."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]

    def status_of(self, fact: str) -> Status:
        return self.status.get(fact, "unverified")


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention (DeepSeek): the KV cache holds a shared latent per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelArch:
    name: str  # catalog key, e.g. "llama-3.1-70b", or the config's model_type for config.json
    hf_architecture: str | None  # "LlamaForCausalLM"
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense FFN width (per expert for Mixtral-style MoE)
    vocab: int
    max_position: int
    moe_intermediate: int | None = None  # per-expert FFN width when it differs from `intermediate`
    experts: int | None = None
    experts_per_token: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0  # leading dense layers in an MoE model (DeepSeek first_k_dense_replace)
    tied_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU (3 matrices) vs GELU (2 matrices)
    mla: MlaDims | None = None
    sliding_window: int | None = None
    sliding_window_layers: int = 0  # how many layers use the window
    encoder_only: bool = False  # no autoregressive KV cache
    params_total: int | None = None
    params_active: int | None = None
    #: Expert activation when it is not plain SwiGLU/GELU: "swiglu_gptoss" (GPT-OSS: alpha 1.702,
    #: beta 1.0, clamp limit 7.0, per-expert bias), which only some MoE backends run (formats.json).
    moe_activation: str | None = None
    status: Mapping[str, Status] = field(default_factory=dict)
    sources: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return bool(self.experts)

    def status_of(self, fact: str) -> Status:
        return self.status.get(fact, "verified")
