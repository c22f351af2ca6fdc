"""K8xx: the pinned toolchain against the serving target, the Triton image and the host drivers."""

from __future__ import annotations

import re
from typing import Iterable

from compiler import runtimes as serving_runtimes
from compiler.catalog.images import ImageFacts, ImageTable, load_image_table
from compiler.catalog.types import WEAK_STATUSES
from compiler.diagnostics import Diagnostic, Severity

from .base import Check, CheckContext, weak_fact_note

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:(a|b|rc|dev)(\d*))?(?:\.post(\d+))?")


def parse_version(text: str) -> tuple | None:
    """A comparable key for TensorRT-LLM versions: 1.2.0rc3 < 1.2.0 < 1.2.0.post1 < 1.2.1.

    A fourth numeric part (1.0.3.2510, an NGC build tag) is ignored."""
    m = _VERSION.fullmatch(text.strip())
    if not m:
        return None
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    pre = (0, m.group(5), int(m.group(6) or 0)) if m.group(5) else (1, "", 0)
    post = int(m.group(7) or 0) if m.group(7) else -1
    return (major, minor, patch, pre, post)


def release(text: str) -> tuple[int, int, int] | None:
    v = parse_version(text)
    return v[:3] if v else None


def _serving_base(ir, table: ImageTable) -> tuple[tuple, ImageFacts]:
    """(spec path, what the image table knows) of the image whose TensorRT-LLM must match the pin: the
    base the serving image is built from (compiler/actions/image_context.py), i.e. `image.base` when
    set, else `toolchain.triton_image`. A `triton_image` that a base replaces runs nowhere, so it is not
    held to the pin (a Dynamo fleet pins the runtime image's TensorRT-LLM, which no Triton image ships)."""
    if ir.image is not None and ir.image.base is not None:
        return ("image", "base"), table.facts(ir.image.base)
    return ("toolchain", "triton_image"), table.facts(ir.toolchain.triton_image)


def _pin_unlisted(ctx: CheckContext, rule: type[Check], field: str, listed: Iterable[str], needing: list[str],
                  lacks: str, cannot: str, table: str) -> Diagnostic:
    """A `toolchain.<field>` pin that a table of Kiln's lacks, refused for the models that need its row.

    The help names the releases the table lists, oldest first; the message names three of the models,
    so that a large spec's message stays one line."""
    pinned = getattr(ctx.ir.toolchain, field)
    known = ", ".join(sorted(listed, key=lambda v: parse_version(v) or ()))
    shown = ", ".join(repr(n) for n in needing[:3]) + (" and more" if len(needing) > 3 else "")
    return ctx.diag(rule, ("toolchain", field), f"{lacks}, so it cannot {cannot} {shown}",
                    help=f"pin one of {known}, or add {pinned} to {table} with its source")


def _pinned_outside(ctx: CheckContext, target: str, supported) -> str | None:
    """The pinned TensorRT-LLM where the spec's target is `target` and the release line (major,
    minor) is one `supported` refuses; None otherwise (another target, or a version not parsed)."""
    if ctx.target != target:
        return None
    pinned = ctx.ir.toolchain.tensorrt_llm
    r = release(pinned)
    return pinned if r is not None and not supported(r[:2]) else None

class _ToolchainCheck(Check):
    """The common base of the K8xx rules (no `code`: not a rule itself): the family's place in the
    order checks run and report in, said once."""

    order = 80


class EngineNeedsOldTrtllm(_ToolchainCheck):
    """The engine target with a TensorRT-LLM release that no longer has the TensorRT backend.

    The legacy engine path (`trtllm-build` + the inflight_batcher_llm Triton ensemble) is being
    removed: v1.3.0rc20 was announced as the last release supporting the TensorRT backend, and
    later releases remove trtllm-build, convert_checkpoint.py and the engine Triton templates.
    Kiln's engine target supports the 1.x releases up to 1.2.x, which the Triton
    `-trtllm-python-py3` containers ship (up to 1.2.1 in 26.07). Pin 1.2.x, or use the llmapi target.
    """

    code = "K801"
    name = "engine-needs-old-trtllm"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        pinned = _pinned_outside(ctx, "engine", lambda line: line <= (1, 2))
        if pinned is None:
            return
        yield ctx.diag(self, ("toolchain", "tensorrt_llm"),
                       f"the engine target needs TensorRT-LLM <= 1.2.x, but {pinned} is pinned: the TensorRT "
                       "backend is being removed (1.3.0rc20 was the last release with it; later releases have no "
                       "trtllm-build or engine templates)",
                       help="pin tensorrt_llm 1.2.1 (Triton 26.04-26.07), or use `target: llmapi`")


class ModelOptMissing(_ToolchainCheck):
    """A model is quantized but `toolchain.modelopt` is not pinned.

    Quantized checkpoints are produced with NVIDIA ModelOpt; its version decides the quantization
    algorithms and the checkpoint format, so it is part of every quantized artifact's content key
    and must be pinned like the other tools.
    """

    code = "K802"
    name = "modelopt-missing"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.ir.toolchain.modelopt is not None:
            return
        quantized = []
        for name, m in ctx.models():
            q = m.quantization
            if q.quantized or any(o.weights is not None and o.weights not in ("bf16", "fp16") for o in q.overrides):
                quantized.append(name)
        if not quantized:
            return
        shown = ", ".join(repr(n) for n in quantized)
        yield ctx.diag(self, ("toolchain",), f"model{'s' * (len(quantized) > 1)} {shown} "
                                             f"{'are' if len(quantized) > 1 else 'is'} quantized, but "
                                             "toolchain.modelopt is not pinned", key=True,
                       help='add `modelopt: "<version>"` (the NVIDIA ModelOpt release that quantizes the checkpoints)')


class ModelOptUnused(_ToolchainCheck):
    """`toolchain.modelopt` is pinned but no model is quantized.

    ModelOpt makes the quantized checkpoints; with every model at 16 bits nothing runs it, so the
    pin changes no artifact. It is harmless, but it reads as a promise about the build that nothing
    keeps (K802 asks for it again once a model is quantized).
    """

    code = "K813"
    name = "modelopt-unused"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.ir.toolchain.modelopt is None:
            return
        for _, m in ctx.models():
            q = m.quantization
            if q.quantized or any(o.weights is not None and o.weights not in ("bf16", "fp16") for o in q.overrides):
                return
        yield ctx.diag(self, ("toolchain", "modelopt"), "toolchain.modelopt has no effect: no model is quantized, "
                                                         "so nothing runs ModelOpt",
                       help="remove `modelopt`, or quantize a model")


class ModelOptUnknown(_ToolchainCheck):
    """`toolchain.modelopt` pins a release Kiln has no builder row for.

    Kiln quantizes with the torch and transformers versions its table pairs with each ModelOpt
    release (compiler/catalog/data/checkpoint_config.json, `builders`, with sources). A pin it does
    not list passed validation and plan and failed the build's quantize step, after torch had
    loaded; it is refused here, as an unknown TensorRT-LLM pin is (K808). Pin a listed release, or
    add the release's row with its source.
    """

    code = "K810"
    name = "modelopt-unknown"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.catalog.checkpoint_config import load_checkpoint_config

        pinned = ctx.ir.toolchain.modelopt
        if pinned is None:
            return
        table = load_checkpoint_config()
        if table.builder(pinned) is not None:
            return
        quantized = sorted(name for name, m in ctx.models() if m.quantization.quantized)
        if quantized:
            yield _pin_unlisted(ctx, self, "modelopt", table.builders, quantized,
                                f"Kiln has no builder for ModelOpt {pinned} (the torch and transformers it "
                                "quantizes with)", "quantize",
                                "the builders of compiler/catalog/data/checkpoint_config.json")


class ImageTrtllmMismatch(_ToolchainCheck):
    """The serving image does not ship the pinned TensorRT-LLM version.

    Artifacts are built for `toolchain.tensorrt_llm`; the image that serves them must ship that
    release (an engine built with another TensorRT does not load; a checkpoint's config is read
    by that release's transformers). Kiln's image table (compiler/catalog/data/images.json, from
    the Triton compatibility matrix) knows the version each
    `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3` tag ships (25.06-25.07 0.20.0, 25.08
    0.21.0, 25.09-25.10 1.0.0, 25.11 1.0.3, 25.12-26.02 1.1.0, 26.03 1.2.0, 26.04-26.07 1.2.1);
    a `nvcr.io/nvidia/tensorrt-llm/release:<version>` image ships the version of its tag. Other
    tritonserver variants (`-py3`, `-vllm-python-py3`, ...) have no TensorRT-LLM at all. Checked
    for the serving image's base: `image.base` when set (it replaces `toolchain.triton_image`),
    else `toolchain.triton_image`.
    """

    code = "K803"
    name = "image-trtllm-mismatch"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        pinned = ctx.ir.toolchain.tensorrt_llm
        table = load_image_table()
        path, facts = _serving_base(ctx.ir, table)
        fam = facts.family
        if facts.verdict == "no-trtllm":
            key = facts.tag.split("-")[0]
            yield ctx.diag(self, path, f"{_short(fam.repository)}:{facts.tag} has no TensorRT-LLM; only the "
                                       "-trtllm-python-py3 images ship it",
                           help=f"use {_short(fam.repository)}:{key}-trtllm-python-py3 (check that it ships "
                                f"TensorRT-LLM {pinned})")
            return
        if facts.verdict != "ships" or parse_version(facts.version) == parse_version(pinned):
            return
        ships = facts.version
        if fam.tag_is_version:
            help = f"use {_short(fam.repository)}:{pinned}, or pin tensorrt_llm {ships}"
        else:
            tags = table.tags_shipping(fam.repository, lambda v: release(v) == release(pinned))
            if tags:
                others = f" (or {', '.join(t.split('-')[0] for t in tags[1:])})" if tags[1:] else ""
                help = (f"use {_short(fam.repository)}:{tags[0]}{others} for TensorRT-LLM {pinned}, or pin "
                        f"tensorrt_llm {ships}")
            else:
                help = f"pin tensorrt_llm {ships}, or an image that ships {pinned}"
        yield ctx.diag(self, path, f"{_short(fam.repository)}:{facts.tag} ships TensorRT-LLM {ships}, but "
                                   f"toolchain.tensorrt_llm pins {pinned}; artifacts must be built with the "
                                   "version that serves them", help=help)


def _short(repository: str) -> str:
    """`tritonserver`, `tensorrt-llm/release`: the image's name without the registry and namespace."""
    return repository.split("nvcr.io/nvidia/", 1)[-1]


class ImageUnverifiable(_ToolchainCheck):
    """The serving image's TensorRT-LLM version cannot be verified.

    Kiln knows which TensorRT-LLM release each `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3`
    tag and each `nvcr.io/nvidia/tensorrt-llm/release:<version>` image ships (K803). For a tag
    outside that table, an image without a tag, or another image (a private rebuild), it cannot
    check that the image matches `toolchain.tensorrt_llm`; make sure it does. Checked for the
    serving image's base, as K803.
    """

    code = "K804"
    name = "image-unverifiable"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        pinned = ctx.ir.toolchain.tensorrt_llm
        path, facts = _serving_base(ctx.ir, load_image_table())
        if facts.verdict == "unknown-image":
            yield ctx.diag(self, path, f"cannot verify that this image ships TensorRT-LLM {pinned}: it is "
                                       "neither a tritonserver nor a tensorrt-llm/release image",
                           help="check the TensorRT-LLM version inside the image")
        elif facts.verdict == "no-tag":
            yield ctx.diag(self, path, f"cannot verify that this image ships TensorRT-LLM {pinned}: it has "
                                       "no tag, only a digest",
                           help="add the tag before the digest (tritonserver:<yy.mm>-trtllm-python-py3@sha256:"
                                "... or tensorrt-llm/release:<version>@sha256:...)")
        elif facts.verdict == "unknown-tag":
            known = sorted(facts.family.tags)
            span = f" ({known[0]}-{known[-1]})" if known else ""
            yield ctx.diag(self, path, f"cannot verify that {_short(facts.family.repository)}:{facts.tag} ships "
                                       f"TensorRT-LLM {pinned}: the tag is not in Kiln's table{span}",
                           help="check the Triton compatibility matrix for this tag")


class CheckpointConfigUnknown(_ToolchainCheck):
    """Kiln does not know how the pinned TensorRT-LLM reads a checkpoint's config.json.

    Every checkpoint Kiln writes (`quantize/<model>`, and `model-source/<model>` on the llmapi
    target) carries a config.json in the layout the serving runtime's own transformers version
    reads (RoPE theta and scaling, dtype): a config the runtime misreads serves garbage. The table
    compiler/catalog/data/checkpoint_config.json gives that transformers version and layout per
    TensorRT-LLM release, with sources; `kiln build` refuses to write a checkpoint for a release it
    does not list, so validation refuses the pin first. Pin a listed release (`kiln catalog
    --formats` shows the toolchain), or add the release's row with its source.
    """

    code = "K808"
    name = "checkpoint-config-unknown"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        from compiler.catalog.checkpoint_config import load_checkpoint_config

        table = load_checkpoint_config()
        pinned = ctx.ir.toolchain.tensorrt_llm
        if table.runtime(pinned) is not None:
            return
        writers = sorted(name for name, rm in ctx.ir.models.items()
                         if ctx.target == "llmapi" or (rm.formats is not None and rm.formats.quantized))
        if writers:
            yield _pin_unlisted(ctx, self, "tensorrt_llm", table.runtimes, writers,
                                f"Kiln does not know which transformers version TensorRT-LLM {pinned} reads "
                                "config.json with", f"write the checkpoint{'s' * (len(writers) > 1)} of",
                                "compiler/catalog/data/checkpoint_config.json")


def llmapi_facts_release() -> tuple[int, int] | None:
    """The release line (major, minor) whose LLM-API Kiln's options and Triton model were read from
    (compiler/actions/data/trtllm_llmapi.json, `_source.version`, e.g. "1.2.x")."""
    import json

    from compiler.resources import read_data

    version = json.loads(read_data("actions", "data", "trtllm_llmapi.json"))["_source"]["version"]
    r = release(version.replace(".x", ".0"))
    return r[:2] if r else None


class LlmapiOptionsUnverified(_ToolchainCheck):
    """The LLM-API options are written for another TensorRT-LLM release line than the pinned one.

    On the llmapi target, Kiln writes each model's LLM-API options (read by the Triton llmapi model,
    by `trtllm-serve --extra_llm_api_options` and by Dynamo's `--extra-engine-args`) with the field names of the
    release whose source it read (compiler/actions/data/trtllm_llmapi.json, TensorRT-LLM 1.2.x).
    TensorRT-LLM checks the options against a strict model whose fields change between releases and
    release candidates, so for a pin of another line Kiln cannot tell whether the runtime accepts
    the file: a field it renamed fails the server at start. Check the options file against the
    pinned release, or pin a 1.2.x release.
    """

    code = "K809"
    name = "llmapi-options-unverified"
    severity = Severity.WARNING

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "llmapi" or not ctx.ir.models:
            return
        pinned = ctx.ir.toolchain.tensorrt_llm
        r, known = release(pinned), llmapi_facts_release()
        if r is None or known is None or r[:2] == known or r[:2] < (1, 2):
            return  # unparseable, or older than 1.2 (K805 refuses it)
        line = f"{known[0]}.{known[1]}"
        yield ctx.diag(self, ("toolchain", "tensorrt_llm"),
                       f"the LLM-API options are written with TensorRT-LLM {line}'s field names; Kiln has not "
                       f"read {pinned}'s options model, so it cannot tell whether that release accepts them",
                       help=f"check the generated llmapi-options against TensorRT-LLM {pinned}'s llm_args.py, "
                            f"or pin a {line}.x release")


class LlmapiNeedsNewTrtllm(_ToolchainCheck):
    """The llmapi target with TensorRT-LLM older than 1.2.

    The llmapi target serves quantized Hugging Face checkpoints through the PyTorch backend and the
    LLM-API Triton model (all_models/llmapi), with the options Kiln generates for TensorRT-LLM 1.2
    and later. Pin 1.2.x or newer, or use the engine target for older releases.
    """

    code = "K805"
    name = "llmapi-needs-new-trtllm"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        pinned = _pinned_outside(ctx, "llmapi", lambda line: line >= (1, 2))
        if pinned is None:
            return
        yield ctx.diag(self, ("toolchain", "tensorrt_llm"),
                       f"the llmapi target uses the PyTorch backend of TensorRT-LLM >= 1.2, but {pinned} is pinned",
                       help="pin tensorrt_llm 1.2.1 (Triton 26.04-26.07), or use `target: engine`")


class EngineQualityGate(_ToolchainCheck):
    """A quality gate on the engine target, where Kiln cannot enforce it.

    On the llmapi target Kiln quantizes with ModelOpt itself and measures the unquantized and the
    quantized model on the gate's eval set before it exports the checkpoint. The engine target's
    recipe hands quantization to TensorRT-LLM's quantize.py and trtllm-build, which measure
    nothing, so a gate there would be a promise the build does not keep. Remove the gate, or use
    the llmapi target.
    """

    code = "K807"
    name = "engine-quality-gate"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.target != "engine":
            return
        for name, m in sorted(ctx.models()):
            if m.quantization.quality_gate is not None:
                yield ctx.diag(self, ("models", name, "quantization", "quality_gate"),
                               f"model {name!r} has a quality gate, but the engine target cannot enforce it: "
                               "TensorRT-LLM's quantize.py and trtllm-build measure no accuracy", key=True,
                               help="remove `quality_gate`, or use `target: llmapi`, where Kiln measures both models")


_DRIVER = re.compile(r"(>=|<=|==|>|<)?(\d+(?:\.\d+)*)")
_NUMBER = re.compile(r"\d{3}(?:\.\d+)*")


def _driver_key(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def min_driver_version(text: str | None) -> str | None:
    """The version number in a catalog minimum-driver fact ("570.133.20", "R570 (>=570.133.20)")."""
    if not text:
        return None
    found = _NUMBER.findall(text)
    return max(found, key=_driver_key) if found else None


class DriverTooOld(_ToolchainCheck):
    """The host's driver constraint admits drivers older than the GPU's minimum driver.

    Each GPU needs a driver from a minimum branch on (NVIDIA MIG user guide: A100 R450.80.02,
    H100 R525.85.12, H200 R550.90.07, B200/GB200 R570.133.20, B300 R580.82.07, RTX PRO 6000
    R575.51.03). A constraint such as `>=570` or `<580` still allows older drivers, on which the
    GPU (or MIG on it) does not work. Without a `driver` key Kiln does not check.
    """

    code = "K806"
    name = "driver-too-old"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for hname, host in ctx.ir.hosts.items():
            gpu, constraint = host.gpu, host.spec.driver
            if gpu is None or constraint is None:
                continue
            minimum = min_driver_version(gpu.min_driver)
            m = _DRIVER.fullmatch(constraint.strip())
            if minimum is None or m is None:
                continue
            op, version = m.group(1) or "==", m.group(2)
            if op in ("<", "<="):
                admits_older = True
            else:
                admits_older = _driver_key(version) < _driver_key(minimum)
            if not admits_older:
                continue
            status = gpu.status_of("min_driver")
            notes = (weak_fact_note(f"the minimum driver of {gpu.name}", status),) if status in WEAK_STATUSES else ()
            yield ctx.diag(self, ("hosts", hname, "driver"),
                           f"driver constraint {constraint!r} of host {hname!r} admits drivers older than "
                           f"{minimum}, the minimum for {gpu.name}",
                           help=f'use driver: ">={minimum}" (or a newer branch)', notes=notes)


class TrtllmServeNeedsLlmapi(_ToolchainCheck):
    """A serving runtime on a target it does not serve (`serving.runtime: trtllm-serve` on the engine target).

    trtllm-serve serves the LLM API: it loads a Hugging Face checkpoint with the options file that
    `llmapi-options/<model>` writes (the same file the Triton llmapi model reads). The engine
    target builds TensorRT engines for Triton's inflight_batcher_llm pipeline and writes no such
    options; serving an engine directory through trtllm-serve's TensorRT backend is the legacy
    path that TensorRT-LLM removes after 1.2/1.3, so Kiln does not offer it. Use the llmapi
    target, or the Triton runtime. (Each runtime's targets are in compiler/runtimes/data.)
    """

    code = "K811"
    name = "trtllm-serve-needs-llmapi"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in sorted(ctx.models()):
            rt = serving_runtimes.get(m.serving.runtime)
            why = rt.refusal(ctx.target)
            if why is not None:
                others = [r.name for r in serving_runtimes.REGISTRY.values() if r.refusal(ctx.target) is None]
                yield ctx.diag(self, ("models", name, "serving", "runtime"),
                               f"model {name!r} is served by {rt.name}, which cannot serve the spec's target "
                               f"{ctx.target}: {why}",
                               help=f"use `target: {' or '.join(rt.targets)}`"
                                    + "".join(f", or `runtime: {o}`" for o in others))


class TritonSettingWithTrtllmServe(_ToolchainCheck):
    """A serving setting the model's runtime does not act on (Triton's settings on a trtllm-serve model).

    `max_queue_delay_us`, `max_queue_size`, `queue_timeout_ms`, `streaming` and `instances` are
    Triton settings (dynamic batcher, queue policy, decoupled transaction policy, instance
    group), and `ports.grpc` / `ports.metrics` are Triton's ports: trtllm-serve has no such knob
    and listens on `ports.http` only. Kiln never writes a knob where it is ignored, so it refuses
    them rather than drop them silently. Remove them, or serve the model with Triton. (What each
    runtime ignores is in its data file, compiler/runtimes/data, with the source.)
    """

    code = "K812"
    name = "triton-setting-with-trtllm-serve"

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        for name, m in sorted(ctx.models()):
            s = m.serving
            rt = serving_runtimes.get(s.runtime)
            for ignored in rt.ignored(ctx.target):
                key, _, port = ignored.setting.partition(".")
                given = s.model_fields_set if not port else \
                    (s.ports.model_fields_set if "ports" in s.model_fields_set else set())
                if (port or key) not in given:
                    continue
                honour = [r.name for r in serving_runtimes.REGISTRY.values()
                          if r.honours(ignored.setting, ctx.target)]
                yield ctx.diag(self, ("models", name, "serving", *ignored.setting.split(".")),
                               f"serving.{ignored.setting} of model {name!r} has no effect with {rt.name}: "
                               f"{ignored.why}", key=True,
                               help=f"remove `{port or key}`" + "".join(f", or use `runtime: {o}`" for o in honour))
