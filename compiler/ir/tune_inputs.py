"""What a measured artifact was built from, read from the IR: the fingerprints a `kiln tune` record
keeps (`inputs`) and the records pass, which compares them with the spec without lowering (the
checks report what it finds: K914, K917, compiler/checks/measured.py).

A record names what it measured by artifact keys (`artifacts`), and those need the build graph, so
comparing them is left to the commands that lower anyway (compiler/staleness.py, from
compiler/lower.py). The records pass reads the IR only: for each measured artifact, a digest of every IR
field its kind reads (`READS`), leaf by leaf, and of the files the model names. A field that
changed names the artifact and the field. The table is checked against the lowering
(tests/test_tune_reads.py changes every field of several specs, one at a time, and compares the
measured artifacts' keys): a field whose change moves a kind's key is listed for that kind (else a
stale number would be taken as current), and one listed that moves no key says why beside it (else
the warning names an artifact the spec still builds the same).

Left out everywhere: `limits.max_batch_size` (the measurement sets it: what the measurement itself
changed is not a change, see compiler/staleness.as_served), `sla` and `workload` (compared as such by
compiler/ir/measured.spec_changes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.ir.measured import RecordState, spec_changes
from compiler.store.digests import DigestCache, tree_digests
from compiler.store.canonical import canonical_json
from compiler.store.local import sha256_bytes

# the model's spec fields (sections or dotted paths; a prefix takes every leaf below it and the files
# a field names, `source.path:<file>`) and spec-wide pins each action kind of a model reads, as its
# key does (compiler/actions/<kind>.py); a kind not listed reads all of them. Kept where no key moves:
# - source.path, its text (the files below it are read): a path moved onto the same files keeps the keys;
# - target, on the kinds one target builds (quantize, quality-gate, model-source, llmapi-options,
#   engine): another target no longer builds them, which is a change;
# - quantization.activations: the recipe follows it (formats_pass); the default format written out is
#   no change, another one is;
# - toolchain.triton_image on triton-repo: the server the unit ran, in no measured artifact's key (the
#   image is the host's, shared with its other units) but in what the record measured.
_QUANT = ("quantization.weights", "quantization.activations", "quantization.kv_cache", "quantization.block_size",
          "quantization.exclude", "quantization.overrides", "quantization.calibration",
          "quantization.quality_gate.eval", "quantization.quality_gate.metric", "quantization.quality_gate.samples")
# the ModelOpt checkpoint (QuantizeParams): the gate's eval is in it, the gate's threshold is quality-gate's
_CHECKPOINT = ("source", "dtype", *_QUANT, "target", "toolchain.tensorrt_llm", "toolchain.modelopt")
READS: dict[str, tuple[str, ...]] = {
    "model-source": ("source", "target", "toolchain.tensorrt_llm"),
    "tokenizer": ("source",),
    "calibration-set": ("quantization.calibration.data", "quantization.calibration.samples",
                        "quantization.calibration.seed"),
    "quantize": _CHECKPOINT,
    "quality-gate": (*_CHECKPOINT, "quantization.quality_gate.max_regression_pct"),
    # EngineParams: its recipe is given no exclude or overrides, and no gate (K807 refuses one)
    "engine": ("source", "dtype", "quantization.weights", "quantization.activations", "quantization.kv_cache",
               "quantization.block_size", "quantization.calibration", "parallelism.tp", "parallelism.pp",
               "limits", "runtime.tokens_per_block", "kernels.fp8_context_fmha", "target",
               "toolchain.tensorrt_llm"),
    # options(): the KV cache's format is the only part of the checkpoint's it writes
    "llmapi-options": ("quantization.kv_cache", "parallelism", "limits", "runtime", "kernels.attention",
                       "kernels.moe", "target", "toolchain.tensorrt_llm"),
    # the model's part of the host's repository (serving/triton.py model_params; ranks: tp * pp)
    "triton-repo": ("parallelism.tp", "parallelism.pp", "limits.max_input_len", "limits.max_beam_width",
                    "runtime.scheduler", "runtime.kv_cache_memory_fraction", "runtime.block_reuse",
                    "runtime.chunked_prefill", "runtime.cuda_graph_batch_sizes", "serving.runtime",
                    "serving.max_queue_delay_us", "serving.max_queue_size", "serving.queue_timeout_ms",
                    "serving.streaming", "serving.stream_text", "serving.instances", "toolchain.triton_image"),
}
_EVERY = ("source", "architecture", "dtype", "quantization", "parallelism", "kernels", "limits", "runtime",
          "serving", "target", "toolchain")
_LEFT_OUT = {"limits.max_batch_size"}


def _leaves(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for k, v in sorted(value.items()):
            _leaves(f"{prefix}.{k}", v, out)
    elif prefix not in _LEFT_OUT:
        out[prefix] = sha256_bytes(canonical_json(value))


def _readable(read, instead):
    """A file unreadable now differs from what was measured (the build reports it as K916)."""
    try:
        return read()
    except OSError:
        return instead


def _fields(ir, model: str, digests: DigestCache) -> dict[str, str]:
    """IR field (a leaf, dotted; a file the model names as `<field>:<path>`) -> digest, of one model."""
    spec = ir.models[model].spec
    doc = spec.model_dump(mode="json")
    out: dict[str, str] = {}
    for section in ("source", "architecture", "dtype", "quantization", "parallelism", "kernels", "limits",
                    "runtime", "serving"):
        _leaves(section, doc.get(section), out)
    if spec.source.path is not None and spec.source.path in ir.inputs:
        out.update({f"source.path:{rel}": d for rel, d in _readable(
            lambda: tree_digests(ir.input_path(spec.source.path), digests), {"": "unreadable"}).items()})
    q = spec.quantization
    for where, value in (("quantization.calibration.data", q.calibration.data if q.calibration else None),
                         ("quantization.quality_gate.eval", q.quality_gate.eval if q.quality_gate else None)):
        if value is not None and value in ir.inputs:
            out[f"{where}:file"] = _readable(lambda v=value: digests.digest(ir.input_path(v)), "unreadable")
    out["target"] = sha256_bytes(canonical_json(ir.spec.target))
    out.update({f"toolchain.{pin}": sha256_bytes(canonical_json(value))
                for pin, value in ir.spec.toolchain.model_dump(mode="json").items()})
    return out


def fingerprints(ir, model: str, artifacts, digests: DigestCache | None = None) -> dict[str, dict[str, str]]:
    """Measured artifact id -> {IR field -> digest} of what its kind reads (`artifacts`: the ids the
    record lists, `<kind>/<model>` or `<kind>/<host>#<model>`)."""
    leaves = _fields(ir, model, digests if digests is not None else DigestCache(None))
    out = {}
    for aid in sorted(artifacts):
        reads = READS.get(aid.split("/", 1)[0], _EVERY)
        out[aid] = {k: v for k, v in sorted(leaves.items()) if any(_under(k, p) for p in reads)}
    return out


def _under(leaf: str, prefix: str) -> bool:
    return leaf == prefix or leaf.startswith((prefix + ".", prefix + ":"))


def input_changes(recorded: dict[str, dict[str, str]], now: dict[str, str]) -> list[str]:
    """'<artifact> changed (<fields>)' for each measured artifact whose inputs differ. `now`: every
    field of the model as the spec describes it now (`_fields`). A recorded field is compared
    whatever `READS` says today, so widening or narrowing the table does not age a record; a field
    the record lacks is new since (a field Kiln added, its default) and is left to the plan's keys,
    except a file added beside the files a field names (a directory's new file)."""
    out = []
    for aid in sorted(recorded):
        before = recorded[aid]
        named = {k.split(":", 1)[0] for k in before if ":" in k}
        changed = sorted({k for k in before if before[k] != now.get(k)}
                         | {k for k in now if ":" in k and k not in before and k.split(":", 1)[0] in named})
        if changed:
            shown = list(dict.fromkeys(k.split(":", 1)[0] + (" (a file)" if ":" in k else "") for k in changed))
            out.append(f"{aid} changed ({', '.join(shown[:3])}{', ...' if len(shown) > 3 else ''})")
    return out


def record_changes(ir, digests: DigestCache | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """Per model with a measured limit, what its record measured that the spec no longer describes
    (empty: current, as far as the IR tells), and the models whose record predates `inputs` (their
    artifacts are compared where the spec is lowered)."""
    out, older = {}, []
    for name, rm in sorted(ir.models.items()):
        if rm.measured is None:
            continue
        record = rm.measured.record
        changes = spec_changes(ir, name, rm.measured)
        if record.inputs is None:
            older.append(name)
        elif any(u.id == record.unit for u in ir.units):
            changes += input_changes(record.inputs, _fields(ir, name, digests if digests is not None
                                                             else DigestCache(None)))
        out[name] = changes
    return out, older


def records_pass(ir):
    """Per model with a measurement record, what the record measured that the spec no longer
    describes, by the IR (`record_changes`): `Resolved.records`, which the estimates pass (measured
    beats modelled only where a record still applies) and the checks (K914, K917) read."""
    if not any(rm.measured is not None for rm in ir.models.values()):
        return ir
    changed, older = record_changes(ir)
    return dataclasses.replace(ir, records={name: RecordState(tuple(changes), name in older)
                                            for name, changes in changed.items()})
