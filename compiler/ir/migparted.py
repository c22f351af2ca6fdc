"""mig-parted's own parsing rules for a config (`mig-configs` document) and a MIG profile name, so
that a layout it would refuse never reaches a node. Below both the node-layer emitter
(compiler/targets/kubernetes/nodelayer.py) and the checks (K252), which must agree on them; and
the entries of a node's config, which the node layer (ir/pools.py) and the host script write alike."""

from __future__ import annotations

import re
from typing import Iterable

# From NVIDIA/mig-parted: api/spec/v1/spec.go (Spec.UnmarshalJSON, MigConfigSpec.UnmarshalJSON) at
# commit 28f9599079a99135a96413ef63137ca84a6895f0, pkg/types/mig_profile.go (ParseMigProfile) at
# 1198f76e13f657d099ab1531e106b38d3825c2d7 and pkg/types/mig_config.go (MigConfig.AssertValid) at
# 6c4d01a373f112914c5799bff4460656b6bbbc02. mig-parted reads YAML through its JSON form.
SLICE_COUNTS = frozenset({1, 2, 3, 4, 6, 7, 8})  # the NVML compute/GPU instance profiles it maps
ATTRIBUTES = frozenset({"me"})  # AttributeMediaExtensions: the only attribute it knows
ENTRY_KEYS = frozenset({"device-filter", "devices", "mig-enabled", "mig-devices"})
_ATOI = re.compile(r"[+-]?[0-9]+")  # strconv.Atoi


def _field(text: str, suffix: str) -> tuple[int | None, str | None]:
    if text.strip() != text:
        return None, f"leading or trailing spaces on '%d{suffix}'"
    if not text.endswith(suffix):
        return None, f"missing '{suffix}' from '%d{suffix}'"
    number = text[: -len(suffix)]
    if not _ATOI.fullmatch(number):
        return None, f"malformed number in '%d{suffix}'"
    return int(number), None


def mig_profile_problem(profile: str) -> str | None:
    """Why mig-parted's ParseMigProfile refuses a profile name ([<C>c.]<G>g.<GB>gb[+<attr>,...]), or None."""
    if not profile:
        return "empty MigProfile string"
    base, plus, attrs = profile.partition("+")
    if plus:
        seen: set[str] = set()
        for a in attrs.split(","):
            if a in seen:
                return "non unique attribute in list"
            if a == "":
                return "empty attribute in list"
            if a.strip() != a:
                return "leading or trailing spaces in attribute"
            if a[0].isdigit():
                return "attribute begins with a number"
            if not a.isascii() or not a.isalnum():
                return "non alpha-numeric character or digit in attribute"
            seen.add(a)
    parts = base.split(".", 2)
    if len(parts) == 3:
        fields = [(parts[0], "c"), (parts[1], "g"), (parts[2], "gb")]
    elif len(parts) == 2:
        fields = [(parts[0], "g"), (parts[1], "gb")]
    else:
        return "parsed wrong number of fields, expected 2 or 3"
    values = []
    for text, suffix in fields:
        value, problem = _field(text, suffix)
        if problem:
            return problem
        values.append(value)
    c, g = (values[0], values[1]) if len(values) == 3 else (values[0], values[0])
    if c not in SLICE_COUNTS:
        return f"unknown Compute Instance slice size: {c}"
    if g not in SLICE_COUNTS:
        return f"unknown GPU Instance slice size: {g}"
    for a in (attrs.split(",") if plus else []):
        if a not in ATTRIBUTES:
            return f"unknown MigProfile attribute: {a}"
    return None


def grouped_entries(gpus: Iterable[tuple[int, tuple[tuple[str, int], ...]]]) -> list[dict]:
    """`mig-configs` entries (api/spec/v1 MigConfigSpec) for GPUs given as (index, sorted (profile,
    count) pairs, () for MIG disabled): one entry per layout with the GPUs that have it, in the order
    of their indices. The node layer and the host script write a node's config with it."""
    groups: dict[tuple, list[int]] = {}
    for index, profiles in gpus:
        groups.setdefault(profiles, []).append(index)
    entries = []
    for profiles, devices in sorted(groups.items(), key=lambda kv: kv[1]):
        entry: dict = {"devices": sorted(devices), "mig-enabled": bool(profiles)}
        if profiles:
            entry["mig-devices"] = dict(profiles)
        entries.append(entry)
    return entries


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def mig_parted_problems(doc: object) -> list[str]:
    """Every reason mig-parted would refuse `doc` (a parsed config.yaml); [] when it parses."""
    if not isinstance(doc, dict):
        return ["the config is not a mapping"]
    if doc and "version" not in doc:
        return ["unable to parse with missing 'version' field"]
    if doc.get("version") != "v1":
        return [f"unknown version: {doc.get('version')}"]
    problems = [f"unexpected field: {k}" for k in sorted(doc) if k not in ("version", "mig-configs")]
    configs = doc.get("mig-configs")
    if "mig-configs" in doc:
        if not isinstance(configs, dict) or not configs:
            return problems + ["at least one entry in 'mig-configs' is required"]
        for name, entries in sorted(configs.items()):
            if not isinstance(entries, list) or not entries:
                problems.append(f"at least one entry in '{name}' is required")
                continue
            for i, entry in enumerate(entries):
                problems += [f"{name}[{i}]: {p}" for p in _entry_problems(entry)]
    return problems


def _entry_problems(entry: object) -> list[str]:
    if not isinstance(entry, dict):
        return ["an entry is not a mapping"]
    out = [f"missing required field: {r}" for r in ("devices", "mig-enabled") if r not in entry]
    out += [f"unexpected field: {k}" for k in sorted(entry) if k not in ENTRY_KEYS]
    if "device-filter" in entry:
        f = entry["device-filter"]
        if not (isinstance(f, str) or (isinstance(f, list) and all(isinstance(x, str) for x in f))):
            out.append("device-filter is neither a string nor a list of strings")
    if "devices" in entry:
        d = entry["devices"]
        if isinstance(d, str):
            if d != "all":
                out.append(f"invalid string input for 'devices': {d}")
        elif not (isinstance(d, list) and all(_int(x) for x in d)):
            out.append("devices is neither 'all' nor a list of GPU indexes")
    enabled = entry.get("mig-enabled")
    if "mig-enabled" in entry and not isinstance(enabled, bool):
        out.append("mig-enabled is not a boolean")
    devices = entry.get("mig-devices")
    if "mig-devices" in entry:
        if not isinstance(devices, dict):
            out.append("mig-devices is not a mapping of profile to count")
            devices = {}
        for profile, count in devices.items():
            problem = mig_profile_problem(str(profile))
            if problem:
                out.append(f"error validating values in 'mig-devices' field: invalid format for '{profile}': {problem}")
            if not _int(count) or count < 0:
                out.append(f"error validating values in 'mig-devices' field: invalid count for '{profile}': {count}")
        if devices and not any(_int(c) and c > 0 for c in devices.values()):
            out.append("error validating values in 'mig-devices' field: all counts for all MigProfiles are 0")
    if enabled is True and devices is None:
        out.append("missing required field 'mig-devices' when 'mig-enabled' is true")
    if enabled is False and devices:
        out.append("MIG devices included when 'mig-enabled' is false")
    return out
