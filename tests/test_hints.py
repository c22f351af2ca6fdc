"""Hints that must not mislead: K402's figures and fixes, GPU suggestions by family, ambiguous GPU
aliases (K909), one K908 per port clash."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.capacity.report import GiB, gib_apart
from compiler.catalog import load_gpu_catalog
from compiler.pipeline import validate_path

HEAD = """kiln: v1
name: case
toolchain:
  tensorrt_llm: "1.2.1"
  triton_image: nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:1c9567411b9b6377df4939d3d8f77723f0dd06505688ba4881833a7661da11e0
  modelopt: "0.37.0"
"""
QWEN = "source: {huggingface: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}"


def _validate(tmp_path: Path, body: str):
    (tmp_path / "calib.jsonl").write_text('{"text": "hello"}\n', encoding="utf-8")
    spec = tmp_path / "kiln.yaml"
    spec.write_text(HEAD + body, encoding="utf-8")
    return validate_path(spec)


def _k402_spec(kv: str, seq: int) -> str:
    quant = f"quantization: {{kv_cache: {kv}, calibration: {{data: calib.jsonl}}}}" if kv != "auto" else ""
    return f"""models:
  long:
    {QWEN}
    architecture: qwen3-8b
    limits: {{max_batch_size: 1, max_input_len: 8192, max_seq_len: {seq}, max_num_tokens: 8192}}
    {quant}
hosts:
  h:
    gpu: H100-SXM5-80GB
    count: 1
    gpus:
      - index: 0
        mig:
          - {{profile: 1g.20gb, serves: long}}
"""


def test_k402_with_an_fp8_kv_cache_does_not_suggest_one_and_its_figures_differ(tmp_path: Path) -> None:
    # 46,656 tokens of fp8 KV need 3.2037 GiB; the pool has 3.2015 GiB: one decimal shows both as 3.2
    result = _validate(tmp_path, _k402_spec("fp8", 46656))
    [d] = [d for d in result.diagnostics if d.code == "K402"]
    need = d.message.split("needs ")[1].split(",")[0]
    pool = d.message.split("pool has ")[1]
    assert need != pool, d.message
    assert "fp8" not in d.help and "kv_cache" not in d.help, d.help
    assert "max_seq_len" in d.help and "MIG profile" in d.help


def test_k402_with_a_16_bit_kv_cache_suggests_fp8(tmp_path: Path) -> None:
    result = _validate(tmp_path, _k402_spec("auto", 131072))
    [d] = [d for d in result.diagnostics if d.code == "K402"]
    assert "quantization.kv_cache: fp8" in d.help
    held = int(d.help.split("holds about ")[1].split(" ")[0].replace(",", ""))
    assert 0 < held < 131072  # the figure that would fit, below what the spec asks


def test_gib_apart_adds_precision_until_the_figures_differ() -> None:
    assert gib_apart(0.5 * GiB, 0.6 * GiB) == ("0.5 GiB", "0.6 GiB")
    assert gib_apart(0.501 * GiB, 0.504 * GiB) == ("0.501 GiB", "0.504 GiB")
    a, b = gib_apart(0.5 * GiB, 0.5 * GiB + 4096)
    assert a != b and a.endswith("bytes")
    assert gib_apart(GiB, GiB) == ("1.0 GiB", "1.0 GiB")  # equal figures stay short (nothing to tell apart)


def test_a_misspelled_gpu_suggests_its_own_family_first() -> None:
    gpus = load_gpu_catalog()
    for name in ("H100-80GB", "h100 80gb", "H100-80G"):
        close = gpus.suggest(name)
        assert close[:2] and all(k.startswith("H100-") for k in close[:2]), (name, close)
        hint = gpus.hint(name)
        assert "A100" not in hint and "'H100-SXM5-80GB'" in hint and "'H100-PCIe-80GB'" in hint, hint
    assert all(k.startswith("H200-") for k in gpus.suggest("H200-141GB")[:2])  # not the GH200-144GB
    assert gpus.hint("h100 pcie") == "did you mean 'H100-PCIe-80GB'?"  # one part fits best: named alone
    assert all(k.startswith("A100-") for k in gpus.suggest("A100"))


def test_unknown_gpu_diagnostic_names_the_family(tmp_path: Path) -> None:
    result = _validate(tmp_path, f"""models:
  m:
    {QWEN}
    architecture: qwen3-8b
hosts:
  h:
    gpu: H100-80GB
    count: 1
    gpus: [{{index: 0, serves: m}}]
""")
    [d] = [d for d in result.diagnostics if d.code == "K901"]
    assert d.help.startswith("did you mean one of 'H100-SXM5-80GB', 'H100-PCIe-80GB'?"), d.help


def test_ambiguous_aliases_are_exactly_the_family_names() -> None:
    gpus = load_gpu_catalog()
    found = {a: gpus.ambiguous(a) for a in gpus.aliases if gpus.ambiguous(a)}
    assert found == {
        "H100": ("H100-SXM5-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"),
        "H200": ("H200-SXM-141GB", "H200-NVL-141GB"),
        "A100-80GB": ("A100-SXM4-80GB", "A100-PCIe-80GB"),
    }
    assert gpus.ambiguous("h100") == found["H100"]  # spelling does not matter
    for one_part in ("H100-SXM", "NVIDIA H100 80GB HBM3", "L4", "L40S", "B200", "H100-SXM5-80GB", "nope"):
        assert gpus.ambiguous(one_part) == (), one_part


@pytest.mark.parametrize("alias", ["H100", "H200", "A100-80GB"])
def test_an_ambiguous_gpu_is_an_error_naming_the_candidates(alias: str, tmp_path: Path) -> None:
    result = _validate(tmp_path, f"""models:
  m:
    {QWEN}
    architecture: qwen3-8b
    limits: {{max_batch_size: 4, max_input_len: 512, max_seq_len: 1024}}
hosts:
  h:
    gpu: {alias}
    count: 1
    gpus: [{{index: 0, serves: m}}]
""")
    assert [d.code for d in result.diagnostics if d.severity.name == "ERROR"] == ["K909"]
    [d] = [d for d in result.diagnostics if d.code == "K909"]  # beside K813: HEAD pins a ModelOpt nothing runs
    for key in load_gpu_catalog().ambiguous(alias):
        assert key in d.message
    assert (d.span.line, d.span.column) == (14, 10)
    assert result.resolved.hosts["h"].gpu is None  # nothing is checked against a guessed part


def test_one_port_clash_is_one_diagnostic_naming_both_units(tmp_path: Path) -> None:
    result = _validate(tmp_path, f"""models:
  a:
    {QWEN}
    architecture: qwen3-8b
    limits: {{max_batch_size: 4, max_input_len: 512, max_seq_len: 1024}}
  b:
    {QWEN}
    architecture: qwen3-8b
    limits: {{max_batch_size: 4, max_input_len: 512, max_seq_len: 1024}}
  c:
    {QWEN}
    architecture: qwen3-8b
    limits: {{max_batch_size: 4, max_input_len: 512, max_seq_len: 1024}}
    serving: {{ports: {{http: 9000, grpc: 9001, metrics: 8002}}}}
hosts:
  h:
    gpu: H100-SXM5-80GB
    count: 3
    gpus:
      - {{index: 0, serves: a}}
      - {{index: 1, serves: b}}
      - {{index: 2, serves: c}}
""")
    clashes = [d for d in result.diagnostics if d.code == "K908"]
    assert len(clashes) == 2, [d.message for d in clashes]
    ab, ac = clashes
    assert "h/gpu1 (model 'b') and h/gpu0 (model 'a')" in ab.message
    assert "8000 (http), 8001 (grpc), 8002 (metrics)" in ab.message
    assert "h/gpu2 (model 'c') and h/gpu0 (model 'a')" in ac.message and "port 8002 (metrics)" in ac.message
    assert "9000" not in ac.message


def test_kiln_catalog_says_a_family_name_is_ambiguous(capsys) -> None:
    from compiler.cli import main

    assert main(["catalog", "H100"]) == 0
    err = capsys.readouterr().err
    assert "H100-PCIe-80GB" in err and "H100-NVL-94GB" in err and "K909" in err
    assert main(["catalog", "H100-SXM"]) == 0
    assert capsys.readouterr().err == ""  # one part: nothing to say
