"""K8xx: the pinned toolchain against the serving target, the Triton image and the host drivers."""

from __future__ import annotations

import re
from typing import Iterable

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


#: Triton `<yy.mm>-trtllm-python-py3` tag -> TensorRT-LLM version it ships
#: (triton-inference-server/server docs/introduction/compatibility.md). 25.11 ships 1.0.3.2510.
TRITON_TRTLLM: dict[str, str] = {
    "25.06": "0.20.0", "25.07": "0.20.0",
    "25.08": "0.21.0",
    "25.09": "1.0.0", "25.10": "1.0.0",
    "25.11": "1.0.3",
    "25.12": "1.1.0", "26.01": "1.1.0", "26.02": "1.1.0",
    "26.03": "1.2.0",
    "26.04": "1.2.1", "26.05": "1.2.1", "26.06": "1.2.1", "26.07": "1.2.1",
}

_IMAGE = re.compile(r"(?P<repo>[^@]+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*))?@sha256:[0-9a-f]{64}")
_TRTLLM_TAG = re.compile(r"(?P<yymm>\d\d\.\d\d)-trtllm-python-py3")
_TRITON_TAG = re.compile(r"(?P<yymm>\d\d\.\d\d)-(?P<variant>.+)")


def _tags_for(version: str) -> list[str]:
    want = release(version)
    return [f"{t}-trtllm-python-py3" for t, v in TRITON_TRTLLM.items() if release(v) == want]


class EngineNeedsOldTrtllm(Check):
    """The engine target with a TensorRT-LLM release that no longer has the TensorRT backend.

    The legacy engine path (`trtllm-build` + the inflight_batcher_llm Triton ensemble) is being
    removed: v1.3.0rc20 was announced as the last release supporting the TensorRT backend, and
    later releases remove trtllm-build, convert_checkpoint.py and the engine Triton templates.
    Kiln's engine target supports the 1.x releases up to 1.2.x, which the Triton
    `-trtllm-python-py3` containers ship (up to 1.2.1 in 26.07). Pin 1.2.x, or use the llmapi target.
    """

    code = "K801"
    name = "engine-needs-old-trtllm"
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.spec.target != "engine":
            return
        pinned = ctx.spec.toolchain.tensorrt_llm
        r = release(pinned)
        if r is None or r[:2] <= (1, 2):
            return
        yield ctx.diag(self, ("toolchain", "tensorrt_llm"),
                       f"the engine target needs TensorRT-LLM <= 1.2.x, but {pinned} is pinned: the TensorRT "
                       "backend is being removed (1.3.0rc20 was the last release with it; later releases have no "
                       "trtllm-build or engine templates)",
                       help="pin tensorrt_llm 1.2.1 (Triton 26.04-26.07), or use `target: llmapi`")


class ModelOptMissing(Check):
    """A model is quantized but `toolchain.modelopt` is not pinned.

    Quantized checkpoints are produced with NVIDIA ModelOpt; its version decides the quantization
    algorithms and the checkpoint format, so it is part of every quantized artifact's content key
    and must be pinned like the other tools.
    """

    code = "K802"
    name = "modelopt-missing"
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.spec.toolchain.modelopt is not None:
            return
        quantized = []
        for name, m in ctx.spec.models.items():
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


class ImageTrtllmMismatch(Check):
    """The Triton image does not ship the pinned TensorRT-LLM version.

    `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3` images each ship one TensorRT-LLM
    release (Triton compatibility matrix): 25.06-25.07 0.20.0, 25.08 0.21.0, 25.09-25.10 1.0.0,
    25.11 1.0.3, 25.12-26.02 1.1.0, 26.03 1.2.0, 26.04-26.07 1.2.1. Engines and checkpoints must be
    built with the version that serves them (an engine built with another TensorRT does not
    load). Other tritonserver variants (`-py3`, `-vllm-python-py3`, ...) have no TensorRT-LLM backend.
    """

    code = "K803"
    name = "image-trtllm-mismatch"
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        tc = ctx.spec.toolchain
        m = _IMAGE.fullmatch(tc.triton_image)
        if not m or not m.group("repo").endswith("tritonserver") or not m.group("tag"):
            return  # K804
        tag, pinned = m.group("tag"), tc.tensorrt_llm
        path = ("toolchain", "triton_image")
        t = _TRTLLM_TAG.fullmatch(tag)
        if t is None:
            other = _TRITON_TAG.fullmatch(tag)
            if other is not None:
                yield ctx.diag(self, path, f"tritonserver:{tag} has no TensorRT-LLM backend; only the "
                                           "-trtllm-python-py3 images ship it",
                               help=f"use tritonserver:{other.group('yymm')}-trtllm-python-py3 (check that it ships "
                                    f"TensorRT-LLM {pinned})")
            return
        ships = TRITON_TRTLLM.get(t.group("yymm"))
        if ships is None or parse_version(ships) == parse_version(pinned):
            return
        tags = _tags_for(pinned)
        if tags:
            others = f" (or {', '.join(t.split('-')[0] for t in tags[1:])})" if tags[1:] else ""
            help = f"use tritonserver:{tags[0]}{others} for TensorRT-LLM {pinned}, or pin tensorrt_llm {ships}"
        else:
            help = f"pin tensorrt_llm {ships}, or an image that ships {pinned}"
        yield ctx.diag(self, path, f"tritonserver:{tag} ships TensorRT-LLM {ships}, but toolchain.tensorrt_llm pins "
                                   f"{pinned}; artifacts must be built with the version that serves them", help=help)


class ImageUnverifiable(Check):
    """The Triton image's TensorRT-LLM version cannot be verified.

    Kiln knows which TensorRT-LLM release each `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3`
    tag ships (K803). For a tag outside that table, an image without a tag, or an image that is not
    a tritonserver image (a private rebuild), it cannot check that the image matches
    `toolchain.tensorrt_llm`; make sure it does.
    """

    code = "K804"
    name = "image-unverifiable"
    severity = Severity.WARNING
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        tc = ctx.spec.toolchain
        m = _IMAGE.fullmatch(tc.triton_image)
        path = ("toolchain", "triton_image")
        pinned = tc.tensorrt_llm
        if not m or not m.group("repo").endswith("tritonserver"):
            yield ctx.diag(self, path, f"cannot verify that this image ships TensorRT-LLM {pinned}: it is not a "
                                       "tritonserver image", help="check the TensorRT-LLM version inside the image")
            return
        tag = m.group("tag")
        if not tag:
            yield ctx.diag(self, path, f"cannot verify that this image ships TensorRT-LLM {pinned}: it has no tag, "
                                       "only a digest",
                           help="add the tag before the digest (tritonserver:<yy.mm>-trtllm-python-py3@sha256:...)")
            return
        t = _TRTLLM_TAG.fullmatch(tag)
        if t is not None and t.group("yymm") not in TRITON_TRTLLM:
            yield ctx.diag(self, path, f"cannot verify that tritonserver:{tag} ships TensorRT-LLM {pinned}: the tag "
                                       "is not in Kiln's table (25.06-26.07)",
                           help="check the Triton compatibility matrix for this tag")


class LlmapiNeedsNewTrtllm(Check):
    """The llmapi target with TensorRT-LLM older than 1.2.

    The llmapi target serves quantized Hugging Face checkpoints through the PyTorch backend and the
    LLM-API Triton model (all_models/llmapi), with the options Kiln generates for TensorRT-LLM 1.2
    and later. Pin 1.2.x or newer, or use the engine target for older releases.
    """

    code = "K805"
    name = "llmapi-needs-new-trtllm"
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.spec.target != "llmapi":
            return
        pinned = ctx.spec.toolchain.tensorrt_llm
        r = release(pinned)
        if r is None or r[:2] >= (1, 2):
            return
        yield ctx.diag(self, ("toolchain", "tensorrt_llm"),
                       f"the llmapi target uses the PyTorch backend of TensorRT-LLM >= 1.2, but {pinned} is pinned",
                       help="pin tensorrt_llm 1.2.1 (Triton 26.04-26.07), or use `target: engine`")


class EngineQualityGate(Check):
    """A quality gate on the engine target, where Kiln cannot enforce it.

    On the llmapi target Kiln quantizes with ModelOpt itself and measures the unquantized and the
    quantized model on the gate's eval set before it exports the checkpoint. The engine target's
    recipe hands quantization to TensorRT-LLM's quantize.py and trtllm-build, which measure
    nothing, so a gate there would be a promise the build does not keep. Remove the gate, or use
    the llmapi target.
    """

    code = "K807"
    name = "engine-quality-gate"
    order = 80

    def run(self, ctx: CheckContext) -> Iterable[Diagnostic]:
        if ctx.spec.target != "engine":
            return
        for name, m in sorted(ctx.spec.models.items()):
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


class DriverTooOld(Check):
    """The host's driver constraint admits drivers older than the GPU's minimum driver.

    Each GPU needs a driver from a minimum branch on (NVIDIA MIG user guide: A100 R450.80.02,
    H100 R525.85.12, H200 R550.90.07, B200/GB200 R570.133.20, B300 R580.82.07, RTX PRO 6000
    R575.51.03). A constraint such as `>=570` or `<580` still allows older drivers, on which the
    GPU (or MIG on it) does not work. Without a `driver` key Kiln does not check.
    """

    code = "K806"
    name = "driver-too-old"
    order = 80

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
