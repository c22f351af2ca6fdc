"""`calibration-set`: the calibration samples a model's quantization uses, selected
deterministically (seeded) from the spec's data file. Its key covers the data file's digest, the
sample count and the seed; not the sequence length, which the quantize step applies."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterator

from compiler.graph.model import Action
from compiler.store.canonical import canonical_json
from compiler.params import BUILD_INPUT

from .base import ActionKind, LowerContext, Params, RunContext


class CalibrationDataError(Exception):
    pass


def read_texts(raw: str) -> list[str]:
    """JSONL with a "text" field per line, or plain text with one sample per non-empty line."""
    lines = [ln for ln in raw.splitlines() if ln.strip()]
    if lines and all(ln.lstrip().startswith("{") for ln in lines):
        return [_text(ln, i) for i, ln in enumerate(lines, start=1)]
    return lines


class CalibrationSetParams(Params):
    effect_of_fields = BUILD_INPUT
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
        # Two passes over the file, one line in memory at a time (a data file may be larger than
        # memory): count the samples and tell JSONL from plain text, then keep the ones picked. The
        # samples and their order are those read_texts gives for the whole text.
        path = ctx.files["data"]
        count, jsonl = 0, True
        for _, line in _samples(path):
            count += 1
            jsonl = jsonl and line.lstrip().startswith("{")
        if not count:
            raise CalibrationDataError("the calibration data holds no samples")
        n = params.samples
        picked = set(random.Random(params.seed).sample(range(count), n)) if count > n else None
        if picked is None:
            ctx.log.info("data has %d samples, fewer than the %d asked for: using all", count, n)
        kept = 0
        with open(ctx.out / OUTPUT, "wb") as out:
            for i, (number, line) in enumerate(_samples(path)):
                text = _text(line, number) if jsonl else line
                if picked is None or i in picked:
                    out.write(canonical_json({"text": text}) + b"\n")
                    kept += 1
        ctx.log.info("selected %d samples", kept)


MAX_SAMPLE_BYTES = 16 << 20  # one line of the data file: a sample is text for at most max_seq_len tokens


def _samples(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-empty line of the file, as str.splitlines() of the whole
    text would split it, reading one line at a time."""
    with open(path, "rb") as f:
        number = 0
        while raw := f.readline(MAX_SAMPLE_BYTES + 1):
            number += 1
            if len(raw) > MAX_SAMPLE_BYTES:
                raise CalibrationDataError(f"line {number}: longer than {MAX_SAMPLE_BYTES >> 20} MiB (one sample "
                                           "per line)")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CalibrationDataError(f"line {number}: not UTF-8 text") from None
            for piece in text.splitlines():  # \r, \u2028 and the other line breaks split as before
                if piece.strip():
                    yield number, piece


def _text(line: str, number: int) -> str:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise CalibrationDataError(f"line {number}: not JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise CalibrationDataError(f"line {number}: expected an object with a string \"text\" field")
    return obj["text"]


OUTPUT = "calibration.jsonl"
KIND = CalibrationSet()
