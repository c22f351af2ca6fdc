"""The packaged GPU catalog (``data/gpus.json``) as typed ``GpuSpec`` objects."""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from compiler import resources

from .lgip import profiles_from_lgip
from .named import NamedCatalog
from .types import GpuSpec, MigGeometry, MigProfile

__all__ = ["GpuCatalog", "Variant", "load_gpu_catalog", "gpu_from_lgip", "describe_source"]


def _norm(name: str) -> str:
    # "h100 sxm5_80gb" and "H100-SXM5-80GB" are the same request
    return re.sub(r"[\s_]+", "-", name.strip()).lower()


def _vnorm(name: str) -> str:
    # variant spellings also drop nvidia-smi's "NVIDIA " prefix: "NVIDIA H800" is "H800"
    n = _norm(name)
    return n[len("nvidia-"):] if n.startswith("nvidia-") else n


def _tokens(name: str) -> list[str]:
    # "NVIDIA H100 80GB HBM3" -> ["h100", "80gb", "hbm3"]: the first token is the model family
    return [t for t in _vnorm(name).split("-") if t]


def _shared(want: list[str], have: list[str]) -> int:
    """How many of ``want``'s tokens ``have`` has; a prefix counts ("sxm" matches "sxm5")."""
    return sum(1 for w in want if any(h.startswith(w) or w.startswith(h) for h in have))


@dataclass(frozen=True)
class Variant:
    """A GPU people name that the catalog lacks, and the catalog part closest to it (if any)."""

    name: str  # spelling as written in the variants table, e.g. "H800"
    base: str | None  # catalog key, or None when no catalog part stands in for it (e.g. H20)
    reason: str  # one line: what the part is and how it differs from ``base``
    sources: tuple[str, ...] = ()


def _profile(d: Mapping[str, Any]) -> MigProfile:
    return MigProfile(
        name=d["name"], id=d["id"], compute_slices=d["compute_slices"], memory_slices=d["memory_slices"],
        memory_gb=d["memory_gb"], max_count=d["max_count"], placements=tuple(d["placements"]),
        placement_size=d["placement_size"], attributes=tuple(d.get("attributes", ())), sm=d.get("sm"),
        memory_mib=d.get("memory_mib"), id_status=d["id_status"], placement_status=d["placement_status"],
        sm_status=d["sm_status"],
    )


def _gpu(name: str, d: Mapping[str, Any]) -> GpuSpec:
    m = d["mig"]
    mig = MigGeometry(
        supported=m["supported"], max_instances=m.get("max_instances", 0),
        compute_slices=m.get("compute_slices", 0), memory_slices=m.get("memory_slices", 0),
        min_driver=m.get("min_driver"), profiles=tuple(_profile(p) for p in m.get("profiles", ())),
    )
    return GpuSpec(
        name=name, arch=d["arch"], compute_capability=tuple(d["compute_capability"]), sms=d["sms"],
        memory_gb=d["memory_gb"], memory_mib=d["memory_mib"], bandwidth_tbps=d["bandwidth_tbps"],
        tflops=dict(d["tflops"]), graphics_mhz=tuple(d["graphics_mhz"]), memory_mhz=tuple(d["memory_mhz"]),
        power_w=tuple(d["power_w"]), tdp_w=d["tdp_w"], nvlink_gbps=d["nvlink_gbps"],
        pci_device_id=d["pci_device_id"], min_driver=d["min_driver"], mig=mig,
        status=dict(d["status"]), sources=tuple(d["sources"]), memory_type=d.get("memory_type") or "",
        pcie_gen=d.get("pcie_gen"),
    )


def describe_source(entry: Mapping[str, Any]) -> str:
    url, desc = entry.get("url"), entry.get("description", "")
    return f"{url} ({desc})" if url and desc else (url or desc)


class GpuCatalog(NamedCatalog[GpuSpec]):
    """GPUs by catalog key, with aliases, known variants and close-match suggestions."""

    what = "GPU"

    def __init__(self, gpus: Mapping[str, GpuSpec], aliases: Mapping[str, str] | None = None,
                 sources: Mapping[str, Mapping[str, Any]] | None = None,
                 notes: Mapping[str, tuple[str, ...]] | None = None,
                 variants: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._gpus = dict(gpus)
        self._aliases = dict(aliases or {})
        self._sources = dict(sources or {})
        self._notes = dict(notes or {})
        self._index: dict[str, str] = {}
        for key in self._gpus:
            self._index[_norm(key)] = key
        for alias, target in self._aliases.items():
            if target not in self._gpus:
                raise ValueError(f"alias {alias!r} points at unknown GPU {target!r}")
            prior = self._index.setdefault(_norm(alias), target)
            if prior != target:
                raise ValueError(f"alias {alias!r} is ambiguous ({prior} vs {target})")
        self._variants: dict[str, Variant] = {}
        for spelling, v in (variants or {}).items():
            base = v.get("base")
            if base is not None and base not in self._gpus:
                raise ValueError(f"variant {spelling!r} names unknown base GPU {base!r}")
            key = _vnorm(spelling)
            if key in self._index or _norm(spelling) in self._index:
                raise ValueError(f"variant {spelling!r} is already a catalog name or alias")
            if key in self._variants:
                raise ValueError(f"variant {spelling!r} is listed twice")
            self._variants[key] = Variant(spelling, base, str(v["reason"]), tuple(v.get("sources", ())))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GpuCatalog":
        gpus = {k: _gpu(k, v) for k, v in data["gpus"].items()}
        notes = {k: tuple(v.get("notes", ())) for k, v in data["gpus"].items()}
        return cls(gpus, data.get("aliases", {}), data.get("sources", {}), notes, data.get("variants", {}))

    def _entries(self) -> Mapping[str, GpuSpec]:
        return self._gpus

    @property
    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def resolve_name(self, name: str) -> str | None:
        if not isinstance(name, str):
            return None
        if name in self._gpus:
            return name
        return self._aliases.get(name) or self._index.get(_norm(name))

    def get(self, name: str) -> GpuSpec | None:
        key = self.resolve_name(name)
        return self._gpus[key] if key else None

    def variant(self, name: str) -> Variant | None:
        """The known variant ``name`` spells, if it is not itself a catalog name or alias.

        An exact spelling wins; otherwise the longest variant spelling that ``name`` starts with, followed
        by a ``-`` ("H800-SXM5-80GB-HBM3" is the H800 SXM5). nvidia-smi's "NVIDIA " prefix is ignored.
        """
        if not isinstance(name, str) or not name.strip() or self.resolve_name(name) is not None:
            return None
        key = _vnorm(name)
        if key in self._variants:
            return self._variants[key]
        best = max((k for k in self._variants if key.startswith(k + "-")), key=len, default=None)
        return self._variants[best] if best is not None else None

    def variant_of(self, name: str) -> tuple[str | None, str] | None:
        """``(base catalog key, one-line reason)`` for a known variant the catalog lacks, else None.

        The base is None for a known part that no catalog GPU stands in for (the H20: Hopper memory,
        a fraction of the compute); the reason then says what the part is.
        """
        v = self.variant(name)
        return (v.base, v.reason) if v is not None else None

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Catalog keys close to ``name`` (aliases count, but keys are returned), closest in meaning first.

        A known variant's base comes first ("H800" suggests the H100 SXM5, not the H200 its spelling is
        closest to); a known variant without a base suggests nothing, since a look-alike name would mislead.
        Then the parts of the same model family ("H100-80GB": the H100s, never the A100 its spelling is
        closest to), most tokens in common first; then names that are merely spelled alike.
        """
        if not isinstance(name, str) or not name.strip():
            return []
        v = self.variant(name)
        if v is not None and v.base is None:
            return []
        out: list[str] = [v.base] if v is not None and v.base is not None else []
        for key in self._family_ranked(name):
            if key not in out:
                out.append(key)
        hits = difflib.get_close_matches(_norm(name), list(self._index), n=n * 3, cutoff=0.6)
        for h in hits:
            key = self._index[h]
            if key not in out:
                out.append(key)
        return out[:n]

    def _family_ranked(self, name: str) -> list[str]:
        """Keys whose family token (the first: "h100", "a100", "gh200") is ``name``'s, best match first."""
        want = _tokens(name)
        scored: dict[str, tuple[int, float]] = {}
        for spelling, key in self._index.items():
            have = _tokens(spelling)
            if not want or not have or have[0] != want[0]:
                continue
            score = (_shared(want, have), difflib.SequenceMatcher(None, _vnorm(name), _vnorm(spelling)).ratio())
            scored[key] = max(scored.get(key, score), score)
        return sorted(scored, key=lambda k: (-scored[k][0], -scored[k][1], k))

    def ambiguous(self, name: str) -> tuple[str, ...]:
        """The catalog keys an ambiguous alias could mean ("H100": the SXM5, PCIe and NVL parts), else ().

        An alias is ambiguous when its tokens fit more than one catalog key: "H100" names a family of
        three parts whose power limits, clocks, MIG profiles and memory differ, so resolving it to one
        of them would check the spec against facts of a part the host may not have. Catalog keys and
        aliases that name one part ("H100-SXM", "NVIDIA H100 80GB HBM3") are not ambiguous.
        """
        if not isinstance(name, str) or name in self._gpus or _norm(name) in {_norm(k) for k in self._gpus}:
            return ()
        if self.resolve_name(name) is None:
            return ()
        want = _tokens(name)
        fits = tuple(k for k in self._gpus
                     if _tokens(k)[0] == want[0] and _shared(want[1:], _tokens(k)[1:]) == len(want) - 1)
        return fits if len(fits) > 1 else ()

    def hint(self, name: str) -> str | None:
        """One sentence for an unknown-GPU diagnostic (K901): the variant's reason, else the closest names.

        When several parts of the family fit equally well ("H100-80GB": the SXM5 and the PCIe card),
        all of them are named: picking one would be a guess.
        """
        v = self.variant(name)
        if v is not None:
            tail = f"; the nearest catalog GPU is {v.base!r}" if v.base else ""
            return f"{name!r} is not in the catalog: {v.reason}{tail}"
        close = self.suggest(name)
        if not close:
            return None
        family = self._family_ranked(name)
        if family and family[0] == close[0]:
            want = _tokens(name)
            best = _shared(want, _tokens(family[0]))
            tied = [k for k in self._gpus if k in family and _shared(want, _tokens(k)) == best]
            if len(tied) > 1:
                return "did you mean one of " + ", ".join(repr(k) for k in tied) + "?"
        return f"did you mean {close[0]!r}?"

    @property
    def variants(self) -> dict[str, tuple[str | None, str]]:
        """Variant spelling -> (base key or None, reason), as the table lists them."""
        return {v.name: (v.base, v.reason) for v in self._variants.values()}

    def variant_sources(self, name: str) -> tuple[str, ...]:
        v = self.variant(name)
        return v.sources if v is not None else ()

    def notes(self, name: str) -> tuple[str, ...]:
        key = self.resolve_name(name)
        return self._notes.get(key, ()) if key else ()

    def source(self, key: str) -> str:
        """`url (description)` for a source key; KeyError if unknown."""
        return describe_source(self._sources[key])

    @property
    def source_keys(self) -> list[str]:
        return list(self._sources)


@lru_cache(maxsize=1)
def load_gpu_catalog() -> GpuCatalog:
    text = resources.read_data("catalog", "data", "gpus.json")
    return GpuCatalog.from_dict(json.loads(text))


def gpu_from_lgip(text: str, base: GpuSpec, lgipp: str | None = None) -> GpuSpec:
    """``base`` with MIG profiles taken from a captured `nvidia-smi mig -lgip` (and optional `-lgipp`).

    Raises LgipParseError on a malformed capture.
    """
    profiles = profiles_from_lgip(text, base, lgipp)
    mig = base.mig
    if not mig.supported:
        slots = max(p.placements[-1] + p.placement_size for p in profiles)
        mig = MigGeometry(supported=True, max_instances=max(p.max_count for p in profiles),
                          compute_slices=max(p.compute_slices for p in profiles), memory_slices=slots)
    return dataclasses.replace(base, mig=dataclasses.replace(mig, profiles=profiles))
