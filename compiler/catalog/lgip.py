"""Parsers for captured ``nvidia-smi mig -lgip`` and ``nvidia-smi mig -lgipp`` text.

Profile names and counts depend on the driver (7g.80gb vs 7g.79gb), so a capture from the target host
is more trustworthy than the catalog. The parsers are strict: any line they cannot account for raises
``LgipParseError`` with its 1-based line number, so a truncated paste never yields a partial layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .types import GpuSpec, MigProfile, Status

__all__ = [
    "LgipParseError",
    "LgipProfile",
    "LgippPlacement",
    "NAME_RE",
    "build_profiles",
    "parse_lgip",
    "parse_lgipp",
    "parse_profile_name",
    "profiles_from_lgip",
    "render_lgip",
    "render_lgipp",
]


class LgipParseError(ValueError):
    """Malformed capture; ``line`` is 1-based, ``source`` the capture's display name when known."""

    def __init__(self, message: str, line: int, source: str | None = None) -> None:
        super().__init__(f"{source}: line {line}: {message}" if source else f"line {line}: {message}")
        self.message = message
        self.line = line
        self.source = source


@dataclass(frozen=True)
class LgipProfile:
    """One profile block of `-lgip` (two table rows)."""

    gpu: int
    name: str  # without the "MIG " prefix
    id: int
    free: int
    total: int
    memory_gib: float
    p2p: bool
    sm: int
    dec: int
    enc: int
    ce: int
    jpeg: int
    ofa: int
    line: int = field(default=0, compare=False)  # where the block starts

    @property
    def memory_mib(self) -> int:
        return round(self.memory_gib * 1024)


@dataclass(frozen=True)
class LgippPlacement:
    """One `-lgipp` line: `GPU 0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1`."""

    gpu: int
    profile_id: int
    placements: tuple[int, ...]
    size: int
    line: int = field(default=0, compare=False)


# [<c>c.]<g>g.<gb>gb[+attr[,attr]] or <g>g.<gb>gb-attr (go-nvlib parseMigProfile grammar)
NAME_RE = re.compile(r"(?:([0-9]{1,3})c\.)?([0-9]{1,3})g\.([0-9]{1,5})gb(?:\+([a-z.]+(?:,[a-z.]+)*)|-([a-z.]+))?")
_ATTRS = {"me", "me.all", "gfx"}


def parse_profile_name(name: str) -> tuple[int, int, tuple[str, ...]]:
    """Return (compute slices, memory GB, attributes) of a GI profile name; ValueError if malformed."""
    m = NAME_RE.fullmatch(name) if isinstance(name, str) else None
    if not m:
        raise ValueError(f"malformed MIG profile name {name!r}")
    if m.group(4):
        attrs = tuple(m.group(4).split(","))
    elif m.group(5):
        attrs = ("-" + m.group(5),)
    else:
        attrs = ()
    if any(a.lstrip("-") not in _ATTRS for a in attrs):
        raise ValueError(f"unknown attribute in MIG profile name {name!r}")
    return int(m.group(2)), int(m.group(3)), attrs


def _int(tok: str, what: str, line: int) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", tok):
        raise LgipParseError(f"{what} {tok!r} is not a non-negative integer", line)
    return int(tok)


def _cells(raw: str, line: int) -> list[str]:
    s = raw.strip()
    if not (s.startswith("|") and s.endswith("|")) or len(s) < 2:
        raise LgipParseError(f"expected a table row '| ... |', got {raw.strip()[:60]!r}", line)
    return s[1:-1].split()


def _is_border(s: str) -> bool:
    return bool(re.fullmatch(r"\+-+\+", s))


def _is_header(cells: list[str]) -> bool:
    text = " ".join(cells)
    return text.startswith("GPU instance profiles") or text.startswith("GPU Name") or "Free/Total" in text


def parse_lgip(text: str) -> list[LgipProfile]:
    """Parse the `-lgip` box table. Blank lines, `#` comments and a `$ command` prompt are skipped."""
    if not isinstance(text, str):
        raise LgipParseError("capture must be text", 1)
    profiles: list[LgipProfile] = []
    state = "before"  # before -> header -> (row1 -> row2 -> border)*
    pending: list[str] | None = None
    start = 0
    last = 1
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#") or (state == "before" and s.startswith("$")):
            continue
        last = n
        if state == "before":
            if not _is_border(s):
                raise LgipParseError(f"expected the -lgip table border, got {s[:60]!r}", n)
            state = "header"
        elif state == "header":
            if re.fullmatch(r"\|=+\|", s):
                state = "row1"
            elif not _is_header(_cells(raw, n)):
                raise LgipParseError(f"unexpected line in the table header: {s[:60]!r}", n)
        elif state == "row1":
            if _is_border(s):
                continue  # tolerate a doubled border
            pending, start, state = _cells(raw, n), n, "row2"
        elif state == "row2":
            profiles.append(_profile(pending or [], _cells(raw, n), start, n))
            state = "border"
        elif state == "border":
            if not _is_border(s):
                raise LgipParseError(f"expected a border after the profile block, got {s[:60]!r}", n)
            state = "row1"
    if state == "before":
        raise LgipParseError("no -lgip table found", last)
    if state in ("header", "row2", "border"):
        raise LgipParseError("table is truncated", last)
    if not profiles:
        raise LgipParseError("table lists no GPU instance profiles", last)
    return profiles


def _profile(row1: list[str], row2: list[str], n1: int, n2: int) -> LgipProfile:
    cells = row1[:]
    if len(cells) >= 2 and cells[1] == "MIG":
        del cells[1]
    if len(cells) != 9:
        raise LgipParseError(
            f"expected 9 columns (GPU Name ID Free/Total GiB P2P SM DEC ENC), got {len(cells)}", n1)
    gpu_s, name, id_s, ft, mem, p2p, sm, dec, enc = cells
    try:
        parse_profile_name(name)
    except ValueError as exc:
        raise LgipParseError(str(exc), n1) from None
    m = re.fullmatch(r"([0-9]{1,9})/([0-9]{1,9})", ft)
    if not m:
        raise LgipParseError(f"instances {ft!r} is not 'free/total'", n1)
    if not re.fullmatch(r"[0-9]{1,9}(?:\.[0-9]{1,9})?", mem):
        raise LgipParseError(f"memory {mem!r} is not a GiB number", n1)
    if p2p not in ("Yes", "No"):
        raise LgipParseError(f"P2P {p2p!r} is not Yes/No", n1)
    if len(row2) != 3:
        raise LgipParseError(f"expected 3 columns (CE JPEG OFA), got {len(row2)}", n2)
    return LgipProfile(
        gpu=_int(gpu_s, "GPU index", n1), name=name, id=_int(id_s, "profile ID", n1),
        free=int(m.group(1)), total=int(m.group(2)), memory_gib=float(mem), p2p=p2p == "Yes",
        sm=_int(sm, "SM count", n1), dec=_int(dec, "DEC count", n1), enc=_int(enc, "ENC count", n1),
        ce=_int(row2[0], "CE count", n2), jpeg=_int(row2[1], "JPEG count", n2),
        ofa=_int(row2[2], "OFA count", n2), line=n1,
    )


_LGIPP_RE = re.compile(r"^GPU\s+(\S+)\s+Profile\s+ID\s+(\S+)\s+Placements?\s*:\s*\{([^}]*)\}:(\S+)$")


def parse_lgipp(text: str) -> list[LgippPlacement]:
    """Parse `-lgipp` lines; blank lines and `#`/`$` lines are skipped."""
    if not isinstance(text, str):
        raise LgipParseError("capture must be text", 1)
    out: list[LgippPlacement] = []
    last = 1
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s[0] in "#$":
            continue
        last = n
        m = _LGIPP_RE.match(s)
        if not m:
            raise LgipParseError(f"expected 'GPU <n> Profile ID <id> Placements: {{...}}:<size>', got {s[:60]!r}", n)
        starts = [t.strip() for t in m.group(3).split(",")]
        if starts == [""]:
            raise LgipParseError("empty placement set", n)
        out.append(LgippPlacement(
            gpu=_int(m.group(1), "GPU index", n), profile_id=_int(m.group(2), "profile ID", n),
            placements=tuple(_int(t, "placement start", n) for t in starts),
            size=_int(m.group(4), "placement size", n), line=n))
    if not out:
        raise LgipParseError("no -lgipp placement lines found", last)
    return out


# GI profile ID -> (memory slices, placement starts) for the two known geometries.
_PATTERN_8 = {19: (1, (0, 1, 2, 3, 4, 5, 6)), 20: (1, (0, 1, 2, 3, 4, 5, 6)), 15: (2, (0, 2, 4, 6)),
              14: (2, (0, 2, 4)), 9: (4, (0, 4)), 5: (4, (0,)), 0: (8, (0,))}
_PATTERN_4 = {14: (1, (0, 1, 2, 3)), 21: (1, (0, 1, 2, 3)), 47: (1, (0, 1, 2, 3)), 65: (1, (0, 1, 2, 3)),
              67: (1, (0, 1, 2, 3)), 5: (2, (0, 2)), 6: (2, (0, 2)), 35: (2, (0, 2)), 64: (2, (0, 2)), 66: (2, (0, 2)),
              0: (4, (0,)), 32: (4, (0,))}


def profiles_from_lgip(lgip_text: str, base: GpuSpec | None = None,
                       lgipp_text: str | None = None) -> tuple[MigProfile, ...]:
    """Build MigProfiles for the first GPU in a `-lgip` capture.

    Placements come from `-lgipp` when given (measured on the same host), else from ``base``'s profile
    with the same ID, else from the ID pattern of the GPU's slot count (status "inferred").
    """
    rows = parse_lgip(lgip_text)
    gpu = rows[0].gpu
    rows = [r for r in rows if r.gpu == gpu]
    pp = [p for p in parse_lgipp(lgipp_text) if p.gpu == gpu] if lgipp_text else []
    return build_profiles(rows, pp, base)


def build_profiles(rows: list[LgipProfile], placements: list[LgippPlacement], base: GpuSpec | None = None,
                   source: str | None = None) -> tuple[MigProfile, ...]:
    """MigProfiles from one GPU's `-lgip` rows and its `-lgipp` lines (which may be empty).

    Placements: the `-lgipp` line of the same ID ("verified"), else ``base``'s profile with that ID (its
    status), else the ID pattern of the GPU's slot count ("inferred"); LgipParseError (naming ``source``
    and the row's line) when none applies.
    """
    pp = {p.profile_id: p for p in placements}
    known = {p.id: p for p in base.mig.profiles} if base else {}
    slots = base.mig.memory_slices if base and base.mig.memory_slices else 8
    pattern = _PATTERN_4 if slots == 4 else _PATTERN_8
    out = []
    for r in rows:
        g, gb, attrs = parse_profile_name(r.name)
        status: Status
        if r.id in pp:
            starts, size, status = pp[r.id].placements, pp[r.id].size, "verified"
        elif r.id in known:
            k = known[r.id]
            starts, size, status = k.placements, k.placement_size, k.placement_status
        elif r.id in pattern:
            size, starts = pattern[r.id]
            status = "inferred"
        else:
            raise LgipParseError(f"no placements known for profile ID {r.id}; pass the -lgipp capture", r.line,
                                 source)
        out.append(MigProfile(
            name=r.name, id=r.id, compute_slices=g, memory_slices=size, memory_gb=gb, max_count=r.total,
            placements=tuple(starts), placement_size=size, attributes=attrs, sm=r.sm, memory_mib=r.memory_mib,
            id_status="verified", placement_status=status, sm_status="verified"))
    return tuple(out)


def render_lgip(profiles: list[LgipProfile]) -> str:
    """Render records in the `-lgip` box layout (used for fixtures and round-trip tests)."""
    body = []
    for p in profiles:
        body.append((f"{p.gpu:>3}  MIG {p.name:<16}{p.id:>3}{p.free:>6}/{p.total:<6}{p.memory_gib:>8.2f}"
                     f"       {'Yes' if p.p2p else 'No':<4}{p.sm:>6}{p.dec:>6}{p.enc:>6}  ",
                     f"{'':>45}{p.ce:>6}{p.jpeg:>6}{p.ofa:>6}  "))
    header = ["GPU instance profiles:",
              "GPU   Name                ID    Instances   Memory     P2P    SM    DEC   ENC",
              "                                Free/Total   GiB              CE    JPEG  OFA"]
    width = max(len(x) for x in header + [s for pair in body for s in pair]) + 1
    border = "+" + "-" * width + "+"
    lines = [border] + [f"| {h:<{width - 1}}|" for h in header] + ["|" + "=" * width + "|"]
    for a, b in body:
        lines += [f"| {a:<{width - 1}}|", f"| {b:<{width - 1}}|", border]
    return "\n".join(lines) + "\n"


def render_lgipp(placements: list[LgippPlacement]) -> str:
    return "".join(
        f"GPU {p.gpu:>2} Profile ID {p.profile_id:>2} Placements: {{{','.join(map(str, p.placements))}}}:{p.size}\n"
        for p in placements)
