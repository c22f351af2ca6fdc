"""What lowering sees, and what several kinds share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Protocol

from compiler import deploy
from compiler.store.digests import DigestCache, tree_digests
from compiler.graph.kinds import ActionKind, Params, RunContext
from compiler.ir import Resolved
from compiler.spec.models import Spec
from compiler.targets.disruption import Disruption

__all__ = ["ActionKind", "Disruption", "ImageAdditions", "InputUnreadable", "LowerContext", "Params", "RunContext",
           "checkpoint_action_id", "input_spec_path"]


class ImageAdditions(Protocol):
    """What a deploy target adds to the serving image of each of its hosts, beyond the units' own
    servers (the host target: a disaggregated model's routers and files, compiler/targets/hosts/
    disaggregated.py). Registered per target in compiler/targets/registry.py and handed to the
    common image kinds through LowerContext, so that they know no target."""

    def routers(self, ctx: "LowerContext", host: str) -> list: ...  # units without a GPU: id, model, port, serving

    def unit_inputs(self, ctx: "LowerContext", unit) -> str: ...  # what a unit reads beside its command ("")

    def carries_options(self, ctx: "LowerContext", model: str) -> bool: ...  # options not from llmapi-options

    def image_files(self, ctx: "LowerContext", host: str, routers: list) -> dict[str, tuple[str, list[str]]]: ...


class InputUnreadable(Exception):
    """An input of the spec could not be read while lowering (it vanished, lost its permissions, or
    the disk failed after validation): compiler/lower.py turns it into a K916 diagnostic at `where`."""

    def __init__(self, where: tuple, message: str) -> None:
        super().__init__(message)
        self.where, self.message = where, message


@dataclass
class LowerContext:
    """The analysed IR of a spec that validated, and the digests of the files it names. Files are
    reached only through the IR's confined inputs (compiler/ir/inputs.py), never by joining the
    spec's text to a directory."""

    ir: Resolved
    digests: DigestCache
    image_additions: Mapping[str, ImageAdditions] = field(default_factory=dict)  # target name -> its additions
    _model_inputs: dict[str, dict[str, str]] | None = field(default=None, repr=False)

    @property
    def spec(self) -> Spec:
        return self.ir.spec

    def additions(self, host: str) -> ImageAdditions | None:
        """What the target that deploys `host` adds to its serving image (None: nothing)."""
        return self.image_additions.get(deploy.of(self.ir.spec.hosts[host]).name)

    @property
    def base_dir(self) -> Path:
        return self.ir.base_dir

    def input_path(self, value: str) -> Path:
        """The real path of an input the spec names, as resolution confined it."""
        return self.ir.input_path(value)

    def file_digest(self, value: str) -> str:
        return self._reading(value, lambda: self.digests.digest(self.input_path(value)))

    def tree_digests(self, value: str) -> dict[str, str]:
        """Relative path -> digest of every regular file of the directory the spec names `value`."""
        return self._reading(value, lambda: tree_digests(self.input_path(value), self.digests))

    def _reading(self, value: str, read):
        try:
            return read()
        except OSError as e:
            raise InputUnreadable(self.ir.inputs[value].where,
                                  f"cannot read {value!r}: {getattr(e, 'filename', None) or ''}"
                                  f"{': ' if getattr(e, 'filename', None) else ''}{e.strerror or e}") from None

    def model_inputs(self) -> dict[str, dict[str, str]]:
        """Digests of every file each model reads: weights/tokenizer/config, calibration and eval data."""
        if self._model_inputs is None:
            out: dict[str, dict[str, str]] = {}
            for name, model in sorted(self.spec.models.items()):
                roles: dict[str, str] = {}
                if model.source.path is not None:
                    for rel, digest in self.tree_digests(model.source.path).items():
                        roles[f"source/{rel}"] = digest
                q = model.quantization
                if q.calibration is not None:
                    roles["calibration"] = self.file_digest(q.calibration.data)
                if q.quality_gate is not None:
                    roles["eval"] = self.file_digest(q.quality_gate.eval)
                roles.update({role.split(":", 1)[1]: d for role, d in self.limit_inputs([name]).items()})
                out[name] = roles
            self._model_inputs = out
        return self._model_inputs

    def limit_inputs(self, models) -> dict[str, str]:
        """The measurement records (`kiln tune`) the batch limits of `models` come from, by role
        "<model>:measured": an action that reads a measured limit lists its record as an input."""
        out = {}
        for name in sorted(set(models)):
            rm = self.ir.models.get(name)
            if rm is not None and rm.measured is not None:
                out[f"{name}:measured"] = rm.measured.digest
        return out


def input_spec_path(action_id: str, role: str, models) -> str | None:
    """The spec field that names the file of an input role, by the roles' conventions above
    (model_inputs, limit_inputs, lower_source): "data" of calibration-set/chat is
    models.chat.quantization.calibration.data. None for a role of no model."""
    model, _, rest = role.partition(":")
    if not rest or model not in models:  # a role of the action's own model: "<kind>/<model>"
        model, rest = action_id.partition("/")[2], role
    if model not in models:
        return None
    field = {"data": "quantization.calibration.data", "calibration": "quantization.calibration.data",
             "eval": "quantization.quality_gate.eval",
             "measured": "limits.max_batch_size.measured"}.get(rest)
    if field is None and rest.startswith("source/"):
        field = "source.path"
    return f"models.{model}.{field}" if field else None


def checkpoint_action_id(ir: Resolved, model: str) -> str:
    """The action whose output tree is the model's servable checkpoint: on the engine target the
    TensorRT engine (its tree holds engine/); on llmapi the ModelOpt export when the model is
    quantized, else the verified source files."""
    if ir.target == "engine":
        return f"engine/{model}"
    formats = ir.models[model].formats
    return f"quantize/{model}" if formats is not None and formats.quantized else f"model-source/{model}"
