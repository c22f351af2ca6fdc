"""Human- and machine-readable listings of the GPU catalog (``kiln catalog``)."""

from __future__ import annotations

import json
from typing import Any

from .gpus import GpuCatalog
from .types import GpuSpec, Status

__all__ = ["render_catalog", "render_formats", "render_models", "MARKS"]

#: Marker appended to a value whose fact is weak; the legend explains them.
MARKS: dict[str, str] = {"inferred": "*", "unverified": "?"}
_LEGEND = "* inferred (derived, not seen on this SKU)   ? unverified (check on hardware)"

_GPU_COLS = ["GPU", "Arch", "CC", "SMs", "Memory", "BW TB/s", "BF16", "FP8", "FP4",
             "Clock MHz", "Power W", "MIG"]
_MIG_COLS = ["GPU", "Profile", "ID", "C/M", "Max", "Placements", "SMs"]


def _m(value: Any, status: Status) -> str:
    return f"{value}{MARKS.get(status, '')}"


def _num(v: float | None) -> str:
    return "-" if v is None else str(v)


def _gpu_row(g: GpuSpec) -> list[str]:
    tf = g.status_of("tflops")
    return [
        g.name, g.arch, _m(f"{g.compute_capability[0]}.{g.compute_capability[1]}", g.status_of("compute_capability")),
        _m(g.sms, g.status_of("sms")) if g.sms is not None else "-",
        _m(f"{g.memory_gb} GB", g.status_of("memory_gb")),
        _m(_num(g.bandwidth_tbps), g.status_of("bandwidth_tbps")),
        *(_m(_num(g.tflops.get(k)), tf) if g.tflops.get(k) is not None else "-" for k in ("bf16", "fp8", "fp4")),
        _m(f"{g.graphics_mhz[0]}-{g.graphics_mhz[1]}", g.status_of("graphics_mhz")),
        _m(f"{g.power_w[0]}-{g.power_w[1]}", g.status_of("power_w")),
        "yes" if g.mig.supported else "no",
    ]


def _mig_rows(g: GpuSpec) -> list[list[str]]:
    rows = []
    for p in g.mig.profiles:
        starts = ",".join(map(str, p.placements))
        rows.append([
            g.name, p.name, _m(p.id, p.id_status), f"{p.compute_slices}/{p.memory_slices}", str(p.max_count),
            _m(f"{{{starts}}}:{p.placement_size}", p.placement_status),
            _m(p.sm, p.sm_status) if p.sm is not None else "-",
        ])
    return rows


def _text_table(cols: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*cols).rstrip(), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*r).rstrip() for r in rows]
    return "\n".join(lines)


def _md_table(cols: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("*", "\\*")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _gpu_json(g: GpuSpec) -> dict[str, Any]:
    return {
        "name": g.name, "arch": g.arch, "compute_capability": list(g.compute_capability), "sms": g.sms,
        "memory_gb": g.memory_gb, "memory_mib": g.memory_mib, "bandwidth_tbps": g.bandwidth_tbps,
        "tflops": dict(g.tflops), "graphics_mhz": list(g.graphics_mhz), "memory_mhz": list(g.memory_mhz),
        "power_w": list(g.power_w), "tdp_w": g.tdp_w, "nvlink_gbps": g.nvlink_gbps,
        "pci_device_id": g.pci_device_id, "min_driver": g.min_driver, "status": dict(g.status),
        "sources": list(g.sources),
        "mig": {
            "supported": g.mig.supported, "max_instances": g.mig.max_instances,
            "compute_slices": g.mig.compute_slices, "memory_slices": g.mig.memory_slices,
            "profiles": [
                {"name": p.name, "id": p.id, "compute_slices": p.compute_slices, "memory_slices": p.memory_slices,
                 "memory_gb": p.memory_gb, "max_count": p.max_count, "placements": list(p.placements),
                 "placement_size": p.placement_size, "attributes": list(p.attributes), "sm": p.sm,
                 "memory_mib": p.memory_mib, "id_status": p.id_status, "placement_status": p.placement_status,
                 "sm_status": p.sm_status}
                for p in g.mig.profiles
            ],
        },
    }


def render_catalog(catalog: GpuCatalog, fmt: str = "text", gpu: str | None = None) -> str:
    """GPU table plus MIG profiles, for one GPU (``gpu``) or every GPU with MIG. Deterministic."""
    if fmt not in ("text", "markdown", "json"):
        raise ValueError(f"unknown format {fmt!r}; use text, markdown or json")
    if gpu is not None:
        spec = catalog.get(gpu)
        if spec is None:
            hint = catalog.suggest(gpu)
            raise ValueError(f"unknown GPU {gpu!r}" + (f"; did you mean {', '.join(hint)}?" if hint else ""))
        gpus = [spec]
    else:
        gpus = list(catalog)
    if fmt == "json":
        return json.dumps({"gpus": [_gpu_json(g) for g in gpus]}, indent=2, sort_keys=True) + "\n"

    table = _md_table if fmt == "markdown" else _text_table
    rows = [_gpu_row(g) for g in gpus]
    mig = [r for g in gpus if g.mig.supported for r in _mig_rows(g)]
    parts = ["## GPUs" if fmt == "markdown" else "GPUs", table(_GPU_COLS, rows)]
    if mig:
        parts += ["## MIG profiles" if fmt == "markdown" else "MIG profiles", table(_MIG_COLS, mig)]
    parts.append("Legend: " + (_LEGEND.replace("*", "\\*") if fmt == "markdown" else _LEGEND))
    parts.append("TFLOPS are dense; C/M = compute/memory slices; placements as `nvidia-smi mig -lgipp` prints them.")
    return "\n\n".join(parts) + "\n"


_MODEL_COLS = ["Model", "HF architecture", "Layers", "Hidden", "Heads", "KV heads", "Head dim", "Experts",
               "Vocab", "Params (B)"]


def _model_row(a) -> list[str]:
    def m(value: Any, fact: str) -> str:
        return _m(value, a.status_of(fact))

    experts = f"{a.experts}/top{a.experts_per_token}" if a.experts else "-"
    params = f"{a.params_total / 1e9:.2f}" if a.params_total else "-"
    return [a.name, a.hf_architecture or "-", m(a.layers, "layers"), m(a.hidden, "hidden"), m(a.heads, "heads"),
            m(a.kv_heads, "kv_heads"), m(a.head_dim, "head_dim"), experts, m(a.vocab, "vocab"), params]


def render_models(catalog, fmt: str = "text") -> str:
    """Model architectures (``kiln catalog --models``). Deterministic."""
    models = sorted(catalog, key=lambda a: a.name)
    if fmt == "json":
        rows = [{"name": a.name, "hf_architecture": a.hf_architecture, "layers": a.layers, "hidden": a.hidden,
                 "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim, "intermediate": a.intermediate,
                 "moe_intermediate": a.moe_intermediate, "experts": a.experts,
                 "experts_per_token": a.experts_per_token, "vocab": a.vocab, "max_position": a.max_position,
                 "sliding_window": a.sliding_window, "mla": a.mla is not None, "params_total": a.params_total,
                 "status": dict(a.status), "sources": list(a.sources)} for a in models]
        return json.dumps({"models": rows}, indent=2, sort_keys=True) + "\n"
    table = _md_table if fmt == "markdown" else _text_table
    legend = _LEGEND.replace("*", "\\*") if fmt == "markdown" else _LEGEND
    return table(_MODEL_COLS, [_model_row(a) for a in models]) + "\n\nLegend: " + legend + "\n"


_FORMAT_COLS = ["Weights", "Acts", "QuantAlgo", "llmapi SMs", "engine (qformat) SMs", "ModelOpt", "Calib",
                "MoE experts (backend: SMs)"]


def _sms(support, fmt_status: bool = True) -> str:
    if support is None:
        return "-"
    text = ",".join(str(s) for s in support.sms) or "none"
    return _m(text, support.status)


def render_formats(table, fmt: str = "text") -> str:
    """The quantization recipes and where they run (``kiln catalog --formats``). Deterministic."""
    if fmt == "json":
        rows = [{"weights": r.weights, "activations": r.activations, "quant_algo": r.quant_algo,
                 "llmapi_sms": list(r.llmapi.sms), "experts_only": r.experts_only,
                 "engine": None if r.engine is None else {"qformat": r.engine.qformat,
                                                          "sms": list(r.engine.support.sms)},
                 "modelopt": None if r.modelopt is None else {"config": r.modelopt.config,
                                                              "cuda_only": r.modelopt.cuda_only},
                 "calibrates": r.calibration.calibrates,
                 "moe": {b: list(s.sms) for b, s in r.moe.items() if s.sms},
                 "sources": list(r.sources)} for r in table]
        kv = [{"kv_cache": k.name, "llmapi_sms": list(k.llmapi.sms), "engine_sms": list(k.engine.sms),
               "engine_kv_cache_dtype": k.engine_kv_cache_dtype} for k in table.kv_formats.values()]
        return json.dumps({"recipes": rows, "kv_cache": kv}, indent=2, sort_keys=True) + "\n"
    rows = []
    for r in table:
        moe = "; ".join(f"{b}: {_sms(s)}" for b, s in r.moe.items() if s.sms and b != "VANILLA") or "-"
        llmapi = "experts only" if r.experts_only else _sms(r.llmapi)
        engine = "-" if r.engine is None else f"({r.engine.qformat}) {_sms(r.engine.support)}"
        rows.append([r.weights, r.activations or "16-bit", r.quant_algo or "-", llmapi, engine,
                     (r.modelopt.config + (" (CUDA)" if r.modelopt.cuda_only else "")) if r.modelopt else "-",
                     "yes" if r.calibration.calibrates else "no", moe])
    table_fn = _md_table if fmt == "markdown" else _text_table
    legend = _LEGEND.replace("*", "\\*") if fmt == "markdown" else _LEGEND
    return (table_fn(_FORMAT_COLS, rows) + "\n\nSMs are compute capability x 10 (90 = Hopper). Default MoE backend: "
            f"{table.default_moe_backend}. Sources and notes: compiler/catalog/data/formats.json.\nLegend: "
            + legend + "\n")
