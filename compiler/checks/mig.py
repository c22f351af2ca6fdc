"""K2xx: MIG layouts: profiles that exist, instance and slice budgets, and an exact placement."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import Iterable

from compiler.catalog.types import WEAK_STATUSES
from compiler.diagnostics import Diagnostic, Severity

from .base import Check, CheckContext, weak_fact_note


def _mig_assignments(ctx: CheckContext):
    """(host name, resolved host, assignment index, slots) for every MIG assignment on a known GPU."""
    for hname, host in ctx.ir.hosts.items():
        if host.gpu is None:
            continue
        for a_idx, slots in host.assignment_slots.items():
            yield hname, host, a_idx, slots


def _captured(host) -> str:
    """" (per the capture FILE)" when the host's MIG facts come from a --gpu-profiles capture."""
    return f" (per the capture {host.gpu_source})" if host.gpu_source != "catalog" else ""


def _path(hname: str, a_idx: int, *rest) -> tuple:
    return ("hosts", hname, "gpus", a_idx, "mig") + rest


class MigUnsupported(Check):
    """The host's GPU model does not support MIG (Multi-Instance GPU).

    MIG exists only on the data-center parts listed in NVIDIA's MIG user guide (A100, A30, H100,
    H200, GH200, B200, GB200, B300, GB300, RTX PRO 6000 Blackwell Server Edition, ...).
    """

    code = "K201"
    name = "mig-unsupported"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, _ in _mig_assignments(ctx):
            if not host.gpu.mig.supported:
                yield ctx.diag(self, _path(hname, a_idx), f"{host.gpu.name} does not support MIG", key=True,
                               help="serve whole GPUs with `serves:` instead")


class UnknownProfile(Check):
    """The MIG profile name does not exist on this GPU.

    Profile names carry the instance's memory, which the driver computes from the memory it
    reports, so names differ between SKUs and sometimes between driver versions (GB200: 1g.24gb
    on older drivers, 1g.23gb on newer ones; A100 80GB once reported 7g.79gb). Check the names
    with `nvidia-smi mig -lgip` on the target, and pass that output with
    `kiln validate --gpu-profiles FILE` to validate against it instead of the catalog.
    """

    code = "K202"
    name = "unknown-mig-profile"
    order = 30

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, slots in _mig_assignments(ctx):
            if not host.gpu.mig.supported:
                continue
            names = host.gpu.mig.profile_names
            for slot in slots:
                if slot.profile is not None:
                    continue
                given = slot.instance.profile
                close = difflib.get_close_matches(given, names, n=1, cutoff=0.5)
                hint = _same_shape(given, names)
                captured = host.gpu_source != "catalog"
                help = (f"did you mean {(hint or close[0])!r}? " if (hint or close) else "") + \
                    f"profiles on {host.gpu.name}: " + ", ".join(names)
                if hint and not captured:
                    help += ("; names carry the memory the driver reports, so they can differ by driver: "
                             "validate against your hosts' `nvidia-smi mig -lgip` with --gpu-profiles")
                where = _captured(host)
                yield ctx.diag(self, _path(hname, a_idx, slot.instance_index, "profile"),
                               f"MIG profile {given!r} does not exist on {host.gpu.name}{where}", help=help)


_NAME = re.compile(r"^(\d+)g\.(\d+)gb(.*)$")


def _same_shape(given: str, names: list[str]) -> str | None:
    """A profile with the same slice count and attributes but another memory figure (7g.80gb vs 7g.79gb)."""
    m = _NAME.match(given)
    if not m:
        return None
    g, mem, attrs = int(m.group(1)), int(m.group(2)), m.group(3)
    best = None
    for n in names:
        k = _NAME.match(n)
        if k and int(k.group(1)) == g and k.group(3) == attrs:
            if best is None or abs(int(k.group(2)) - mem) < abs(int(_NAME.match(best).group(2)) - mem):
                best = n
    return best


class _LayoutCheck(Check):
    """Shared walk over layouts whose profiles all resolved (no `code`: not a rule itself)."""

    def layouts(self, ctx: CheckContext):
        for hname, host, a_idx, slots in _mig_assignments(ctx):
            if host.gpu.mig.supported and all(s.profile is not None for s in slots):
                yield hname, host, a_idx, slots


class ProfileCountExceeded(_LayoutCheck):
    """More instances of one profile than the GPU allows (the `max` column of `nvidia-smi mig -lgip`).

    Example: at most 3 instances of 2g.20gb and 2 of 3g.40gb on an H100 80GB.
    """

    code = "K203"
    name = "mig-profile-count"
    order = 31

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, slots in self.layouts(ctx):
            counts = Counter(s.profile.name for s in slots)
            for name, n in sorted(counts.items()):
                prof = host.gpu.mig.profile(name)
                if n > prof.max_count and not prof.has_media_extensions:  # K206 says it better
                    last = [s for s in slots if s.profile.name == name][-1]
                    yield ctx.diag(self, _path(hname, a_idx, last.instance_index, "profile"),
                                   f"{n} instances of {name} on {host.gpu.name}; at most {prof.max_count} fit"
                                   f"{_captured(host)}",
                                   help=f"use at most {prof.max_count}, or a smaller profile for the rest")


class InstanceCountExceeded(_LayoutCheck):
    """More GPU instances than the GPU supports (7 on 7-slice GPUs, 4 on RTX PRO 6000 Blackwell)."""

    code = "K204"
    name = "mig-instance-count"
    order = 31

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, slots in self.layouts(ctx):
            limit = host.gpu.mig.max_instances
            if len(slots) > limit:
                yield ctx.diag(self, _path(hname, a_idx), key=True,
                               message=f"{len(slots)} MIG instances on one {host.gpu.name}; at most {limit}"
                                       f"{_captured(host)}")


class ComputeSlicesExceeded(_LayoutCheck):
    """The instances need more compute (SM) slices than the GPU has (7 on A100/H100/H200/B200/...).

    A profile named `<g>g.<mem>gb` takes g compute slices; the sum over one GPU's instances must
    not exceed the GPU's compute slices.
    """

    code = "K205"
    name = "mig-compute-slices"
    order = 31

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, slots in self.layouts(ctx):
            used = sum(s.profile.compute_slices for s in slots)
            limit = host.gpu.mig.compute_slices
            if used > limit:
                parts = " + ".join(f"{s.profile.compute_slices} ({s.profile.name})" for s in slots)
                yield ctx.diag(self, _path(hname, a_idx), key=True,
                               message=f"the layout needs {used} compute slices ({parts}); "
                                       f"{host.gpu.name} has {limit}{_captured(host)}")


class MediaExtensionsTwice(_LayoutCheck):
    """More than one `+me` (or `+me.all`) instance on one GPU.

    The media engines (NVDEC, NVJPG, OFA) can be given to a single GPU instance per GPU.
    """

    code = "K206"
    name = "mig-media-extensions"
    order = 31

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, slots in self.layouts(ctx):
            me = [s for s in slots if s.profile.has_media_extensions]
            for extra in me[1:]:
                yield ctx.diag(self, _path(hname, a_idx, extra.instance_index, "profile"),
                               f"a second media-extension instance ({extra.profile.name}) on one GPU; only one "
                               "`+me` instance is allowed per GPU",
                               help="use the profile without `+me` for the other instances")


class Unplaceable(_LayoutCheck):
    """The layout passes the count and slice checks but the instances cannot all be placed.

    GPU instances occupy memory slots from fixed start positions (`nvidia-smi mig -lgipp`); a 4g
    instance can only start at slot 0 and a 3g at slot 0 or 4, so some layouts that add up never
    fit, and others fit only in one creation order. Kiln searches all placements exactly and emits
    explicit `-cgi <id>:<start>` tuples; this error means no placement exists (or a pinned
    `placement` is illegal). Examples: 4x1g.10gb + 3x1g.5gb on an A100 40GB
    (NVIDIA/k8s-test-infra#886).
    """

    code = "K207"
    name = "mig-unplaceable"
    order = 32

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host, a_idx, slots in self.layouts(ctx):
            result = host.placements.get(a_idx)
            if result is None or result.ok:
                continue  # no result: K203-K206 report the layout with a more specific message
            fixed = {i: s.instance.placement for i, s in enumerate(slots) if s.instance.placement is not None}
            notes = []
            weak = sorted({s.profile.placement_status for s in slots} & WEAK_STATUSES)
            if weak:
                notes.append(weak_fact_note(f"the placements of these profiles on {host.gpu.name}", weak[0]))
            pinned = [i for i in result.blocking if i in fixed]
            path = _path(hname, a_idx, pinned[0], "placement") if pinned else _path(hname, a_idx)
            help = ("drop the pinned placement and let Kiln choose one" if pinned else
                    "change the profiles; `kiln catalog GPU` lists their placements")
            yield ctx.diag(self, path, f"MIG layout cannot be placed on {host.gpu.name}{_captured(host)}: "
                                       f"{result.reason}",
                           key=not pinned, notes=notes, help=help)



class LockedPlacementMoved(Check):
    """An instance the lock file places cannot stay at its locked start in the new layout.

    The lock file (`kiln lock`) records where each MIG instance sits, and a changed layout keeps
    every unchanged instance (same profile, same model) where it is whenever a valid placement
    allows. When none does, the instance moves: it is destroyed and created again at another slot,
    and its model stops serving on that GPU meanwhile. This warning names it and says why.
    """

    code = "K208"
    name = "locked-placement-moved"
    severity = Severity.WARNING
    order = 33

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host in ctx.ir.hosts.items():
            for g, moved in sorted(host.moved.items()):
                a_idx = next(i for i, a in enumerate(host.spec.gpus) if g in a.indexes)
                slots = host.assignment_slots[a_idx]
                now = {p.request_index: p.start for p in host.gpu_placements[g].placed}
                for i, why in sorted(moved.items()):
                    inst = slots[i].instance
                    locked = next(e.start for e in host.locked.get(g, ()) if e.profile == inst.profile
                                  and e.serves == inst.serves)
                    yield ctx.diag(self, _path(hname, a_idx, i, "profile"),
                                   f"GPU {g} of host {hname!r}: {inst.profile} serving {inst.serves!r} cannot stay "
                                   f"at slot {locked} ({ctx.ir.lock_file}): {why.rstrip('.')}; it moves to slot {now[i]}",
                                   help="drain it before applying, or change the layout so it can stay")


class LockFileStale(Check):
    """The lock file does not record the placements the spec now gets.

    `kiln lock SPEC` writes the placements of the current layout next to the spec; commit it with
    the spec change, so the next layout change keeps these instances where they are (and a revert
    of both files gives the earlier placements back).
    """

    code = "K209"
    name = "lock-file-stale"
    severity = Severity.WARNING
    order = 34

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.ir.lock_file is None or ctx.ir.set_aside:
            return
        from compiler.ir.lockfile import lock_entries

        current = lock_entries(ctx.ir)
        recorded = {h: dict(host.locked) for h, host in ctx.ir.hosts.items() if host.locked}
        if current != recorded:
            differ = sorted({h for h in set(current) | set(recorded) if current.get(h) != recorded.get(h)})
            yield ctx.diag(self, (), f"{ctx.ir.lock_file} does not record the MIG placements of host"
                                     f"{'s' * (len(differ) > 1)} {', '.join(repr(h) for h in differ)} as the spec "
                                     "now places them", file=ctx.ir.lock_file,
                           help=f"run `kiln lock {ctx.ir.document.file}` and commit the lock file with the spec")
