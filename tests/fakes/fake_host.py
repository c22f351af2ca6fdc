"""State of a simulated GPU host for the `tests/fakes/nvidia-smi` stand-in.

`make_host` writes a JSON state file from the project's GPU catalog (compiler/catalog/data/gpus.json):
each GPU gets the catalog's MIG geometry, lockable clock ranges and power range, so the stand-in
refuses exactly what the catalog says the real GPU would refuse. Tests point the stand-in at the
file with the environment variable KILN_FAKE_SMI_STATE and may edit the state between runs to
simulate drift, running processes or a reboot.

This module uses only the standard library: the stand-in imports it too.
"""

from __future__ import annotations

import _json
import os
from collections.abc import Iterable

# Only cheap imports at module level: the stand-in imports this module on every call, dozens of
# times a script run. The json module is not one of them (its import pulls in re: about 9 ms, a
# third of a call), so state and call log go through json's C codec (_json) directly, below.
CATALOG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "compiler", "catalog", "data", "gpus.json")

# Product names as nvidia-smi prints them (`-L`, `--query-gpu=name`), where a real capture showed
# one: "NVIDIA H200" and "NVIDIA H100 80GB HBM3" (utkuozdemir/nvidia_gpu_exporter
# internal/captures/*h200-mig__580.173.02.txt, *h100-mig__590.48.01.txt). Others are labelled
# from the catalog name; no script parses them.
PRODUCT_NAMES = {"H200-SXM-141GB": "NVIDIA H200", "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3"}


class _Decoding:
    """The settings _json's scanner reads of a json.JSONDecoder: json.loads' defaults."""

    strict = True
    object_hook = object_pairs_hook = parse_constant = None
    parse_float, parse_int = float, int


_scan = _json.make_scanner(_Decoding())
# json.dumps(value, sort_keys=True)'s settings (compact separators: the C encoder has no indent)
_encode = _json.make_encoder(None, None, _json.encode_basestring_ascii, None, ":", ",", True, False, True)


def loads(text: str):
    """json.loads for what dumps writes: one value, then only whitespace."""
    try:
        value, end = _scan(text, len(text) - len(text.lstrip()))
    except StopIteration as e:  # the scanner's way of saying no value starts there
        raise ValueError(f"no JSON value at character {e.value}") from None
    if text[end:].strip():
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def dumps(value) -> str:
    """json.dumps(value, sort_keys=True, separators=(",", ":"))."""
    return "".join(_encode(value, 0))


def _uuid(seed: str, prefix: str) -> str:
    import hashlib  # only for new instances' UUIDs

    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"{prefix}-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def catalog_gpu(model: str) -> dict:
    with open(CATALOG, encoding="utf-8") as f:
        data = loads(f.read())
    model = data.get("aliases", {}).get(model, model)
    if model not in data["gpus"]:
        raise KeyError(f"{model!r} is not in the GPU catalog")
    return {"model": model, **data["gpus"][model]}


def make_host(state_path: str | os.PathLike, gpu_model: str, count: int, driver: str,
              processes: dict[int, Iterable[dict | int]] | None = None, *, mig_enabled: Iterable[int] = ()) -> dict:
    """Write a fresh host: MIG disabled (unless listed in `mig_enabled`), no GPU instances,
    persistence off, default power limit and application clocks, no clock locks.

    `processes` maps a GPU index to compute processes on it, each a pid or
    `{"pid": 1234, "name": "python3", "used_mib": 1000}`."""
    cat = catalog_gpu(gpu_model)
    mig = cat["mig"]
    enabled = set(mig_enabled)
    gpus = []
    for i in range(count):
        bus = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
        procs = []
        for p in (processes or {}).get(i, ()):
            p = {"pid": p} if isinstance(p, int) else dict(p)
            procs.append({"pid": int(p["pid"]), "name": p.get("name", "python3"),
                          "used_mib": int(p.get("used_mib", 1024))})
        default_ac = [max(cat["memory_mhz"]), cat["graphics_mhz"][1]]
        gpus.append({
            "index": i,
            "name": PRODUCT_NAMES.get(cat["model"], "NVIDIA " + cat["model"]),
            "uuid": _uuid(f"{cat['model']}/{i}", "GPU"),
            "bus_id": bus,
            "memory_mib": cat["memory_mib"],
            "compute_cap": ".".join(str(x) for x in cat["compute_capability"]),
            "mig_supported": bool(mig["supported"]),
            "mig_current": i in enabled,
            "mig_pending": i in enabled,
            "persistence": False,
            "power_range": list(cat["power_w"]),
            "power_default": cat.get("tdp_w") or cat["power_w"][1],
            "power_limit": cat.get("tdp_w") or cat["power_w"][1],
            "graphics_range": list(cat["graphics_mhz"]),
            "memory_clocks": list(cat["memory_mhz"]),
            "app_clocks_default": default_ac,
            "app_clocks": list(default_ac),
            "locked_gpu": None,
            "locked_mem": None,
            "gis": [],
            "processes": procs,
            "geometry": {"max_instances": mig.get("max_instances", 0),
                         "compute_slices": mig.get("compute_slices", 0),
                         "memory_slices": mig.get("memory_slices", 0),
                         "profiles": [{k: p[k] for k in ("name", "id", "compute_slices", "memory_slices",
                                                           "max_count", "placements", "placement_size")}
                                      for p in mig.get("profiles", [])]},
        })
    state = {"kind": "kiln-fake-host/v1", "model": cat["model"], "driver": driver, "gpus": gpus,
             "serial": 0}
    save(state_path, state)
    return state


def load(state_path: str | os.PathLike) -> dict:
    with open(state_path, encoding="utf-8") as f:
        return loads(f.read())


def save(state_path: str | os.PathLike, state: dict) -> None:
    tmp = os.fspath(state_path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(state) + "\n")
    os.replace(tmp, state_path)


def reboot(state_path: str | os.PathLike) -> dict:
    """What a reboot (or driver reload) does to a GPU: a pending MIG mode takes effect, GPU and
    compute instances are gone, clock locks, application clocks, power limit and persistence
    revert to their defaults, and no process runs."""
    state = load(state_path)
    for g in state["gpus"]:
        g["mig_current"] = g["mig_pending"]
        g["gis"] = []
        g["locked_gpu"] = g["locked_mem"] = None
        g["app_clocks"] = list(g["app_clocks_default"])
        g["power_limit"] = g["power_default"]
        g["persistence"] = False
        g["processes"] = []
    save(state_path, state)
    return state


def gi_layout(state: dict, index: int) -> list[tuple[int, int]]:
    """(profile id, placement start) of the GPU instances of one GPU, sorted."""
    return sorted((gi["profile_id"], gi["start"]) for gi in state["gpus"][index]["gis"])


def mutating_calls(log_path: str | os.PathLike) -> list[dict]:
    """The mutating calls the stand-in recorded in its call log (KILN_FAKE_SMI_LOG)."""
    if not os.path.exists(log_path):
        return []
    with open(log_path, encoding="utf-8") as f:
        calls = [loads(line) for line in f.read().splitlines() if line.strip()]
    return [c for c in calls if c["mutating"]]
