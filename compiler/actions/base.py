"""What lowering sees, and what several kinds share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from compiler.graph.inputs import DigestCache, tree_digests
from compiler.graph.kinds import ActionKind, Disruption, Params, RunContext
from compiler.ir import Resolved
from compiler.spec.models import Spec

__all__ = ["ActionKind", "Disruption", "LowerContext", "Params", "RunContext", "checkpoint_action_id"]


@dataclass
class LowerContext:
    """The analysed IR of a spec that validated, and the digests of the files it names."""

    ir: Resolved
    digests: DigestCache
    _model_inputs: dict[str, dict[str, str]] | None = field(default=None, repr=False)

    @property
    def spec(self) -> Spec:
        return self.ir.spec

    @property
    def base_dir(self) -> Path:
        return self.ir.base_dir

    def file_digest(self, rel: str) -> str:
        return self.digests.digest(self.base_dir / rel)

    def model_inputs(self) -> dict[str, dict[str, str]]:
        """Digests of every file each model reads: weights/tokenizer/config, calibration and eval data."""
        if self._model_inputs is None:
            out: dict[str, dict[str, str]] = {}
            for name, model in sorted(self.spec.models.items()):
                roles: dict[str, str] = {}
                if model.source.path is not None:
                    for rel, digest in tree_digests(self.base_dir / model.source.path, self.digests).items():
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


def checkpoint_action_id(ir: Resolved, model: str) -> str:
    """The action whose output tree is the model's servable checkpoint: on the engine target the
    TensorRT engine (its tree holds engine/); on llmapi the ModelOpt export when the model is
    quantized, else the verified source files."""
    if ir.target == "engine":
        return f"engine/{model}"
    formats = ir.models[model].formats
    return f"quantize/{model}" if formats is not None and formats.quantized else f"model-source/{model}"
