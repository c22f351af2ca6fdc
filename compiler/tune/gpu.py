"""What nvidia-smi says about the measured GPU: clocks, power state and MIG mode, for the record.

A measurement is only comparable with another taken at the same clocks and power limit, and
nothing in the serving stack reports them (the GPU Operator, mig-parted and DRA have no clock or
power setting). When `kiln tune` runs on the GPU's host, it asks nvidia-smi; elsewhere the record
says it was not observed and carries the spec's declared clocks and power limit only.

The query is `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits -i <index>`: one CSV
line, "[N/A]" (or another bracketed text) where a field has no value. The field names are those of
`nvidia-smi --help-query-gpu` on driver 580.173.02 (an H200 capture in utkuozdemir/nvidia_gpu_exporter,
internal/captures/linux-x86_64__nvidia-h200__580.173.02.txt, which also shows the value formats).
"""

from __future__ import annotations

import shutil
import subprocess

FIELDS = ("index", "name", "uuid", "driver_version", "persistence_mode", "mig.mode.current", "pstate",
          "clocks.current.sm", "clocks.current.memory", "clocks.applications.graphics", "clocks.applications.memory",
          "clocks.max.sm", "clocks.max.memory", "power.limit", "power.draw", "temperature.gpu",
          "clocks_event_reasons.active")
_UNITS = (" MHz", " W", " MiB", " %")  # printed unless --format has nounits


def query_command(index: int, executable: str = "nvidia-smi") -> list[str]:
    return [executable, f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-i", str(index)]


def _value(text: str) -> str | int | float | None:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    for unit in _UNITS:
        if text.endswith(unit):
            text = text[: -len(unit)]
            break
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_query(output: str) -> dict:
    """The first line of the query's output as {field: value}."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("nvidia-smi printed nothing")
    cells = [c for c in lines[0].split(",")]
    if len(cells) != len(FIELDS):
        raise ValueError(f"expected {len(FIELDS)} fields, got {len(cells)}: {lines[0]!r}")
    return {f: _value(c) for f, c in zip(FIELDS, cells)}


def observe(index: int, executable: str | None = None) -> tuple[dict | None, str]:
    """(the GPU's state, how it was obtained) or (None, why not)."""
    exe = executable or shutil.which("nvidia-smi")
    if exe is None:
        return None, "not observed: no nvidia-smi where kiln tune ran"
    try:
        proc = subprocess.run(query_command(index, exe), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"not observed: nvidia-smi failed ({e})"
    if proc.returncode != 0:
        return None, f"not observed: nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}"
    try:
        return parse_query(proc.stdout), "nvidia-smi --query-gpu"
    except ValueError as e:
        return None, f"not observed: {e}"
