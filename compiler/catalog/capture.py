"""A host's captured `nvidia-smi mig -lgip` / `-lgipp` output, tied to the one catalog GPU it came from.

MIG profile names, IDs and placements depend on the GPU model and the driver, so a capture from the
target host beats the catalog, but only for hosts of the GPU it was taken on: an H100 capture says
nothing about an A100 host. ``read_capture`` splits and parses the text (one file holding both outputs,
in either order, or one file each), ``identify`` names the catalog GPUs a capture fits, and
``gpu_with_capture`` puts its profiles into a ``GpuSpec``, marked with the capture file as their source.

Everything here is pure: texts in, values out; errors are ``LgipParseError`` with the file's display
name and a 1-based line, or ``CaptureMismatchError`` when a capture is applied to another GPU.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from .lgip import LgipParseError, LgipProfile, LgippPlacement, build_profiles, parse_lgip, parse_lgipp, \
    parse_profile_name
from .types import WEAK_STATUSES, GpuSpec, MigGeometry, MigProfile

__all__ = [
    "CAPTURE_SOURCE_PREFIX",
    "Capture",
    "CaptureMismatchError",
    "capture_sources",
    "gpu_with_capture",
    "identify",
    "read_capture",
]

#: ``GpuSpec.sources`` entries that name a capture file rather than a catalog source key.
CAPTURE_SOURCE_PREFIX = "capture:"

#: A full-GPU MIG instance keeps at least this share of the GPU's SMs (A100: 98 of 108; Hopper, A30 and
#: RTX PRO 6000: all of them). Used only where the catalog has no trustworthy SM count for the profile.
_FULL_PROFILE_MIN_SM_SHARE = 0.9


class CaptureMismatchError(ValueError):
    """A capture applied to a GPU it was not taken on; ``source`` is the capture's display name."""

    def __init__(self, message: str, source: str) -> None:
        super().__init__(f"{source}: {message}")
        self.message = message
        self.source = source


@dataclass(frozen=True)
class Capture:
    """Parsed `-lgip` rows (every GPU the host listed) and, when captured, its `-lgipp` lines."""

    profiles: tuple[LgipProfile, ...]
    placements: tuple[LgippPlacement, ...] | None = None
    lgip_source: str = "capture"
    lgipp_source: str | None = None

    @property
    def gpu_indexes(self) -> tuple[int, ...]:
        return tuple(sorted({r.gpu for r in self.profiles}))

    def rows(self, gpu: int | None = None) -> tuple[LgipProfile, ...]:
        """`-lgip` rows of one GPU index (default: the first listed)."""
        index = self.profiles[0].gpu if gpu is None else gpu
        return tuple(r for r in self.profiles if r.gpu == index)

    def placement_lines(self, gpu: int | None = None) -> tuple[LgippPlacement, ...]:
        """`-lgipp` lines of one GPU index (default: the first listed in `-lgip`); empty without `-lgipp`."""
        index = self.profiles[0].gpu if gpu is None else gpu
        return tuple(p for p in self.placements or () if p.gpu == index)

    @property
    def full_profile(self) -> LgipProfile:
        """The full-GPU profile: most compute slices, then most memory, preferring one without attributes."""
        rows = self.rows()
        plain = [r for r in rows if not parse_profile_name(r.name)[2]] or list(rows)
        return max(plain, key=lambda r: parse_profile_name(r.name)[:2])

    @property
    def full_placement_size(self) -> int | None:
        """Memory slots of the full-GPU profile as `-lgipp` prints them (8 or 4), None without `-lgipp`."""
        full = self.full_profile
        for p in self.placement_lines():
            if p.profile_id == full.id:
                return p.size
        return None

    @property
    def sources(self) -> tuple[str, ...]:
        """Display names of the files this capture came from (`-lgip` first)."""
        names = [self.lgip_source]
        if self.lgipp_source is not None and self.lgipp_source not in names:
            names.append(self.lgipp_source)
        return tuple(names)

    def describe(self) -> str:
        full = self.full_profile
        return f"full-GPU profile {full.name} with {full.sm} SMs"

    def mismatch(self, gpu: GpuSpec) -> str | None:
        """Why this capture cannot be from ``gpu`` (None when it can). See ``identify`` for the rule."""
        mine = self.describe()
        if not gpu.mig.supported or not gpu.mig.profiles:
            return f"the capture ({mine}) is MIG output, and {gpu.name} has no MIG"
        cat = _catalog_full_profile(gpu)
        full = self.full_profile
        g, gb, _ = parse_profile_name(full.name)
        theirs = f"{gpu.name}'s full-GPU profile is {cat.name}"
        if g != cat.compute_slices:
            return f"the capture's {mine} has {g} compute slices; {theirs} with {cat.compute_slices}"
        if not _same_memory_name(gb, cat.memory_gb):
            return f"the capture's {mine} names {gb} GB; {theirs}"
        if cat.sm is not None and cat.sm_status not in WEAK_STATUSES:
            if full.sm != cat.sm:
                return f"the capture's {mine}; {theirs} with {cat.sm} SMs"
        elif gpu.sms is not None:
            low = int(gpu.sms * _FULL_PROFILE_MIN_SM_SHARE)
            if not low <= full.sm <= gpu.sms:
                return (f"the capture's {mine}; {gpu.name} has {gpu.sms} SMs, so its full-GPU profile has "
                        f"{low}-{gpu.sms}")
        size = self.full_placement_size
        if size is not None and size != gpu.mig.memory_slices:
            return (f"the capture's {full.name} spans {size} memory slots in -lgipp; {gpu.name} has "
                    f"{gpu.mig.memory_slices}")
        return None

    def matches(self, gpu: GpuSpec) -> bool:
        """True when this capture can come from a ``gpu`` host (see ``identify``)."""
        return self.mismatch(gpu) is None


def _catalog_full_profile(gpu: GpuSpec) -> MigProfile:
    full = [p for p in gpu.mig.profiles if p.compute_slices == gpu.mig.compute_slices and not p.attributes]
    return full[0] if full else max(gpu.mig.profiles, key=lambda p: (p.compute_slices, p.memory_gb))


def _same_memory_name(captured_gb: int, catalog_gb: int) -> bool:
    # Profile names follow the memory the driver reports, so one GPU's full profile drifts by a GB or
    # three across drivers (A100 80GB: 7g.80gb / 7g.79gb; GB200: 7g.186gb / 7g.189gb, about 1.6%), while
    # distinct GPUs with the same SMs differ by 2% or more (H100 NVL 94 vs GH200 96, H200 141 vs GH200 144).
    return abs(captured_gb - catalog_gb) <= max(1, int(0.0175 * catalog_gb))


def identify(capture: Capture, catalog: Iterable[GpuSpec]) -> list[str]:
    """Names of the catalog GPUs ``capture`` can have come from, in catalog order.

    The capture is identified by its full-GPU profile: the `-lgip` row with the most compute slices
    (then the most memory; a plain profile before its ``+gfx``-style twins), e.g. ``7g.80gb``, ``7g.79gb``,
    ``7g.141gb`` or ``4g.96gb``. A catalog GPU fits when

    - it has MIG, and its own full-GPU profile has the same number of compute slices (the ``7g``);
    - the memory in the two names agrees up to driver rounding (names follow the memory the driver
      reports: ``7g.79gb`` from an older driver is the A100 80GB's ``7g.80gb``, while ``7g.141gb`` is not
      the GH200's ``7g.144gb``): at most 1 GB or 1.75% apart;
    - the full profile's SM count equals the catalog's for that profile where the catalog has it as
      verified or partially verified (A100 98, H100 SXM5 132, RTX PRO 6000 188); otherwise it lies between
      90% and 100% of the catalog's ``GpuSpec.sms`` (an A100's 98-SM full profile is not an H100 PCIe's, whose
      die has 114 SMs; an H100 SXM5's 132 SMs exceed it);
    - with `-lgipp`, the full profile spans the catalog's number of memory slots (8 or 4).

    Boards that share die, memory and MIG geometry (A100 SXM4 and PCIe 80GB, H200 SXM and NVL) cannot be
    told apart from MIG output, so a capture may fit more than one catalog GPU; it fits no other.
    """
    return [gpu.name for gpu in catalog if capture.matches(gpu)]


def gpu_with_capture(gpu: GpuSpec, capture: Capture) -> GpuSpec:
    """``gpu`` with MIG profiles, IDs, SMs, memory and (with `-lgipp`) placements from ``capture``.

    Raises CaptureMismatchError when the capture is not from a ``gpu`` host, LgipParseError when a
    profile's placements are unknown (no `-lgipp` line, no catalog profile with that ID, no ID pattern).
    Placements from `-lgipp` are "verified"; ``GpuSpec.sources`` starts with ``capture:<file>`` entries
    (``capture_sources``), so a diagnostic can name the capture file instead of the catalog.
    """
    reason = capture.mismatch(gpu)
    if reason is not None:
        raise CaptureMismatchError(reason, capture.lgip_source)
    rows = list(capture.rows())
    lines = list(capture.placement_lines())
    source = capture.lgipp_source if lines else capture.lgip_source
    profiles = build_profiles(rows, lines, gpu, source)
    full = next(p for p in profiles if p.name == capture.full_profile.name)
    mig = MigGeometry(supported=True, max_instances=max(p.max_count for p in profiles),
                      compute_slices=full.compute_slices, memory_slices=full.placement_size,
                      min_driver=gpu.mig.min_driver, profiles=profiles)
    tagged = tuple(CAPTURE_SOURCE_PREFIX + s for s in capture.sources)
    return dataclasses.replace(gpu, mig=mig, sources=tagged + tuple(s for s in gpu.sources if s not in tagged))


def capture_sources(gpu: GpuSpec) -> tuple[str, ...]:
    """Display names of the capture files behind ``gpu``'s MIG facts (empty for a catalog entry)."""
    return tuple(s[len(CAPTURE_SOURCE_PREFIX):] for s in gpu.sources if s.startswith(CAPTURE_SOURCE_PREFIX))


# ------------------------------------------------------------------------------------------------ reading

_LGIPP_LINE = re.compile(r"GPU\s+\S+\s+Profile\s+ID\b")
_COMMAND = re.compile(r"(?:^|[\s$#>])nvidia-smi(?:\s|$)")


def _kind(stripped: str) -> str | None:
    """"lgip", "lgipp", None for a line that belongs to neither (blank, comment, prompt), or "garbage"."""
    if not stripped or stripped.startswith("#"):
        return None
    if stripped[0] in "+|":
        return "lgip"
    if _LGIPP_LINE.match(stripped):
        return "lgipp"
    if stripped.startswith("$") or _COMMAND.search(stripped):
        return None  # a shell prompt or the command that printed the block
    return "garbage"


@dataclass(frozen=True)
class _Block:
    kind: str
    source: str
    text: str  # the file's text with every line outside the block blanked, so line numbers stay the file's
    first_line: int


def _blocks(source: str, text: str) -> list[_Block]:
    if not isinstance(text, str):
        raise LgipParseError("capture must be text", 1, source)
    lines = text.splitlines()
    runs: list[tuple[str, list[int]]] = []
    for n, raw in enumerate(lines, 1):
        kind = _kind(raw.strip())
        if kind is None:
            continue
        if kind == "garbage":
            raise LgipParseError(f"neither `nvidia-smi mig -lgip` nor `-lgipp` output: {raw.strip()[:60]!r}", n,
                                 source)
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(n)
        else:
            runs.append((kind, [n]))
    out = []
    for kind, numbers in runs:
        keep = set(numbers)
        body = "\n".join(raw if n in keep else "" for n, raw in enumerate(lines, 1))
        out.append(_Block(kind, source, body, numbers[0]))
    return out


def read_capture(texts: Sequence[tuple[str, str]]) -> Capture:
    """Parse captured `nvidia-smi mig -lgip` and `-lgipp` output into a ``Capture``.

    ``texts`` holds ``(display name, text)`` pairs: one file with both outputs (in either order, with or
    without the commands and shell prompts that printed them) or one file per output. Exactly one `-lgip`
    table and at most one `-lgipp` listing are accepted. All GPUs in the table must list the same profiles
    (one GPU model per capture); `-lgipp` must give a placement line for every profile of the first GPU
    and none for a profile or GPU the table lacks. Anything else raises LgipParseError naming the file and
    its 1-based line.
    """
    texts = list(texts)
    if not texts:
        raise LgipParseError("no capture given", 1)
    lgip: list[_Block] = []
    lgipp: list[_Block] = []
    for source, text in texts:
        for block in _blocks(source, text):
            (lgip if block.kind == "lgip" else lgipp).append(block)
    if not lgip:
        source, text = texts[0]
        where = max(1, len(text.splitlines()) if isinstance(text, str) else 1)
        raise LgipParseError("no `nvidia-smi mig -lgip` table found", where, source)
    for extra, kind in ((lgip[1:], "-lgip table"), (lgipp[1:], "-lgipp listing")):
        if extra:
            first = (lgip if kind == "-lgip table" else lgipp)[0]
            raise LgipParseError(f"a second {kind} (the first is at {first.source} line {first.first_line}); "
                                 "give one capture per GPU model", extra[0].first_line, extra[0].source)
    table = lgip[0]
    rows = _parse(parse_lgip, table)
    _check_same_gpus(rows, table.source)
    if not lgipp:
        return Capture(tuple(rows), None, table.source, None)
    listing = lgipp[0]
    placements = _parse(parse_lgipp, listing)
    _check_placements(rows, placements, table.source, listing.source)
    return Capture(tuple(rows), tuple(placements), table.source, listing.source)


def _parse(parse, block: _Block):
    try:
        return parse(block.text)
    except LgipParseError as e:
        raise LgipParseError(e.message, e.line, block.source) from None


def _signature(rows: Iterable[LgipProfile]) -> list[tuple[str, int, int, int]]:
    return [(r.name, r.id, r.total, r.sm) for r in rows]


def _check_same_gpus(rows: list[LgipProfile], source: str) -> None:
    first = rows[0].gpu
    want = _signature(r for r in rows if r.gpu == first)
    for gpu in sorted({r.gpu for r in rows} - {first}):
        mine = [r for r in rows if r.gpu == gpu]
        if _signature(mine) != want:
            raise LgipParseError(f"GPU {gpu} lists other MIG profiles than GPU {first}: capture one GPU model "
                                 "per capture", mine[0].line, source)


def _check_placements(rows: list[LgipProfile], placements: list[LgippPlacement], lgip_source: str,
                      lgipp_source: str) -> None:
    ids = {(r.gpu, r.id) for r in rows}
    gpus = {r.gpu for r in rows}
    seen: set[tuple[int, int]] = set()
    for p in placements:
        if p.gpu not in gpus:
            raise LgipParseError(f"-lgipp line for GPU {p.gpu}, which the -lgip table does not list", p.line,
                                 lgipp_source)
        if (p.gpu, p.profile_id) not in ids:
            raise LgipParseError(f"profile ID {p.profile_id} is not in the -lgip table of GPU {p.gpu}", p.line,
                                 lgipp_source)
        if (p.gpu, p.profile_id) in seen:
            raise LgipParseError(f"a second -lgipp line for GPU {p.gpu} profile ID {p.profile_id}", p.line,
                                 lgipp_source)
        if p.size < 1:
            raise LgipParseError("placement size must be at least 1", p.line, lgipp_source)
        seen.add((p.gpu, p.profile_id))
    first = rows[0].gpu
    for r in rows:
        if r.gpu == first and (first, r.id) not in seen:
            raise LgipParseError(f"profile ID {r.id} ({r.name}) has no -lgipp placement line", r.line, lgip_source)
    slots = max(p.size for p in placements if p.gpu == first)
    for p in placements:
        if p.gpu == first and any(s + p.size > slots for s in p.placements):
            raise LgipParseError(f"placements {{{','.join(map(str, p.placements))}}}:{p.size} do not fit "
                                 f"{slots} memory slots", p.line, lgipp_source)
