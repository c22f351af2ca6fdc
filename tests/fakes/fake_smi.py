"""A stand-in for `nvidia-smi` on a MIG-capable host, for testing generated provisioning scripts.

State lives in the JSON file named by KILN_FAKE_SMI_STATE (written by tests/fakes/fake_host.py
from the project's GPU catalog). Only the subset of nvidia-smi that
compiler/templates/host/provision.sh.j2 and the builder probe (compiler/machines.py _gpus) use is
implemented; anything else is refused, so a script
that starts using a new command fails here until the stand-in learns it (with the real output
format and a source).

Output formats, with the sources they were copied from (layout and wording, not content):
  * `mig -lgi`, `mig -lci` tables, `-L` lines, `-cgi/-cci/-dci/-dgi` messages, "Insufficient
    Resources", "In use by another client": NVIDIA MIG User Guide (getting-started pages) and real
    captures in public repositories: seansiddens/mps-test README.md (-cgi, -lgi),
    Summer-Lo/Docker_configuration 000-MIG/README.md (-lgi, -lgipp), utkuozdemir/nvidia_gpu_exporter
    internal/captures/linux-x86_64__nvidia-h200-mig__580.173.02.txt and
    ..._nvidia-h100-mig__590.48.01.txt (-L with MIG devices, -q "MIG Device" blocks, --query-gpu and
    --query-compute-apps CSV, the list of query fields).
  * `-mig 1` pending warning ("Warning: MIG mode is in pending enable state for GPU ...:In use by
    another client"), `--gpu-reset` message: MIG User Guide and user reports quoting it.
  * `-lgc`/`-lmc` ('GPU clocks set to "(gpuClkMin a, gpuClkMax b)" for GPU ...', 'Memory clocks
    set to "(memClkMin ..."'), `-ac` ('Applications clocks set to "(MEM m, SM g)"', 'Specified
    clock combination ... is not supported ... Treating as warning and moving on.'), `-pl` ('Power
    limit for GPU ... was set to X W from Y W.', 'Provided power limit ... is not a valid power limit
    which should be between ...'), `-pm`: user captures of the real tool quoted in public repos.
Marked UNVERIFIED below: texts and exit codes for which no capture was found; the provisioning
script never parses those, it only needs "not the success line" or a non-zero exit.

Rules enforced (from the catalog copied into the state): GPU-instance profile IDs and placement
starts of the GPU model, overlapping placements, per-profile and total instance limits, compute
slices; a GI cannot be destroyed while it has compute instances; MIG mode cannot change while
compute processes run (it becomes pending until a GPU reset) nor be disabled while GIs exist;
clocks outside the catalog's lockable range and power limits outside its range are refused.
Stricter than the real tool, on purpose: every mutating command must name its GPU with `-i`
(a script that omits it would change every GPU on the host).

Test hooks (the stand-in's business, not the script's):
  KILN_FAKE_SMI_LOG      append one JSON line per call: argv, whether it mutates, exit status
  KILN_FAKE_SMI_FAIL_AT  from the N-th mutating call recorded in that log on, fail every mutating
                         call (exit 99, no change): the host stops half-way through a run
"""

from __future__ import annotations

import os
import sys

import fake_host  # the launcher puts this directory on sys.path; standard library only

MUTATING = {"-pm", "-mig", "-lgc", "-lmc", "-rgc", "-rmc", "-ac", "-pl", "-r", "--gpu-reset",
            "-cgi", "-cci", "-dci", "-dgi"}
WITH_VALUE = {"-i", "--id", "-pm", "-mig", "-lgc", "-lmc", "-ac", "-pl", "-cgi", "-cci", "-gi", "-ci",
              "--query-gpu", "--query-compute-apps", "--format"}
FLAGS = {"-L", "-q", "-rgc", "-rmc", "-r", "--gpu-reset", "-C", "-lgi", "-lci", "-dci", "-dgi", "-eow"}
ALIASES = {"--id": "-i", "--gpu-reset": "-r", "--persistence-mode": "-pm", "--multi-instance-gpu": "-mig",
           "--lock-gpu-clocks": "-lgc", "--lock-memory-clocks": "-lmc", "--applications-clocks": "-ac",
           "--power-limit": "-pl", "--list-gpus": "-L", "--query": "-q"}

# CI profile ID of the full-size compute instance of a GI (MIG guide: 1c=0, 2c=1, 3c=2, 4c=3,
# 7c=4; a 1g GI with two memory slices reports its CI as ID 7 on H100 in a real -cgi -C capture).
CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


class Exit(Exception):
    def __init__(self, rc: int, text: str = "", err: bool = False):
        super().__init__(text)
        self.rc, self.text, self.err = rc, text, err


def parse(argv: list[str]) -> tuple[bool, dict]:
    mig = bool(argv) and argv[0] == "mig"
    args = argv[1:] if mig else list(argv)
    opts: dict = {}
    i = 0
    while i < len(args):
        tok = args[i]
        key, val = tok, None
        if tok.startswith("--") and "=" in tok:
            key, val = tok.split("=", 1)
        key = ALIASES.get(key, key)
        if key in WITH_VALUE:
            if val is None:
                if i + 1 >= len(args):
                    raise Exit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
                val = args[i + 1]
                i += 1
            opts[key] = val
        elif key in FLAGS and val is None:
            opts[key] = True
        else:  # UNVERIFIED wording; the real tool also refuses unknown options
            raise Exit(2, f"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help. ({tok})")
        i += 1
    return mig, opts


def targets(state: dict, opts: dict) -> list[dict]:
    if "-i" not in opts:
        return state["gpus"]
    out = []
    for part in str(opts["-i"]).split(","):
        if not part.strip().isdigit() or int(part) >= len(state["gpus"]):
            raise Exit(6, f"No devices were found matching the given identifier: {part}")  # UNVERIFIED wording
        out.append(state["gpus"][int(part)])
    return out


def one_target(state: dict, opts: dict) -> dict:
    if "-i" not in opts:
        raise Exit(2, "kiln fake nvidia-smi: refusing a mutating command without -i "
                      "(it would change every GPU on the host)", err=True)
    gs = targets(state, opts)
    if len(gs) != 1:
        raise Exit(2, "kiln fake nvidia-smi: mutating commands take exactly one GPU index", err=True)
    return gs[0]


def fmt_num(n: float) -> str:
    return f"{n:.2f}"


# --- queries ------------------------------------------------------------------------------------
GPU_FIELDS = {  # field -> (header unit, value function(state, gpu, nounits))
    "index": ("", lambda s, g, nu: str(g["index"])),
    "name": ("", lambda s, g, nu: g["name"]),
    "gpu_name": ("", lambda s, g, nu: g["name"]),
    "uuid": ("", lambda s, g, nu: g["uuid"]),
    "gpu_uuid": ("", lambda s, g, nu: g["uuid"]),
    "pci.bus_id": ("", lambda s, g, nu: g["bus_id"]),
    "driver_version": ("", lambda s, g, nu: s["driver"]),
    "persistence_mode": ("", lambda s, g, nu: "Enabled" if g["persistence"] else "Disabled"),
    # the whole GPU's memory, MIG mode or not: a MIG-enabled "NVIDIA H100 80GB HBM3" reports
    # "81559 MiB" (the h100-mig capture named in the module docstring); compute_cap as "9.0"
    "memory.total": ("MiB", lambda s, g, nu: f"{g['memory_mib']}" + ("" if nu else " MiB")),
    "compute_cap": ("", lambda s, g, nu: g["compute_cap"]),
    "mig.mode.current": ("", lambda s, g, nu: _mig_mode(g, "mig_current")),
    "mig.mode.pending": ("", lambda s, g, nu: _mig_mode(g, "mig_pending")),
    "power.limit": ("W", lambda s, g, nu: fmt_num(g["power_limit"]) + ("" if nu else " W")),
    "power.default_limit": ("W", lambda s, g, nu: fmt_num(g["power_default"]) + ("" if nu else " W")),
    "power.min_limit": ("W", lambda s, g, nu: fmt_num(g["power_range"][0]) + ("" if nu else " W")),
    "power.max_limit": ("W", lambda s, g, nu: fmt_num(g["power_range"][1]) + ("" if nu else " W")),
    "clocks.applications.memory": ("MHz", lambda s, g, nu: f"{g['app_clocks'][0]}" + ("" if nu else " MHz")),
    "clocks.applications.graphics": ("MHz", lambda s, g, nu: f"{g['app_clocks'][1]}" + ("" if nu else " MHz")),
    "clocks.max.graphics": ("MHz", lambda s, g, nu: f"{g['graphics_range'][1]}" + ("" if nu else " MHz")),
    "clocks.max.memory": ("MHz", lambda s, g, nu: f"{max(g['memory_clocks'])}" + ("" if nu else " MHz")),
}
GPU_FIELDS["clocks.applications.mem"] = GPU_FIELDS["clocks.applications.memory"]
GPU_FIELDS["clocks.applications.gr"] = GPU_FIELDS["clocks.applications.graphics"]


def _mig_mode(g: dict, key: str) -> str:
    if not g["mig_supported"]:
        return "[N/A]"
    return "Enabled" if g[key] else "Disabled"


def _csv(fields: list[str], rows: list[list[str]], fmt: str, units: dict[str, str]) -> str:
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        raise Exit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(f + (f" [{units[f]}]" if units.get(f) else "") for f in fields))
    lines += [", ".join(r) for r in rows]
    return "\n".join(lines)


def query_gpu(state: dict, opts: dict) -> str:
    fields = [f.strip() for f in opts["--query-gpu"].split(",")]
    for f in fields:
        if f not in GPU_FIELDS:
            raise Exit(2, f'Field "{f}" is not a valid field to query.')
    nounits = "nounits" in opts.get("--format", "")
    rows = [[GPU_FIELDS[f][1](state, g, nounits) for f in fields] for g in targets(state, opts)]
    return _csv(fields, rows, opts.get("--format", ""), {f: GPU_FIELDS[f][0] for f in fields})


def query_apps(state: dict, opts: dict) -> str:
    fields = [f.strip() for f in opts["--query-compute-apps"].split(",")]
    nounits = "nounits" in opts.get("--format", "")
    getters = {
        "pid": lambda g, p: str(p["pid"]),
        "process_name": lambda g, p: p["name"], "name": lambda g, p: p["name"],
        "used_gpu_memory": lambda g, p: f"{p['used_mib']}" + ("" if nounits else " MiB"),
        "used_memory": lambda g, p: f"{p['used_mib']}" + ("" if nounits else " MiB"),
        "gpu_uuid": lambda g, p: g["uuid"], "gpu_bus_id": lambda g, p: g["bus_id"],
        "gpu_name": lambda g, p: g["name"],
    }
    for f in fields:
        if f not in getters:
            raise Exit(2, f'Field "{f}" is not a valid field to query.')
    rows = [[getters[f](g, p) for f in fields] for g in targets(state, opts) for p in g["processes"]]
    units = {"used_gpu_memory": "MiB", "used_memory": "MiB"}
    return _csv(fields, rows, opts.get("--format", ""), units)


def mig_devices(g: dict) -> list[tuple[int, dict, dict]]:
    """(MIG device index, GI, CI) in NVML enumeration order: by GI ID, then CI ID (as in the
    captures, where MIG Dev 0..3 belong to GI 2, 3, 9, 10)."""
    out = []
    for gi in sorted(g["gis"], key=lambda x: x["id"]):
        for ci in sorted(gi["cis"], key=lambda x: x["id"]):
            out.append((len(out), gi, ci))
    return out


def profile_by_id(g: dict, pid: int) -> dict | None:
    return next((p for p in g["geometry"]["profiles"] if p["id"] == pid), None)


def list_gpus(state: dict, opts: dict) -> str:
    lines = []
    for g in targets(state, opts):
        lines.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        if g["mig_current"]:
            for idx, gi, ci in mig_devices(g):
                name = profile_by_id(g, gi["profile_id"])["name"]
                lines.append(f"  MIG {name:<11} Device {idx:>2}: (UUID: {ci['uuid']})")
    return "\n".join(lines)


def _kv(indent: int, key: str, value: str) -> str:
    return f"{' ' * indent}{key}".ljust(55) + f": {value}"


def query_full(state: dict, opts: dict) -> str:
    """`-q`, reduced to the lines the script reads, in the real layout (keys padded to column 55,
    4-space indentation per level; "MIG Device" block per device with Index, GPU Instance ID,
    Compute Instance ID)."""
    gs = targets(state, opts)
    out = ["", "==============NVSMI LOG==============", "",
           _kv(0, "Timestamp", "Thu Jan  1 00:00:00 2026"), _kv(0, "Driver Version", state["driver"]),
           _kv(0, "CUDA Version", "13.0"), "", _kv(0, "Attached GPUs", str(len(state["gpus"])))]
    for g in gs:
        out.append(f"GPU {g['bus_id']}")
        out.append(_kv(4, "Product Name", g["name"]))
        out.append(_kv(4, "Persistence Mode", "Enabled" if g["persistence"] else "Disabled"))
        out.append("    MIG Mode")
        out.append(_kv(8, "Current", _mig_mode(g, "mig_current").strip("[]")))
        out.append(_kv(8, "Pending", _mig_mode(g, "mig_pending").strip("[]")))
        if g["mig_current"]:
            for idx, gi, ci in mig_devices(g):
                out.append("    MIG Device")
                out.append(_kv(8, "Index", str(idx)))
                out.append(_kv(8, "GPU Instance ID", str(gi["id"])))
                out.append(_kv(8, "Compute Instance ID", str(ci["id"])))
        out.append(_kv(4, "GPU UUID", g["uuid"]))
        out.append("")
    return "\n".join(out)


def list_gi(state: dict, opts: dict) -> str:
    gs = [g for g in targets(state, opts) if g["mig_current"]]
    if not gs:
        raise Exit(6, "No MIG-enabled devices found.")  # partially verified wording
    rows = [(g, gi) for g in gs for gi in sorted(g["gis"], key=lambda x: x["start"])]
    if not rows:
        raise Exit(6, "No GPU instances found: Not Found")  # text verified; exit status UNVERIFIED
    bar = "+" + "-" * 57 + "+"
    out = [bar, "| GPU instances:".ljust(58) + "|",
           "| GPU   Name               Profile  Instance   Placement  |",
           "|                            ID       ID       Start:Size |",
           "|" + "=" * 57 + "|"]
    for g, gi in rows:
        p = profile_by_id(g, gi["profile_id"])
        out.append(f"|{g['index']:>4}  MIG {p['name']:<16}{gi['profile_id']:>4}{gi['id']:>9}"
                   f"{gi['start']:>11}:{p['placement_size']:<6}|")
        out.append(bar)
    return "\n".join(out)


def list_ci(state: dict, opts: dict) -> str:
    gs = [g for g in targets(state, opts) if g["mig_current"]]
    if not gs:
        raise Exit(6, "No MIG-enabled devices found.")
    rows = [(g, gi, ci) for g in gs for gi in sorted(g["gis"], key=lambda x: x["id"]) for ci in gi["cis"]]
    if "-gi" in opts:
        wanted = {int(x) for x in str(opts["-gi"]).split(",")}
        rows = [r for r in rows if r[1]["id"] in wanted]
    if not rows:
        raise Exit(6, "No compute instances found: Not Found")  # by analogy with -lgi: UNVERIFIED
    bar = "+" + "-" * 68 + "+"
    out = [bar, "| Compute instances:".ljust(69) + "|",
           "| GPU     GPU       Name             Profile   Instance   Placement  |",
           "|       Instance                       ID        ID       Start:Size |",
           "|         ID                                                         |",
           "|" + "=" * 68 + "|"]
    for g, gi, ci in rows:
        p = profile_by_id(g, gi["profile_id"])
        out.append(f"|{g['index']:>4}{gi['id']:>7}       MIG {p['name']:<16}{ci['profile_id']:>2}{ci['id']:>10}"
                   f"{0:>11}:{p['compute_slices']:<6}|")
        out.append(bar)
    return "\n".join(out)


# --- mutations ----------------------------------------------------------------------------------
def _new_uuid(state: dict, g: dict, prefix: str) -> str:
    state["serial"] = state.get("serial", 0) + 1
    return fake_host._uuid(f"{g['uuid']}/{state['serial']}", prefix)


def _add_ci(state: dict, g: dict, gi: dict) -> dict:
    p = profile_by_id(g, gi["profile_id"])
    cip = 7 if p["compute_slices"] == 1 and p["memory_slices"] == 2 else CI_PROFILE.get(p["compute_slices"], 0)
    ci = {"id": 0, "profile_id": cip, "uuid": _new_uuid(state, g, "MIG")}
    gi["cis"].append(ci)
    return ci


def create_gi(state: dict, g: dict, opts: dict) -> str:
    if not g["mig_current"]:
        raise Exit(6, "No MIG-enabled devices found.")
    if g["processes"]:
        pass  # creating instances next to running MIG clients is allowed
    geo = g["geometry"]
    lines: list[str] = []
    failure = None
    for tok in str(opts["-cgi"]).split(","):
        tok = tok.strip()
        prof_s, _, start_s = tok.partition(":")
        if prof_s.isdigit():
            p = profile_by_id(g, int(prof_s))
        else:
            p = next((x for x in geo["profiles"] if x["name"] == prof_s), None)
        if p is None or (start_s and (not start_s.isdigit() or int(start_s) not in p["placements"])):
            failure = "Invalid Argument"
        else:
            used = set()
            for other in g["gis"]:
                op = profile_by_id(g, other["profile_id"])
                used |= set(range(other["start"], other["start"] + op["placement_size"]))
            free = [s for s in p["placements"] if not used & set(range(s, s + p["placement_size"]))]
            same = sum(1 for o in g["gis"] if o["profile_id"] == p["id"])
            compute = sum(profile_by_id(g, o["profile_id"])["compute_slices"] for o in g["gis"])
            start = int(start_s) if start_s else (free[0] if free else None)
            if (start is None or start not in free or same >= p["max_count"]
                    or len(g["gis"]) >= geo["max_instances"]
                    or compute + p["compute_slices"] > geo["compute_slices"]):
                failure = "Insufficient Resources"
            else:
                gid = min(set(range(1, 64)) - {o["id"] for o in g["gis"]})
                gi = {"id": gid, "profile_id": p["id"], "start": start, "cis": []}
                g["gis"].append(gi)
                lines.append(f"Successfully created GPU instance ID {gid:>2} on GPU {g['index']:>2} "
                             f"using profile MIG {p['name']} (ID {p['id']:>2})")
                if opts.get("-C"):
                    ci = _add_ci(state, g, gi)
                    lines.append(f"Successfully created compute instance ID {ci['id']:>2} on GPU {g['index']:>2} "
                                 f"GPU instance ID {gid:>2} using profile MIG {p['name']} (ID {ci['profile_id']:>2})")
                continue
        lines.append(f"Unable to create a GPU instance on GPU {g['index']:>2} using profile {prof_s}: {failure}")
        break  # the real tool stops at the first failure and keeps what it created
    if failure:
        lines.append(f"Failed to create GPU instances: {failure}")
        raise Exit(2, "\n".join(lines))  # exit status UNVERIFIED (non-zero)
    return "\n".join(lines)


def create_ci(state: dict, g: dict, opts: dict) -> str:
    if "-gi" not in opts:
        raise Exit(2, "kiln fake nvidia-smi: -cci needs -gi", err=True)
    gid = int(opts["-gi"])
    gi = next((x for x in g["gis"] if x["id"] == gid), None)
    want = str(opts["-cci"])
    if gi is None:
        raise Exit(6, f"Unable to create a compute instance on GPU {g['index']:>2} GPU instance ID {gid:>2} "
                      f"using profile {want}: Not Found\nFailed to create compute instances: Not Found")
    p = profile_by_id(g, gi["profile_id"])
    if want not in (p["name"], str(CI_PROFILE.get(p["compute_slices"])), "7"):  # only the full-size CI
        raise Exit(2, f"Unable to create a compute instance on GPU {g['index']:>2} GPU instance ID {gid:>2} "
                      f"using profile {want}: Invalid Argument\nFailed to create compute instances: Invalid Argument")
    if gi["cis"]:
        raise Exit(2, f"Unable to create a compute instance on GPU {g['index']:>2} GPU instance ID {gid:>2} "
                      f"using profile {want}: Insufficient Resources\n"
                      "Failed to create compute instances: Insufficient Resources")
    ci = _add_ci(state, g, gi)
    return (f"Successfully created compute instance ID {ci['id']:>2} on GPU {g['index']:>2} GPU instance ID "
            f"{gid:>2} using profile MIG {p['name']} (ID {ci['profile_id']:>2})")


def _selected_gis(g: dict, opts: dict) -> list[dict]:
    if "-gi" not in opts:
        return sorted(g["gis"], key=lambda x: x["id"])
    ids = [int(x) for x in str(opts["-gi"]).split(",")]
    missing = [i for i in ids if i not in {x["id"] for x in g["gis"]}]
    if missing:
        raise Exit(6, f"Unable to find GPU instance ID {missing[0]:>2} on GPU {g['index']:>2}: Not Found")  # UNVERIFIED
    return [x for x in g["gis"] if x["id"] in ids]


def destroy_ci(state: dict, g: dict, opts: dict) -> str:
    if not g["mig_current"]:
        raise Exit(6, "No MIG-enabled devices found.")
    lines = []
    for gi in _selected_gis(g, opts):
        keep = []
        for ci in sorted(gi["cis"], key=lambda x: x["id"]):
            if "-ci" in opts and ci["id"] not in {int(x) for x in str(opts["-ci"]).split(",")}:
                keep.append(ci)
                continue
            lines.append(f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU {g['index']:>2} "
                         f"GPU instance ID {gi['id']:>2}")
        gi["cis"] = keep
    if not lines:
        raise Exit(6, "No compute instances found: Not Found")  # UNVERIFIED
    return "\n".join(lines)


def destroy_gi(state: dict, g: dict, opts: dict) -> str:
    if not g["mig_current"]:
        raise Exit(6, "No MIG-enabled devices found.")
    lines, failed = [], False
    selected = _selected_gis(g, opts)
    if not selected:
        raise Exit(6, "No GPU instances found: Not Found")
    for gi in selected:
        if gi["cis"]:
            lines.append(f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {g['index']:>2}: "
                         "In use by another client")
            failed = True
            continue
        g["gis"].remove(gi)
        lines.append(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {g['index']:>2}")
    if failed:
        lines.append("Failed to destroy GPU instances: In use by another client")
        raise Exit(2, "\n".join(lines))  # exit status UNVERIFIED (non-zero)
    return "\n".join(lines)


def set_mig(state: dict, g: dict, opts: dict) -> str:
    want = str(opts["-mig"]).upper() in ("1", "ENABLED")
    word = "enable" if want else "disable"
    if not g["mig_supported"]:
        raise Exit(3, f"Unable to {word} MIG Mode for GPU {g['bus_id']}: Not Supported")  # UNVERIFIED
    blocked = "In use by another client" if g["processes"] or (not want and g["gis"]) else None
    g["mig_pending"] = want
    if blocked:
        text = (f"Warning: MIG mode is in pending {word} state for GPU {g['bus_id']}:{blocked}\n"
                f"{g['bus_id']} is currently being used by one or more other processes (e.g. CUDA "
                "application or a monitoring application such as another instance of nvidia-smi). Please "
                "first kill all processes using the device and retry the command or reboot the system to "
                "make MIG mode effective.\nAll done.")
        if opts.get("-eow"):
            raise Exit(1, text)
        return text  # the real tool prints "All done." and exits 0 for this warning
    if g["mig_current"] != want:
        g["mig_current"] = want
        g["gis"] = []
    return f"{'Enabled' if want else 'Disabled'} MIG Mode for GPU {g['bus_id']}\nAll done."


def gpu_reset(state: dict, g: dict, opts: dict) -> str:
    if g["processes"]:
        raise Exit(255, f"GPU {g['bus_id']} is currently in use by another process.")  # UNVERIFIED
    g["mig_current"] = g["mig_pending"]
    g["gis"] = []
    g["locked_gpu"] = g["locked_mem"] = None
    return f"GPU {g['bus_id']} was successfully reset.\nAll done."


def _pair(value: str) -> tuple[int, int]:
    parts = str(value).split(",")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise Exit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    lo, hi = int(parts[0]), int(parts[-1])
    return lo, hi


def lock_gpu(state: dict, g: dict, opts: dict) -> str:
    lo, hi = _pair(opts["-lgc"])
    rmin, rmax = g["graphics_range"]
    if not (rmin <= lo <= hi <= rmax):
        # The real text for an out-of-range value was not found; this is the verified warning the
        # tool prints when it cannot lock (exit 0): the hardest case for a script to notice.
        return (f"Setting locked GPU clocks is not supported for GPU {g['bus_id']}.\n"
                "Treating as warning and moving on.\nAll done.")
    g["locked_gpu"] = [lo, hi]
    return f'GPU clocks set to "(gpuClkMin {lo}, gpuClkMax {hi})" for GPU {g["bus_id"]}\nAll done.'


def lock_mem(state: dict, g: dict, opts: dict) -> str:
    lo, hi = _pair(opts["-lmc"])
    if lo not in g["memory_clocks"] or hi not in g["memory_clocks"] or lo > hi:
        return (f"Setting locked Memory clocks is not supported for GPU {g['bus_id']}.\n"
                "Treating as warning and moving on.\nAll done.")
    g["locked_mem"] = [lo, hi]
    return f'Memory clocks set to "(memClkMin {lo}, memClkMax {hi})" for GPU {g["bus_id"]}\nAll done.'


def app_clocks(state: dict, g: dict, opts: dict) -> str:
    mem, gr = _pair(opts["-ac"])
    if len(str(opts["-ac"]).split(",")) != 2:
        raise Exit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    rmin, rmax = g["graphics_range"]
    if mem not in g["memory_clocks"] or not rmin <= gr <= rmax:
        return (f'Specified clock combination "(MEM {mem}, SM {gr})" is not supported for GPU {g["bus_id"]}. '
                "Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations\n"
                "Treating as warning and moving on.\nAll done.")
    g["app_clocks"] = [mem, gr]
    return f'Applications clocks set to "(MEM {mem}, SM {gr})" for GPU {g["bus_id"]}\nAll done.'


def power_limit(state: dict, g: dict, opts: dict) -> str:
    try:
        w = float(opts["-pl"])
    except ValueError:
        raise Exit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    lo, hi = g["power_range"]
    if not lo <= w <= hi:
        raise Exit(2, f"Provided power limit {fmt_num(w)} W is not a valid power limit which should be between "
                      f"{fmt_num(lo)} W and {fmt_num(hi)} W for GPU {g['bus_id']}\n"
                      "Terminating early due to previous errors.")  # exit status UNVERIFIED
    old, g["power_limit"] = g["power_limit"], w
    return f"Power limit for GPU {g['bus_id']} was set to {fmt_num(w)} W from {fmt_num(old)} W.\nAll done."


def persistence(state: dict, g: dict, opts: dict) -> str:
    want = str(opts["-pm"]).upper() in ("1", "ENABLED")
    if g["persistence"] == want:
        return f"Persistence mode is already {'Enabled' if want else 'Disabled'} for GPU {g['bus_id']}.\nAll done."
    g["persistence"] = want
    return f"{'Enabled' if want else 'Disabled'} persistence mode for GPU {g['bus_id']}.\nAll done."


def reset_clocks(state: dict, g: dict, opts: dict) -> str:
    if opts.get("-rgc"):
        g["locked_gpu"] = None
    if opts.get("-rmc"):
        g["locked_mem"] = None
    return "All done."


# --- main ---------------------------------------------------------------------------------------
def run(argv: list[str], state: dict) -> str:
    mig, opts = parse(argv)
    if mig:
        if opts.get("-lgi"):
            return list_gi(state, opts)
        if opts.get("-lci"):
            return list_ci(state, opts)
        g = one_target(state, opts)
        if "-cgi" in opts:
            return create_gi(state, g, opts)
        if "-cci" in opts:
            return create_ci(state, g, opts)
        if opts.get("-dci"):
            return destroy_ci(state, g, opts)
        if opts.get("-dgi"):
            return destroy_gi(state, g, opts)
        raise Exit(2, "kiln fake nvidia-smi: this `mig` command is not simulated", err=True)
    if "--query-gpu" in opts:
        return query_gpu(state, opts)
    if "--query-compute-apps" in opts:
        return query_apps(state, opts)
    if opts.get("-L"):
        return list_gpus(state, opts)
    if opts.get("-q"):
        return query_full(state, opts)
    actions = [("-pm", persistence), ("-mig", set_mig), ("-lgc", lock_gpu), ("-lmc", lock_mem),
               ("-ac", app_clocks), ("-pl", power_limit), ("-r", gpu_reset)]
    chosen = [fn for key, fn in actions if key in opts]
    if opts.get("-rgc") or opts.get("-rmc"):
        chosen.append(reset_clocks)
    if len(chosen) != 1:
        raise Exit(2, "kiln fake nvidia-smi: this command is not simulated (one device modification at a time)",
                   err=True)
    return chosen[0](state, one_target(state, opts), opts)


def is_mutating(argv: list[str]) -> bool:
    return any(ALIASES.get(a.split("=", 1)[0], a.split("=", 1)[0]) in MUTATING for a in argv)


def main(argv: list[str]) -> int:
    state_path = os.environ.get("KILN_FAKE_SMI_STATE")
    if not state_path:
        print("kiln fake nvidia-smi: KILN_FAKE_SMI_STATE is not set", file=sys.stderr)
        return 9
    log_path = os.environ.get("KILN_FAKE_SMI_LOG")
    mutating = is_mutating(argv)
    entry: dict = {"argv": argv, "mutating": mutating}
    state = fake_host.load(state_path)
    before = fake_host.dumps(state)
    rc, out, err = 0, "", False
    fail_at = os.environ.get("KILN_FAKE_SMI_FAIL_AT")
    if mutating and fail_at and log_path:
        done = len(fake_host.mutating_calls(log_path))
        if done + 1 >= int(fail_at):
            entry.update(rc=99, injected=True)
            _log(log_path, entry)
            print(f"kiln fake nvidia-smi: injected failure of mutating call {fail_at}", file=sys.stderr)
            return 99
    try:
        out = run(argv, state)
    except Exit as e:
        rc, out, err = e.rc, e.text, e.err
    if mutating and fake_host.dumps(state) != before:
        fake_host.save(state_path, state)  # read-only calls never touch the file
    entry["rc"] = rc
    if log_path:
        _log(log_path, entry)
    if out:
        print(out, file=sys.stderr if err else sys.stdout)
    return rc


def _log(path: str, entry: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(fake_host.dumps(entry) + "\n")
