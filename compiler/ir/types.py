"""The Resolved IR: a parsed spec with its catalog facts attached and every derived fact computed once.

`resolve` (resolve.py) attaches catalog entries and reads the files the spec names; the ordered
passes (passes.py) then fill in the derived fields: measured batch limits, effective formats,
serving units, their ports, MIG placements, per-unit capacity figures and estimates, what each
measurement record still describes and the estimates it measures (tune_inputs.py, estimates.py),
each disaggregated role's sizing, and the node pools of the hosts that deploy to Kubernetes (pools.py). Checks, the planner, actions and reports read these
fields; none of them recomputes a fact that is here, and none reads the raw spec again. Every
class is frozen: a pass returns a new IR (`dataclasses.replace`), so a stage can
never see a half-analysed tree.

A field that a pass could not fill (an unknown GPU, an unresolved architecture, a layout that
does not fit) stays None; the checks that report the cause run on the same IR.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from compiler.capacity.placement import PlacementResult
from compiler.capacity.report import UnitFigures
from compiler.catalog.types import GpuSpec, MigProfile, ModelArch
from .inputs import ResolvedInput
from compiler.spec.loader import Document
from compiler.spec.models import Host, Image, Kubernetes, MigInstance, Model, Spec, Toolchain

from .lockfile import LockedInstance
from .measured import Measurement, RecordState

if TYPE_CHECKING:  # the format table's row types; only annotations name them here
    from compiler.catalog.formats import KvFormat, Recipe

    from .pools import NodePool
    from .role_capacity import ModelRoles


@dataclass(frozen=True)
class Ports:
    """The ports one serving container listens on (host network)."""

    http: int
    grpc: int
    metrics: int

    def as_dict(self) -> dict[str, int]:
        return {"http": self.http, "grpc": self.grpc, "metrics": self.metrics}


@dataclass(frozen=True)
class ModuleFormat:
    """The weight format of the modules one override matches (last match wins, in spec order)."""

    match: str
    weights: str | None  # storage format; None = left unquantized (the model dtype)
    block_size: int | None
    recipe: Recipe | None  # the format-table row of the override's own weights, when it sets weights
    index: int  # position in quantization.overrides


@dataclass(frozen=True)
class Formats:
    """A model's effective quantization, as the format table defines it for the spec's target.

    `activations` is what the model computes in (the 16-bit dtype for W*A16 recipes); `act_quant`
    is the quantized activation format, or None when activations stay 16-bit. `recipe` is the
    table row of (weights, activations) (the BF16/FP16 row for unquantized weights); None for a
    pair no recipe implements (K306 reports that)."""

    dtype: str  # bf16 | fp16
    weights: str  # as the spec says (bf16/fp16: not quantized)
    activations: str
    act_quant: str | None
    kv_cache: str  # as the spec says ("auto": the model dtype)
    recipe: Recipe | None
    kv: KvFormat
    block_size: int | None  # as the spec says (None: the format's default)
    exclude: tuple[str, ...]
    overrides: tuple[ModuleFormat, ...]

    @property
    def weights_quantized(self) -> bool:
        return self.weights not in ("bf16", "fp16")

    @property
    def quantized(self) -> bool:
        """Whether a quantized checkpoint must be produced (weights or KV cache)."""
        return self.weights_quantized or self.kv_cache not in ("auto", "bf16", "fp16")

    @property
    def storage_weights(self) -> str:
        """The storage format of the quantized linears (the dtype when nothing is quantized)."""
        return self.weights if self.weights_quantized else self.dtype

    @property
    def storage_kv(self) -> str:
        return self.dtype if self.kv_cache == "auto" else self.kv_cache


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    spec: Model
    arch: ModelArch | None
    arch_origin: str  # "catalog", "config", or "" when unresolved
    formats: Formats | None = None  # formats pass
    # `limits.max_batch_size: {measured: ...}`: the record resolution read; the limits pass sets its
    # limit and puts it into `spec.limits.max_batch_size`, which everything after the passes reads
    measured: Measurement | None = None


@dataclass(frozen=True)
class MigSlot:
    """One MIG instance of one physical GPU, as the spec lists it."""

    instance_index: int  # position in the `mig` list
    instance: MigInstance
    profile: MigProfile | None  # None: the GPU has no profile of that name (K202)


@dataclass(frozen=True)
class ServingUnit:
    """What serves one model replica: a MIG instance, a GPU, or a tensor/pipeline-parallel group."""

    id: str  # e.g. "b200-a/gpu0/mig1" or "h200-node/gpu0+1+2+3"
    host: str
    model: str
    gpu_indexes: tuple[int, ...]
    mig: MigSlot | None
    path: tuple  # spec path of the assignment (or MIG instance), for diagnostics
    instances_on_gpu: int = 1  # MIG instances sharing the physical GPU
    replica: int = 0  # n-th unit of this model on this host, in GPU order (offsets its ports)
    ports: Ports | None = None  # ports pass (None when the model is unknown)
    mig_start: int | None = None  # placement pass: the instance's start slot (None: not MIG, or unplaceable)
    figures: UnitFigures | None = None  # capacity pass
    unsized: str | None = None  # capacity pass: why `figures` is None
    role: str | None = None  # disaggregated serving: "prefill" or "decode" (the assignment's or instance's role)


@dataclass(frozen=True)
class ResolvedHost:
    name: str
    spec: Host
    gpu: GpuSpec | None
    # assignment index -> its MIG slots (the same layout applies to each GPU the assignment lists)
    assignment_slots: Mapping[int, tuple[MigSlot, ...]] = field(default_factory=dict)
    gpu_source: str = "catalog"  # or the capture file the MIG profiles were read from
    # placement pass: assignment index -> the exact placement search, for every layout whose
    # profiles exist and whose counts and slices fit (K203-K206 report the others)
    placements: Mapping[int, PlacementResult] = field(default_factory=dict)
    locked: Mapping[int, tuple[LockedInstance, ...]] = field(default_factory=dict)  # GPU index -> kiln.lock's
    # placement pass: physical GPU index -> the placement it gets (the layout's, keeping what the lock
    # file places where it can), and the request indexes that could not stay with the reason
    gpu_placements: Mapping[int, PlacementResult] = field(default_factory=dict)
    moved: Mapping[int, Mapping[int, str]] = field(default_factory=dict)

    def mig_gpus(self) -> dict[int, list[int]]:
        """Physical GPU index -> the MIG assignments that claim it (more than one is an error)."""
        out: dict[int, list[int]] = {}
        for a_idx in self.assignment_slots:
            for g in self.spec.gpus[a_idx].indexes:
                out.setdefault(g, []).append(a_idx)
        return out


@dataclass(frozen=True)
class Resolved:
    """The one typed IR between parsing and everything else."""

    spec: Spec
    document: Document
    base_dir: Path  # relative paths in the spec are relative to this directory
    models: Mapping[str, ResolvedModel]
    hosts: Mapping[str, ResolvedHost]
    units: tuple[ServingUnit, ...] = ()  # units pass, in host order then GPU order
    capture: str | None = None  # the --gpu-profiles capture, when one was given
    lock_file: str | None = None  # the lock file read (compiler/ir/lockfile.py), when the spec has one
    # the lock's workload names (pools.lock_workloads): pool -> model[/role] -> the shape slug that
    # holds the bare name, then the shapes named with their suffix
    locked_workloads: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    # the lock's Dynamo worker surges (k8s_dgd.worker_surge): pool -> workload name -> maxSurge
    locked_surges: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # the lock's Deployments (k8s_deployment.lock_pods): pool -> workload -> shape, replicas, per_node
    locked_pods: Mapping[str, Mapping[str, Mapping[str, int | str]]] = field(default_factory=dict)
    # entries of a spec with errors that were left out so the rest could be checked ("models" or
    # "hosts" -> names); checks do not report what follows from their absence
    set_aside: Mapping[str, frozenset[str]] = field(default_factory=dict)
    pools: Mapping[str, NodePool] = field(default_factory=dict)  # pools pass: hosts with deploy: kubernetes
    # the spec's input paths (by their text in the spec) that resolution confined and found usable
    # (inputs.py); a path missing here was refused, and nothing may read it
    inputs: Mapping[str, ResolvedInput] = field(default_factory=dict)
    # routers pass: disaggregated model -> the host its router runs on (None: the orchestrator's
    # frontend routes, every server being on node pools)
    routers: Mapping[str, str | None] = field(default_factory=dict)
    roles: Mapping[str, ModelRoles] = field(default_factory=dict)  # roles pass: each role's servers, placed and needed
    # records pass: model with a measurement record -> what the record measured that the spec no longer
    # describes (empty: it applies, and the measurements pass put its figures into the estimates)
    records: Mapping[str, RecordState] = field(default_factory=dict)
    # the spec's sections no pass rewrites, taken once from the spec (and again by dataclasses.replace
    # with another spec): what checks and targets read in place of the parsed spec
    name: str = field(init=False)
    toolchain: Toolchain = field(init=False)
    image: Image | None = field(init=False)
    kubernetes: Kubernetes | None = field(init=False)

    def __post_init__(self) -> None:
        for section in ("name", "toolchain", "image", "kubernetes"):
            object.__setattr__(self, section, getattr(self.spec, section))

    def input_path(self, value: str) -> Path:
        """The real path of an input the spec names (KeyError for one resolution refused)."""
        return self.inputs[value].path

    @property
    def target(self) -> str:
        return self.spec.target

    def host_units(self, host: str) -> list[ServingUnit]:
        return [u for u in self.units if u.host == host]

    def sized_units(self) -> list[ServingUnit]:
        """Units with capacity figures, in spec order."""
        return [u for u in self.units if u.figures is not None]

    def capacity_rows(self, host: str | None = None) -> list[dict]:
        """The capacity figures of every sized unit (of one host), as rows (compiler.capacity.render)."""
        from compiler.capacity.render import unit_row

        return [unit_row(u.figures, self.models[u.model].spec.limits.max_batch_size, u.mig_start,
                         self.measured_row(u.model), u.role)
                for u in self.sized_units() if host is None or u.host == host]

    def measured_row(self, model: str) -> dict | None:
        """A model's measured limit as row data (compiler.capacity.render), or None."""
        m = self.models[model].measured
        if m is None or m.limit is None:
            return None
        return {"record": m.ref, "unit": m.record.unit, "concurrency": m.record.result.concurrency,
                "limit": m.limit, "derivation": m.derivation}
