"""The serving-image table (compiler/catalog/data/images.json): which TensorRT-LLM each base image
ships. K803/K804 read it (their cases are under tests/cases/hardware/toolchain/)."""

from __future__ import annotations

import json

from compiler import resources
from compiler.catalog.images import load_image_table
from compiler.checks.toolchain import parse_version

DIGEST = "@sha256:" + "1" * 64


def test_every_row_names_its_source_and_every_version_parses() -> None:
    data = json.loads(resources.read_data("catalog", "data", "images.json"))
    for row in data["images"]:
        assert row["source"] and row["status"] in ("verified", "partially-verified", "inferred", "unverified")
        for key, version in row.get("tags", {}).items():
            assert parse_version(version) is not None, (key, version)
    table = load_image_table()
    assert {f.kind for f in table.families} == {"triton", "trtllm-release", "dynamo-runtime"}
    for fam in table.families:
        for version in fam.tags.values():  # tags read from another table (Dynamo's) parse too
            assert parse_version(version) is not None, (fam.repository, version)


def test_dynamo_runtime_image_ships_its_release_lines_tensorrt_llm() -> None:
    from compiler.catalog import dynamo
    table = load_image_table()
    facts = table.facts("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1" + DIGEST)
    assert facts.verdict == "ships" and facts.version == dynamo.release("1.6.1").tensorrt_llm == "1.3.0rc29"
    assert table.facts("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.9.0" + DIGEST).verdict == "unknown-tag"
    assert table.facts("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:latest" + DIGEST).verdict == "unknown-tag"


def test_what_the_table_says_about_references() -> None:
    t = load_image_table()
    f = t.facts("nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3" + DIGEST)
    assert (f.verdict, f.version, f.key) == ("ships", "1.2.1", "26.04")
    assert t.facts("nvcr.io/nvidia/tritonserver:26.03-trtllm-python-py3" + DIGEST).version == "1.2.0"
    assert t.facts("nvcr.io/nvidia/tritonserver:26.04-py3" + DIGEST).verdict == "no-trtllm"
    assert t.facts("nvcr.io/nvidia/tritonserver:26.04-vllm-python-py3" + DIGEST).verdict == "no-trtllm"
    assert t.facts("nvcr.io/nvidia/tritonserver:27.01-trtllm-python-py3" + DIGEST).verdict == "unknown-tag"
    assert t.facts("nvcr.io/nvidia/tritonserver" + DIGEST).verdict == "no-tag"
    assert t.facts("registry.example.com/own/triton:1" + DIGEST).verdict == "unknown-image"
    r = t.facts("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6" + DIGEST)
    assert (r.verdict, r.version) == ("ships", "1.2.0rc6")
    assert t.facts("nvcr.io/nvidia/tensorrt-llm/release:latest" + DIGEST).verdict == "unknown-tag"
    assert t.tags_shipping("nvcr.io/nvidia/tritonserver", lambda v: v == "1.2.1") == [
        f"26.0{m}-trtllm-python-py3" for m in (4, 5, 6, 7)]
