"""`calibration-set`: the calibration samples a model's quantization uses, selected
deterministically (seeded) from the spec's data file. Its key covers the data file's digest, the
sample count and the seed; not the sequence length, which the quantize step applies."""

from __future__ import annotations

import json
import random

from compiler.graph.model import Action
from compiler.store.canonical import canonical_json

from .base import ActionKind, LowerContext, Params, RunContext


class CalibrationDataError(Exception):
    pass


def read_texts(raw: str) -> list[str]:
    """JSONL with a "text" field per line, or plain text with one sample per non-empty line."""
    lines = [ln for ln in raw.splitlines() if ln.strip()]
    if lines and all(ln.lstrip().startswith("{") for ln in lines):
        texts = []
        for i, ln in enumerate(lines, start=1):
            try:
                obj = json.loads(ln)
            except ValueError as e:
                raise CalibrationDataError(f"line {i}: not JSON: {e}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise CalibrationDataError(f"line {i}: expected an object with a string \"text\" field")
            texts.append(obj["text"])
        return texts
    return lines


class CalibrationSetParams(Params):
    model: str
    samples: int
    seed: int


class CalibrationSet(ActionKind[CalibrationSetParams]):
    kind, version, Params = "calibration-set", 1, CalibrationSetParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        out = []
        for name, model in sorted(ctx.spec.models.items()):
            cal = model.quantization.calibration
            if cal is None:
                continue
            out.append(self.action(f"{self.kind}/{name}", CalibrationSetParams(model=name, samples=cal.samples,
                                                                               seed=cal.seed),
                                   inputs={"data": ctx.file_digest(cal.data)},
                                   files={"data": str(ctx.input_path(cal.data))}))
        return out

    def run(self, params: CalibrationSetParams, ctx: RunContext) -> None:
        texts = read_texts(ctx.files["data"].read_text(encoding="utf-8"))
        if not texts:
            raise CalibrationDataError("the calibration data holds no samples")
        n = params.samples
        if len(texts) > n:
            picked = sorted(random.Random(params.seed).sample(range(len(texts)), n))
            texts = [texts[i] for i in picked]
        else:
            ctx.log.info("data has %d samples, fewer than the %d asked for: using all", len(texts), n)
        body = b"".join(canonical_json({"text": t}) + b"\n" for t in texts)
        (ctx.out / OUTPUT).write_bytes(body)
        ctx.log.info("selected %d samples", len(texts))


OUTPUT = "calibration.jsonl"
KIND = CalibrationSet()
