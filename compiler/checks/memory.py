"""K4xx: does each serving unit hold its model's weights and enough KV cache?"""

from __future__ import annotations

from typing import Iterable

from compiler.capacity.memory import gpu_memory_bytes
from compiler.capacity.report import gib, gib_apart
from compiler.diagnostics import Diagnostic, Severity

from .base import Check, CheckContext, once_per_entry, weak_fact_note


def _figures(ctx: CheckContext):
    """(unit, figures) for every sized unit; one per spec location (replicas of a layout share it)."""
    for unit in once_per_entry(ctx.ir.sized_units()):
        yield unit, unit.figures


def _notes(fig) -> list[str]:
    return [weak_fact_note(w.rsplit(" (", 1)[0], w.rsplit("(", 1)[-1].rstrip(")")) for w in fig.weak_facts]


class WeightsDoNotFit(Check):
    """The model's weights (at the chosen formats, per GPU of the unit) plus the activation and
    workspace reserve do not fit in the serving unit's memory.

    Weight bytes count block-scale overhead (NVFP4 is 4.5 bits per weight) and keep excluded
    modules, embeddings and norms at the model dtype. Under tensor parallelism the linear layers
    are split across the GPUs; under pipeline parallelism the largest stage counts. The reserve is
    an estimate (activations for max_num_tokens plus a CUDA context allowance).
    """

    code = "K401"
    name = "weights-do-not-fit"
    order = 50

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for unit, fig in _figures(ctx):
            cap = fig.capacity
            if cap.fits:
                continue
            model = ctx.model(unit.model)
            fmt = model.quantization.weights
            yield ctx.diag(
                self, unit.path + ("serves",),
                f"model {unit.model!r} does not fit on {fig.slice} of {fig.gpu} ({unit.id}): weights need "
                f"{gib(cap.weight_bytes)} per GPU ({fmt}) plus a {gib(cap.reserve_bytes)} reserve, "
                f"the unit has {gib(cap.gpu_memory_bytes)}",
                help=self._help(ctx, unit, cap), notes=_notes(fig))

    @staticmethod
    def _help(ctx: CheckContext, unit, cap) -> str:
        """A larger MIG profile only where one could help: the whole GPU would hold the weights."""
        if unit.mig is None:
            return "use more GPUs (tp, or pp), or a smaller weight format"
        gpu = ctx.ir.hosts[unit.host].gpu
        whole = gpu_memory_bytes(gpu)
        if cap.weight_bytes + cap.reserve_bytes <= whole:
            return "use a larger MIG profile (or the whole GPU), or a smaller weight format"
        return (f"not even a whole {gpu.name} ({gib(whole)}) holds it: serve it on several GPUs (tp) without MIG, "
                "or use a smaller weight format")


class NoSequenceFits(Check):
    """Not even one sequence of `max_seq_len` tokens fits in the KV-cache pool.

    The pool is `runtime.kv_cache_memory_fraction` of the memory left after weights and the
    reserve; each sequence needs max_seq_len tokens (rounded up to whole KV pages) times the KV
    bytes per token (GQA/MLA heads, sliding windows and the KV-cache format are accounted for).
    """

    code = "K402"
    name = "no-sequence-fits"
    order = 51

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for unit, fig in _figures(ctx):
            cap = fig.capacity
            if not cap.fits or cap.kv_bytes_per_token == 0 or cap.max_sequences >= 1:
                continue
            model = ctx.model(unit.model)
            lim = model.limits
            need = cap.blocks_per_sequence * cap.tokens_per_block * cap.kv_bytes_per_token
            need_s, pool_s = gib_apart(need, cap.kv_pool_bytes)
            yield ctx.diag(
                self, unit.path + ("serves",),
                f"no sequence of max_seq_len={lim.max_seq_len} fits in the KV cache of {unit.id}: one sequence "
                f"needs {need_s}, the pool has {pool_s}",
                help=self._help(model, unit, cap), notes=_notes(fig))

    @staticmethod
    def _help(model, unit, cap) -> str:
        """Only fixes the spec does not already have: no fp8 KV cache suggested to a spec that has one."""
        fixes = []
        held = cap.blocks_in_pool * cap.tokens_per_block
        fixes.append(f"lower limits.max_seq_len (the pool holds about {held:,} tokens)" if held
                     else "lower limits.max_seq_len")
        if model.quantization.kv_cache in ("auto", "bf16", "fp16"):
            fixes.append("use an fp8 KV cache (quantization.kv_cache: fp8)")
        fixes.append("give the model more memory (a larger MIG profile)" if unit.mig is not None
                     else "give the model more memory (more GPUs: parallelism.tp)")
        return ", ".join(fixes[:-1]) + ", or " + fixes[-1]


class BatchNotReachable(Check):
    """`max_batch_size` sequences of full length (`max_seq_len`) do not fit in the KV cache at once.

    The scheduler will run fewer sequences concurrently than the batch limit promises when they
    are long; requests queue instead. Either accept it (short requests still batch fully), lower
    max_batch_size, or give the unit more memory. The message gives the reachable concurrency.
    """

    code = "K403"
    name = "batch-not-reachable"
    severity = Severity.WARNING
    order = 52

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for unit, fig in _figures(ctx):
            cap = fig.capacity
            lim = ctx.model(unit.model).limits
            if not cap.fits or cap.max_sequences < 1 or cap.batch_reachable:
                continue
            yield ctx.diag(
                self, unit.path + ("serves",),
                f"{unit.id}: the KV cache holds {cap.max_sequences} sequence(s) of {lim.max_seq_len} tokens, "
                f"fewer than max_batch_size={lim.max_batch_size}",
                help=f"set max_batch_size <= {cap.max_sequences}, shorten max_seq_len, or add memory",
                notes=_notes(fig))


class SlaOutOfReach(Check):
    """The performance estimate misses the model's `sla` even with one request in flight.

    `kiln plan` estimates each unit's TTFT and TPOT over concurrency from a step model fitted to
    published TensorRT-LLM measurements (compiler/capacity/estimate.py). When even the optimistic
    end of the estimate's interval, at concurrency 1, is slower than a target of the `sla`, no
    batch limit will meet it and `kiln tune` would find no passing concurrency. The curve is at the
    sla's percentile (compiler/capacity/estimate_latency.py), and the optimistic end of the interval
    is taken, so the warning errs on the side of silence. Serve the model on a faster GPU or format, with tensor parallelism, or relax
    the target; a `kiln tune` record for the unit replaces the estimate with a measurement (and
    silences this), and one on the same GPU at the same precision recalibrates it. A record the spec
    has moved away from (K914) measures nothing any more: the model's estimate is judged again.
    """

    code = "K404"
    name = "sla-out-of-reach"
    severity = Severity.WARNING
    order = 53

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for unit, fig in _figures(ctx):
            sla = ctx.model(unit.model).sla
            e = fig.estimate
            # the estimate as the measurements pass left it: a unit its own current record measured met the
            # sla there (nothing to warn of); a recalibrated one is judged on its calibrated figures, and
            # one no current record covers (a stale record, K914; another GPU or precision) on the model's
            if sla is None or not e or not e.get("curve") or e.get("basis") == "measured":
                continue
            first = e["curve"][0]
            misses = []
            for key, what in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
                target, est = getattr(sla, key), e[key]
                if target is None or not est["value"]:
                    continue
                best = first[key] * est["low"] / est["value"]  # the optimistic end, at concurrency 1
                if best > target:
                    misses.append(f"{what} at least {best:,.3g} ms against {target:g} ms")
            if misses:
                yield ctx.diag(
                    self, unit.path + ("serves",),
                    f"{unit.id}: the estimate misses the sla of model {unit.model!r} with a single request in flight: "
                    f"{'; '.join(misses)} ({sla.percentile} target and estimate)",
                    help="serve it on a faster GPU or format, or with tensor parallelism; or relax the sla",
                    notes=[f"estimate basis: {e['basis']}, coefficients {e['coefficients']}"])
