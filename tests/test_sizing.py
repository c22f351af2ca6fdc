"""What machine each action needs (compiler/actions/sizing.py), from the IR of real specs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from compiler.build import open_store, plan_spec
from compiler.capacity.modules import total_params
from compiler.graph.builder import Builder
from compiler.graph.model import Graph
from compiler.graph.sizes import GiB, SMALL

ROOT = Path(__file__).resolve().parent.parent
NEWCOMER = ROOT / "tests" / "data" / "newcomer" / "kiln.yaml"


def _plan(spec: Path, tmp_path: Path):
    store = open_store(tmp_path / "store", create=False, missing_ok=True)
    out = plan_spec(spec, store, builder=Builder(fixed=frozenset()))
    assert out.graph is not None, [str(d) for d in out.validation.diagnostics]
    return out


def test_sizes_are_not_part_of_the_key(tmp_path: Path) -> None:
    graph = _plan(NEWCOMER, tmp_path).graph
    assert all(a.size is not None for a in graph.actions.values())
    bare = Graph.build([dataclasses.replace(a, size=None) for a in graph.actions.values()])
    assert bare.keys == graph.keys


def test_calibration_needs_the_source_model_on_one_device(tmp_path: Path) -> None:
    out = _plan(NEWCOMER, tmp_path)
    ir = out.validation.resolved
    for model in ("small", "big"):
        size = out.graph.actions[f"quantize/{model}"].size
        source = total_params(ir.models[model].arch) * 2 / GiB  # bf16 source
        gpu, cpu = size.ways  # FP8 calibrates on CPU too (the format table's FP8 row is not CUDA-only)
        assert gpu.gpus == 1 and gpu.gpu_mem_gib > source and gpu.host_mem_gib >= source
        assert cpu.gpus == 0 and cpu.host_mem_gib > source
        assert gpu.disk_gib >= 2 * source  # the source and the export
        assert any("get_max_batch_size" in b for b in size.basis)
    big, small = out.graph.actions["quantize/big"].size, out.graph.actions["quantize/small"].size
    assert big.ways[0].gpu_mem_gib > 80 > small.ways[0].gpu_mem_gib  # one H100 holds the 8B, not the 70B


def test_images_need_disk_for_the_weights_they_carry(tmp_path: Path) -> None:
    out = _plan(NEWCOMER, tmp_path)
    weights = out.graph.actions["weights-image/big"].size.ways[0]
    image = out.graph.actions["image/h100-a"].size.ways[0]
    quantize = out.graph.actions["quantize/big"].size.ways[0]
    assert weights.gpus == 0 and quantize.disk_gib / 2 > weights.disk_gib / 2 > quantize.disk_gib / 4  # FP8 ~ half
    assert image.disk_gib > 2 * 8  # the 8B's FP8 checkpoint (8 GB) twice
    assert out.graph.actions["spec-snapshot"].size == SMALL


def test_the_json_plan_carries_each_actions_needs(tmp_path: Path, capsys) -> None:
    from compiler.cli import main

    main(["plan", str(NEWCOMER), "--store", str(tmp_path / "s"), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    by_id = {a["id"]: a for a in doc["actions"]["actions"]}
    assert by_id["quantize/big"]["size"]["ways"][0]["gpus"] == 1
    assert by_id["quantize/big"]["size"]["ways"][0]["gpu_mem_gib"] > 130
    main(["plan", str(NEWCOMER), "--store", str(tmp_path / "s")])
    text = capsys.readouterr().out
    assert "needs: 1 x GPU >= " in text and "| or no GPU, host memory" in text


def test_an_engine_build_needs_tp_times_pp_gpus_of_the_serving_architecture(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.yaml"
    text = (ROOT / "examples" / "h200-tp8-llama70b" / "kiln.yaml").read_text(encoding="utf-8")
    text = text.replace("name: llama70b-h200", "name: llama70b-h200\ntarget: engine")
    spec.write_text(text.replace(", cuda_graph_batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128]", ""), encoding="utf-8")
    out = _plan(spec, tmp_path)
    way = out.graph.actions["engine/llama70b"].size.ways
    assert len(way) == 1 and way[0].gpus == 8 and way[0].gpu_arch == "Hopper"
    source = total_params(out.validation.resolved.models["llama70b"].arch) * 2 / GiB
    assert source / 8 < way[0].gpu_mem_gib < source  # a share of the model per GPU, not all of it
    assert way[0].host_mem_gib > source
