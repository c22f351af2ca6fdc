"""The calibration-set action reads its data file one line at a time (issue 36: a 3 GB file took a
build to 23.8 GB and the kernel killed it), picks the same samples the whole-text reading picked,
and says what is wrong with a line by its number."""

from __future__ import annotations

import json
import logging
import random
import tracemalloc
from pathlib import Path

import pytest

from compiler.actions.calibration import KIND, OUTPUT, CalibrationDataError, CalibrationSetParams, read_texts
from compiler.graph.kinds import RunContext
from compiler.store.canonical import canonical_json


def _run(tmp_path: Path, data: bytes, samples: int, seed: int = 7) -> bytes:
    (tmp_path / "data.txt").write_bytes(data)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    KIND.run(CalibrationSetParams(model="m", samples=samples, seed=seed),
             RunContext(out, {"data": tmp_path / "data.txt"}, {}, logging.getLogger("test")))
    return (out / OUTPUT).read_bytes()


def _whole_text(data: bytes, samples: int, seed: int = 7) -> bytes:
    """The selection as the action made it before (the whole text in memory)."""
    texts = read_texts(data.decode("utf-8"))
    if len(texts) > samples:
        texts = [texts[i] for i in sorted(random.Random(seed).sample(range(len(texts)), samples))]
    return b"".join(canonical_json({"text": t}) + b"\n" for t in texts)


@pytest.mark.parametrize("data", [
    b"one\n\ntwo\r\nthree\rfour\n  \nfive\xe2\x80\xa8six\n" * 7,
    b"".join(json.dumps({"text": f"sample {i}\nwith a line break", "n": i}).encode() + b"\n" for i in range(50)),
    b"\xef\xbb\xbffirst line with a byte order mark\nsecond\n",
], ids=["plain", "jsonl", "bom"])
@pytest.mark.parametrize("samples", [3, 1000])
def test_the_streamed_selection_is_the_whole_text_selection(tmp_path: Path, data: bytes, samples: int) -> None:
    assert _run(tmp_path, data, samples) == _whole_text(data, samples)


def test_a_large_data_file_is_never_held_in_memory(tmp_path: Path) -> None:
    line = b'{"text": "' + b"calibration prose " * 50 + b'"}\n'
    data = line * ((16 << 20) // len(line))  # 16 MiB
    (tmp_path / "data.txt").write_bytes(data)
    out = tmp_path / "out"
    out.mkdir()
    tracemalloc.start()
    try:
        KIND.run(CalibrationSetParams(model="m", samples=16, seed=1),
                 RunContext(out, {"data": tmp_path / "data.txt"}, {}, logging.getLogger("test")))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"peak {peak / 2**20:.1f} MiB for a 16 MiB file"
    assert (out / OUTPUT).read_bytes().count(b"\n") == 16


@pytest.mark.parametrize("data, says", [
    (b'{"text": "a"}\n{"text": 1}\n', "line 2: expected an object"),
    (b'{"text": "a"}\n\n{"text": \n', "line 3: not JSON"),
    (b"ok\n\xff\xfe\n", "line 2: not UTF-8"),
    (b"x" * ((16 << 20) + 2), "line 1: longer than 16 MiB"),
])
def test_a_bad_line_is_named_by_its_number(tmp_path: Path, data: bytes, says: str) -> None:
    with pytest.raises(CalibrationDataError, match=says):
        _run(tmp_path, data, 4)
