"""The rules of builders files (compiler/machines.py): raised by `kiln plan --builders`, not by
validation (a spec is valid whatever machines build it)."""

from __future__ import annotations

from compiler.diagnostics import Rule


class NoBuilderHolds(Rule):
    """No builder the builders file declares can run an action of the spec.

    Every action has a size (GPUs of an architecture and memory each, host memory, disk: `kiln plan`
    prints it) and software needs; a builder class holds the action when it has all of them. An
    action no class holds would fail at build time (out of memory half-way, a full disk) or wait
    forever, so the plan refuses it. Declare a class that holds it, or change the spec (a smaller
    calibration batch, a model that fits one GPU, more GPUs for an engine build).
    """

    code = "K405"
    name = "no-builder-holds-action"


class BuildersFileInvalid(Rule):
    """The builders file is not what Kiln reads: a `builders:` mapping of class names to their
    `runs-on` labels, `gpu` (a catalog name), `gpus`, `mig`, `host_memory_gib`, `disk_gib` and
    `has` (of torch, gpu, docker, network, tensorrt_llm)."""

    code = "K406"
    name = "builders-file-invalid"
