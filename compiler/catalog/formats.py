"""The quantization-format table (``data/formats.json``) as typed, immutable objects.

One table answers every question Kiln asks about a weight, activation or KV-cache format: what a
weight costs in memory, which (weights, activations) pairs form a recipe and what TensorRT-LLM
calls it, which ModelOpt configuration makes the checkpoint (and whether only on CUDA), whether
the recipe calibrates, which quantize.py format the engine target uses, and on which GPUs
(compute capability x10) each target and each PyTorch MoE backend runs it.

Every fact carries its sources (ids into the table's ``sources``) and a status; a check that
rests on an ``inferred`` or ``unverified`` fact must say so (``WEAK_STATUSES``).

``activations`` is None for the 16-bit model dtype (W*A16 recipes); a spec's explicit ``bf16`` or
``fp16`` activations mean the same (``normalize_activations``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterator, Literal, Mapping

from .types import WEAK_STATUSES, Source, Status

__all__ = [
    "BlockSizes", "Calibration", "EngineRecipe", "FormatTable", "FormatTableError", "KvFormat",
    "ModelOptRecipe", "MoeActivation", "MoeBackend", "Recipe", "Source", "Support", "Target",
    "Verdict", "WeightFormat", "SIXTEEN_BIT", "PLAIN_ACTIVATION", "allowed_blocks", "buildable",
    "default_activations", "kv", "load_format_table", "moe_backends_for", "moe_support",
    "normalize_activations", "recipe", "supports", "valid_activations", "weight",
]

Target = Literal["llmapi", "engine"]
TARGETS: tuple[str, ...] = ("llmapi", "engine")
STATUSES: frozenset[str] = frozenset({"verified", "partially-verified", "inferred", "unverified"})
SIXTEEN_BIT: frozenset[str] = frozenset({"bf16", "fp16"})
#: The expert activation with no special parameters (Mixtral, Qwen-MoE, DeepSeek).
PLAIN_ACTIVATION = "swiglu"


class FormatTableError(ValueError):
    """formats.json does not hold together (unknown source, SM, backend, duplicate recipe...)."""


def normalize_activations(acts: str | None) -> str | None:
    """A spec's activation format as the table keys it: None for the 16-bit model dtype."""
    return None if acts is None or acts in SIXTEEN_BIT else acts


# ------------------------------------------------------------------------------------------- types

@dataclass(frozen=True)
class Support:
    """Where something runs: explicit SM versions, with the strength of the fact behind them."""

    sms: tuple[int, ...]
    status: Status
    sources: tuple[str, ...]
    note: str | None = None

    def allows(self, sm: int) -> bool:
        return sm in self.sms

    @property
    def weak(self) -> bool:
        return self.status in WEAK_STATUSES


@dataclass(frozen=True)
class Verdict:
    """The answer to "does X run here?", with what it rests on. Truthy when supported."""

    supported: bool
    status: Status
    sources: tuple[str, ...]
    note: str | None = None

    def __bool__(self) -> bool:
        return self.supported

    @property
    def weak(self) -> bool:
        return self.status in WEAK_STATUSES


@dataclass(frozen=True)
class BlockSizes:
    allowed: tuple[int, ...]  # () = the format has no block scales
    default: int | None
    status: Status
    sources: tuple[str, ...]


@dataclass(frozen=True)
class WeightFormat:
    """Storage of one weight format: bits per element plus block scales amortised over their block."""

    name: str
    bits: int
    block: int | None  # default block (group) size; None = no per-block scale counted
    block_ndim: int  # 1 = a group of `block` elements, 2 = a block x block tile
    scale_bytes: float  # bytes per block scale
    storage: str
    blocks: BlockSizes
    sources: tuple[str, ...]

    def elements_per_block(self, block: int) -> int:
        return block ** self.block_ndim

    def bytes_per_param(self, block_size: int | None = None) -> float:
        """Bytes per stored element, block scales included; `block_size` overrides the default block."""
        block = block_size if block_size is not None else self.block
        if block is not None and block <= 0:
            raise ValueError(f"block_size must be positive, got {block}")
        scale = self.scale_bytes / self.elements_per_block(block) if block else 0.0
        return self.bits / 8 + scale


@dataclass(frozen=True)
class ModelOptRecipe:
    """How Kiln makes the checkpoint with ModelOpt (names in modelopt.torch.quantization)."""

    config: str  # the named config whose weight quantizer (and, by default, input quantizer) is used
    activations_config: str | None  # a second config whose input quantizer replaces the first one's
    inputs: Literal["config", "disabled", "activations_config"]
    algorithm: str | None  # the calibration algorithm to run (None: no calibration pass)
    exports_quant_algo: str | None  # quant_algo the unified HF export writes to hf_quant_config.json
    trtllm_loads_export: bool  # whether TensorRT-LLM's PyTorch backend reads that quant_algo
    cuda_only: bool  # ModelOpt fake-quantizes it only on CUDA
    status: Status
    sources: tuple[str, ...]
    note: str | None = None

    @property
    def config_names(self) -> tuple[str, ...]:
        return (self.config,) + ((self.activations_config,) if self.activations_config else ())


@dataclass(frozen=True)
class Calibration:
    calibrates: bool
    reason: str
    status: Status
    sources: tuple[str, ...]


@dataclass(frozen=True)
class EngineRecipe:
    """The engine target's recipe: quantize.py --qformat and the QuantAlgo the checkpoint records."""

    qformat: str
    quant_algo: str | None
    support: Support
    fp8_context_fmha: bool  # trtllm-build keeps --use_fp8_context_fmha for this checkpoint


@dataclass(frozen=True)
class Recipe:
    """One valid (weights, activations) pair."""

    weights: str
    activations: str | None  # None = the 16-bit model dtype
    default: bool  # what `activations` defaults to for these weights
    quant_algo: str | None  # TensorRT-LLM QuantAlgo; None for unquantized weights
    name: str
    blocks: BlockSizes | None  # overrides the weight format's block sizes for this pair
    modelopt: ModelOptRecipe | None  # None: ModelOpt (as Kiln drives it) cannot make it
    modelopt_note: str | None
    calibration: Calibration
    engine: EngineRecipe | None  # None: quantize.py has no such format
    engine_note: str | None
    llmapi: Support  # dense (non-expert) linear layers in the PyTorch backend
    experts_only: bool  # the PyTorch backend runs it in MoE expert layers only
    moe: Mapping[str, Support]  # backend -> SMs where that backend implements it for experts
    moe_note: str | None
    moe_activations: Mapping[str, Mapping[str, Support]]  # activation -> backend -> SMs
    sources: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.weights, self.activations)

    @property
    def label(self) -> str:
        return self.quant_algo or self.name

    @property
    def quantized(self) -> bool:
        return self.weights not in SIXTEEN_BIT

    def target(self, target: str) -> Support | None:
        if target == "llmapi":
            return self.llmapi
        if target == "engine":
            return self.engine.support if self.engine is not None else None
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")


@dataclass(frozen=True)
class KvFormat:
    name: str
    bytes_per_element: float
    llmapi: Support
    engine: Support
    modelopt_config: str | None  # named ModelOpt KV config
    modelopt_entry: Mapping[str, Any] | None  # the quant_cfg entry Kiln adds where ModelOpt has no config
    engine_kv_cache_dtype: str | None  # quantize.py --kv_cache_dtype
    kv_cache_quant_algo: str | None  # what the checkpoint records
    llmapi_dtype: str  # KvCacheConfig.dtype
    calibration: Calibration
    cuda_only: bool
    sources: tuple[str, ...]
    note: str | None = None

    @property
    def quantized(self) -> bool:
        return self.kv_cache_quant_algo is not None


@dataclass(frozen=True)
class MoeBackend:
    name: str
    cls: str  # the TensorRT-LLM class
    sms: tuple[int, ...]
    falls_back_to: str | None  # where get_moe_cls sends a quantization this backend does not run
    gptoss_swiglu: bool  # create_moe accepts expert bias and swiglu alpha/beta/limit with it
    note: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class MoeActivation:
    name: str
    description: str
    backends: tuple[str, ...] | None  # None = any backend
    params: Mapping[str, Any]
    sources: tuple[str, ...]


# ------------------------------------------------------------------------------------------- table

class FormatTable:
    def __init__(self, *, sms: tuple[int, ...], sources: Mapping[str, Source], weights: Mapping[str, WeightFormat],
                 recipes: tuple[Recipe, ...], kv: Mapping[str, KvFormat], backends: Mapping[str, MoeBackend],
                 default_backend: str, activations: Mapping[str, MoeActivation], pins: Mapping[str, str]) -> None:
        self.sms = sms
        self.sources = dict(sources)
        self.weights = dict(weights)
        self.recipes = recipes
        self.kv_formats = dict(kv)
        self.moe_backends = dict(backends)
        self.default_moe_backend = default_backend
        self.moe_activations = dict(activations)
        self.pins = dict(pins)
        self._by_key = {r.key: r for r in recipes}

    def __iter__(self) -> Iterator[Recipe]:
        return iter(self.recipes)

    # --- look-ups ------------------------------------------------------------------------------
    def weight(self, fmt: str) -> WeightFormat:
        try:
            return self.weights[fmt.lower()]
        except KeyError:
            raise ValueError(f"unknown weight format {fmt!r}; known: {', '.join(self.weights)}") from None

    def kv(self, fmt: str) -> KvFormat:
        try:
            return self.kv_formats[fmt.lower()]
        except KeyError:
            raise ValueError(f"unknown KV-cache format {fmt!r}; known: {', '.join(self.kv_formats)}") from None

    def recipe(self, weights: str, activations: Any = ...) -> Recipe | None:
        """The recipe for a pair, None if no recipe implements it. Activations None, bf16 or fp16 mean
        the 16-bit model dtype; leaving them out means the weights' default pair."""
        if activations is ...:
            return self.default_recipe(weights) if weights in self.weights else None
        return self._by_key.get((weights, normalize_activations(activations)))

    def recipes_for(self, weights: str) -> tuple[Recipe, ...]:
        return tuple(r for r in self.recipes if r.weights == weights)

    def default_recipe(self, weights: str) -> Recipe:
        for r in self.recipes_for(weights):
            if r.default:
                return r
        raise ValueError(f"unknown weight format {weights!r}")

    def default_activations(self, weights: str) -> str | None:
        """What `activations` defaults to for these weights (None: the 16-bit model dtype)."""
        return self.default_recipe(weights).activations

    def valid_activations(self, weights: str) -> tuple[str | None, ...]:
        """The activation formats these weights pair with, the default first (None: 16-bit)."""
        rs = sorted(self.recipes_for(weights), key=lambda r: not r.default)
        return tuple(r.activations for r in rs)

    def allowed_blocks(self, weights: str, activations: Any = ...) -> tuple[int, ...]:
        """Block (group) sizes the pair takes; () = no block scales. Unknown pairs use the weights'."""
        r = self.recipe(weights, activations)
        if r is not None and r.blocks is not None:
            return r.blocks.allowed
        return self.weight(weights).blocks.allowed

    def source(self, sid: str) -> Source:
        return self.sources[sid]

    # --- verdicts --------------------------------------------------------------------------------
    def supports(self, recipe: Recipe, target: str, sm: int) -> Verdict:
        """Whether `target` runs the recipe's dense layers on a GPU of this SM version."""
        support = recipe.target(target)
        if support is None:
            return Verdict(False, "verified", recipe.sources,
                           recipe.engine_note or "quantize.py has no format for this recipe")
        return Verdict(support.allows(sm), support.status, support.sources, support.note)

    def buildable(self, recipe: Recipe, target: str) -> Verdict:
        """Whether Kiln can make a checkpoint TensorRT-LLM reads: the llmapi target through ModelOpt,
        the engine target through quantize.py. Unquantized recipes always build."""
        if not recipe.quantized:
            return Verdict(True, "verified", recipe.sources)
        if target == "engine":
            if recipe.engine is None:
                return Verdict(False, "verified", recipe.sources,
                               recipe.engine_note or "quantize.py has no format for this recipe")
            return Verdict(True, recipe.engine.support.status, recipe.engine.support.sources)
        if target != "llmapi":
            raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
        m = recipe.modelopt
        if m is None:
            return Verdict(False, "verified", recipe.sources, recipe.modelopt_note)
        return Verdict(m.trtllm_loads_export, m.status, m.sources, m.note)

    def moe_support(self, recipe: Recipe, backend: str, sm: int, activation: str | None = None) -> Verdict:
        """Whether a PyTorch MoE backend itself runs the recipe's expert layers on this SM, with the
        model's expert activation (None or "swiglu": plain; "swiglu_gptoss": GPT-OSS style)."""
        name = backend.upper()
        if name not in self.moe_backends:
            raise ValueError(f"unknown MoE backend {backend!r}; known: {', '.join(self.moe_backends)}")
        plain = recipe.moe[name]
        if not plain.allows(sm):
            return Verdict(False, plain.status, plain.sources, plain.note or recipe.moe_note)
        act = activation or PLAIN_ACTIVATION
        if act == PLAIN_ACTIVATION:
            return Verdict(True, plain.status, plain.sources, plain.note)
        if act not in self.moe_activations:
            raise ValueError(f"unknown MoE activation {activation!r}; known: {', '.join(self.moe_activations)}")
        cell = recipe.moe_activations.get(act, {}).get(name)
        if cell is None:
            spec = self.moe_activations[act]
            return Verdict(False, "verified" if spec.backends and name not in spec.backends else "inferred",
                           spec.sources, f"{name} does not run {recipe.label} experts with {act}")
        return Verdict(cell.allows(sm), _weaker(plain.status, cell.status),
                       tuple(dict.fromkeys(plain.sources + cell.sources)), cell.note or plain.note)

    def moe_backends_for(self, recipe: Recipe, sm: int, activation: str | None = None) -> tuple[str, ...]:
        """The backends that run the recipe's experts on this SM (table order)."""
        return tuple(b for b in self.moe_backends if self.moe_support(recipe, b, sm, activation))


_ORDER = ("verified", "partially-verified", "inferred", "unverified")


def _weaker(a: str, b: str) -> str:
    return max(a, b, key=_ORDER.index)


# ------------------------------------------------------------------------------------------- loading

def _tuple(v: Any) -> tuple:
    return tuple(v or ())


def _support(d: Mapping[str, Any]) -> Support:
    return Support(sms=_tuple(d["sms"]), status=d["status"], sources=_tuple(d["sources"]), note=d.get("note"))


def _blocks(d: Mapping[str, Any]) -> BlockSizes:
    return BlockSizes(allowed=_tuple(d["allowed"]), default=d.get("default"), status=d.get("status", "verified"),
                      sources=_tuple(d.get("sources")))


def _cal(d: Mapping[str, Any]) -> Calibration:
    return Calibration(calibrates=d["calibrates"], reason=d["reason"], status=d["status"], sources=_tuple(d["sources"]))


def _modelopt(d: Mapping[str, Any] | None) -> ModelOptRecipe | None:
    if d is None:
        return None
    return ModelOptRecipe(config=d["config"], activations_config=d.get("activations_config"), inputs=d["inputs"],
                          algorithm=d.get("algorithm"), exports_quant_algo=d.get("exports_quant_algo"),
                          trtllm_loads_export=d["trtllm_loads_export"], cuda_only=d["cuda_only"], status=d["status"],
                          sources=_tuple(d["sources"]), note=d.get("note"))


def _engine(d: Mapping[str, Any] | None) -> EngineRecipe | None:
    if d is None:
        return None
    return EngineRecipe(qformat=d["qformat"], quant_algo=d.get("quant_algo"), support=_support(d),
                        fp8_context_fmha=d["fp8_context_fmha"])


def _recipe(d: Mapping[str, Any]) -> Recipe:
    return Recipe(
        weights=d["weights"], activations=d["activations"], default=d["default"], quant_algo=d.get("quant_algo"),
        name=d["name"], blocks=_blocks(d["blocks"]) if d.get("blocks") else None, modelopt=_modelopt(d["modelopt"]),
        modelopt_note=d.get("modelopt_note"), calibration=_cal(d["calibration"]), engine=_engine(d["engine"]),
        engine_note=d.get("engine_note"), llmapi=_support(d["llmapi"]), experts_only=d.get("experts_only", False),
        moe={b: _support(c) for b, c in d["moe"].items()}, moe_note=d.get("moe_note"),
        moe_activations={a: {b: _support(c) for b, c in cells.items()} for a, cells in d["moe_activations"].items()},
        sources=_tuple(d["sources"]),
    )


def _kv(name: str, d: Mapping[str, Any]) -> KvFormat:
    m = d.get("modelopt") or {}
    return KvFormat(
        name=name, bytes_per_element=d["bytes_per_element"], llmapi=_support(d["llmapi"]),
        engine=_support(d["engine"]), modelopt_config=m.get("config"), modelopt_entry=m.get("entry"),
        engine_kv_cache_dtype=d.get("engine_kv_cache_dtype"), kv_cache_quant_algo=d.get("kv_cache_quant_algo"),
        llmapi_dtype=d["llmapi_dtype"], calibration=_cal(d["calibration"]), cuda_only=d["cuda_only"],
        sources=_tuple(d["sources"]), note=d.get("note"),
    )


class _Integrity:
    """The problems found so far, and the checks every part of the table shares."""

    def __init__(self, table: FormatTable) -> None:
        self.table, self.problems = table, []
        self.sms, self.backends = set(table.sms), set(table.moe_backends)

    def facts(self, where: str, status: str, sources: tuple[str, ...], sm_list: tuple[int, ...] = ()) -> None:
        if status not in STATUSES:
            self.problems.append(f"{where}: unknown status {status!r}")
        for s in sources:
            if s not in self.table.sources:
                self.problems.append(f"{where}: unknown source {s!r}")
        for sm in sm_list:
            if sm not in self.sms:
                self.problems.append(f"{where}: SM {sm} is not one of {sorted(self.sms)}")

    def support(self, where: str, s: Support) -> None:
        self.facts(where, s.status, s.sources, s.sms)

    def recipe(self, r: Recipe) -> None:
        """One recipe's own facts, and its MoE cells against the backends and activations."""
        table, where = self.table, f"recipe {r.weights}/{r.activations}"
        if r.weights not in table.weights:
            self.problems.append(f"{where}: unknown weight format")
        if not r.sources:
            self.problems.append(f"{where}: no sources")
        self.facts(where, "verified", r.sources)
        self.support(f"{where}.llmapi", r.llmapi)
        self.facts(f"{where}.calibration", r.calibration.status, r.calibration.sources)
        if r.engine is not None:
            self.support(f"{where}.engine", r.engine.support)
        for part in ("modelopt", "blocks"):  # each with a status and sources of its own
            value = getattr(r, part)
            if value is not None:
                self.facts(f"{where}.{part}", value.status, value.sources)
        if set(r.moe) != self.backends:
            self.problems.append(f"{where}.moe: backends {sorted(r.moe)} are not {sorted(self.backends)}")
        for b, s in r.moe.items():
            self.support(f"{where}.moe.{b}", s)
        for a, cells in r.moe_activations.items():
            if a not in table.moe_activations:
                self.problems.append(f"{where}: unknown MoE activation {a!r}")
            allowed = table.moe_activations[a].backends if a in table.moe_activations else None
            for b, s in cells.items():
                if b not in self.backends or (allowed is not None and b not in allowed):
                    self.problems.append(f"{where}.moe_activations.{a}: backend {b!r} cannot run {a}")
                self.support(f"{where}.moe_activations.{a}.{b}", s)

    def moe(self) -> None:
        """The MoE backends (what they fall back to, the default) and the activations they run."""
        table, backends = self.table, self.backends
        for name, b in table.moe_backends.items():
            self.facts(f"moe_backends.{name}", "verified", b.sources, b.sms)
            if b.falls_back_to is not None and b.falls_back_to not in backends:
                self.problems.append(f"moe_backends.{name}: falls back to unknown backend {b.falls_back_to!r}")
        if table.default_moe_backend not in backends:
            self.problems.append(f"moe_backends: unknown default {table.default_moe_backend!r}")
        for name, a in table.moe_activations.items():
            self.facts(f"moe_activations.{name}", "verified", a.sources)
            for b in a.backends or ():
                if b not in backends:
                    self.problems.append(f"moe_activations.{name}: unknown backend {b!r}")


def _check(table: FormatTable) -> None:
    """Referential integrity: every id, SM, status and backend named in the table exists."""
    check = _Integrity(table)
    for name, w in table.weights.items():
        check.facts(f"weights.{name}", "verified", w.sources)
        check.facts(f"weights.{name}.blocks", w.blocks.status, w.blocks.sources)
    seen: set[tuple[str, str | None]] = set()
    for r in table.recipes:
        if r.key in seen:
            check.problems.append(f"recipe {r.weights}/{r.activations}: duplicate")
        seen.add(r.key)
        check.recipe(r)
    for w in table.weights:
        defaults = [r for r in table.recipes_for(w) if r.default]
        if len(defaults) != 1:
            check.problems.append(f"weights {w}: {len(defaults)} default recipes, want exactly 1")
    for name, k in table.kv_formats.items():
        check.support(f"kv_cache.{name}.llmapi", k.llmapi)
        check.support(f"kv_cache.{name}.engine", k.engine)
        check.facts(f"kv_cache.{name}", k.calibration.status, k.sources + k.calibration.sources)
    check.moe()
    if check.problems:
        raise FormatTableError("formats.json: " + "; ".join(check.problems))


def table_from_dict(data: Mapping[str, Any]) -> FormatTable:
    sources = {k: Source(id=k, repository=v["repository"], path=v["path"], what=v["what"], version=v.get("version"),
                         commit=v.get("commit"), url=v.get("url")) for k, v in data["sources"].items()}
    weights = {k: WeightFormat(name=k, bits=v["bits"], block=v["block"], block_ndim=v["block_ndim"],
                               scale_bytes=v["scale_bytes"], storage=v["storage"], blocks=_blocks(v["blocks"]),
                               sources=_tuple(v["sources"])) for k, v in data["weights"].items()}
    mb = data["moe_backends"]
    backends = {k: MoeBackend(name=k, cls=v["class"], sms=_tuple(v["sms"]), falls_back_to=v.get("falls_back_to"),
                              gptoss_swiglu=v["gptoss_swiglu"], note=v.get("note", ""), sources=_tuple(v["sources"]))
                for k, v in mb["backends"].items()}
    activations = {k: MoeActivation(name=k, description=v["description"],
                                    backends=_tuple(v["backends"]) if v.get("backends") is not None else None,
                                    params=dict(v.get("params", {})), sources=_tuple(v["sources"]))
                   for k, v in data["moe_activations"].items()}
    table = FormatTable(
        sms=_tuple(data["sms"]), sources=sources, weights=weights,
        recipes=tuple(_recipe(r) for r in data["recipes"]),
        kv={k: _kv(k, v) for k, v in data["kv_cache"].items()}, backends=backends, default_backend=mb["default"],
        activations=activations, pins=data.get("pins", {}),
    )
    _check(table)
    return table


@lru_cache(maxsize=1)
def load_format_table() -> FormatTable:
    text = (resources.files("compiler.catalog") / "data" / "formats.json").read_text(encoding="utf-8")
    return table_from_dict(json.loads(text))


# ------------------------------------------------------------------------------------------- helpers

def recipe(weights: str, activations: Any = ...) -> Recipe | None:
    """The (weights, activations) recipe; activations left out = the weights' default pair."""
    return load_format_table().recipe(weights, activations)


def weight(fmt: str) -> WeightFormat:
    return load_format_table().weight(fmt)


def kv(fmt: str) -> KvFormat:
    return load_format_table().kv(fmt)


def default_activations(weights: str) -> str | None:
    return load_format_table().default_activations(weights)


def valid_activations(weights: str) -> tuple[str | None, ...]:
    return load_format_table().valid_activations(weights)


def allowed_blocks(weights: str, activations: Any = ...) -> tuple[int, ...]:
    return load_format_table().allowed_blocks(weights, activations)


def supports(recipe: Recipe, target: str, sm: int) -> Verdict:
    return load_format_table().supports(recipe, target, sm)


def buildable(recipe: Recipe, target: str) -> Verdict:
    return load_format_table().buildable(recipe, target)


def moe_support(recipe: Recipe, backend: str, sm: int, activation: str | None = None) -> Verdict:
    return load_format_table().moe_support(recipe, backend, sm, activation)


def moe_backends_for(recipe: Recipe, sm: int, activation: str | None = None) -> tuple[str, ...]:
    return load_format_table().moe_backends_for(recipe, sm, activation)
