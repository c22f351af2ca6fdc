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


# --- builders: declared classes, placement, the release workflow ----------------------------------
def _init(tmp_path: Path, capsys) -> Path:
    import shutil

    from compiler.cli import main

    shutil.copytree(NEWCOMER.parent, tmp_path / "deploy")
    assert main(["init", str(tmp_path / "deploy" / "kiln.yaml"), "--dir", str(tmp_path), "--kiln-repo",
                 "https://git.example/acme/kiln", "--kiln-commit", "0123456789abcdef0123456789abcdef01234567"]) == 0
    capsys.readouterr()
    return tmp_path


def test_the_newcomers_release_workflow_builds_each_action_on_a_class_that_holds_it(tmp_path, capsys,
                                                                                     monkeypatch) -> None:
    from ruamel.yaml import YAML

    from compiler.cli import main
    from compiler.machines import load_builders

    root = _init(tmp_path, capsys)
    release = YAML(typ="safe").load((root / ".github" / "workflows" / "kiln-release.yml").read_text(encoding="utf-8"))
    assert release["jobs"]["cpu"]["env"]["KILN_BUILDER_CLASS"] == "cpu"
    builders = load_builders(root / release["env"]["KILN_BUILDERS"])
    assert not builders.diagnostics
    assert [m.name for m in builders.machines] == ["cpu", "h100-sxm5-80gb", "h200-sxm-141gb"]
    # The CPU job (its class: GitHub's hosted runner) defers the calibrations it cannot hold.
    cpu = builders.get("cpu")
    store = open_store(tmp_path / "store", create=False, missing_ok=True)
    plan = {p.id: p for p in plan_spec(root / "deploy" / "kiln.yaml", store,
                                       builder=Builder(fixed=cpu.has, machine=cpu)).plan}
    for model in ("small", "big"):
        assert plan[f"quantize/{model}"].deferred.startswith("more machine than cpu has"), plan[f"quantize/{model}"]
    assert plan["weights-image/big"].deferred  # waits for quantize/big, and needs 2 x its weights of disk anyway
    assert plan["llmapi-options/small"].deferred is None
    # What is left fans out to the class that holds each chain.
    monkeypatch.chdir(root)
    monkeypatch.setenv("KILN_BUILDERS", release["env"]["KILN_BUILDERS"])
    assert main(["plan", "deploy/kiln.yaml", "--store", str(tmp_path / "store"), "--matrix"]) == 0
    jobs = json.loads(capsys.readouterr().out)["include"]
    on = {a: (j["class"], j["runs-on"]) for j in jobs for a in j["actions"].split()}
    assert on["quantize/small"][0] == "h100-sxm5-80gb"  # 16 GiB of bf16 on one 80 GB GPU
    assert on["quantize/big"][0] == "h200-sxm-141gb"  # 132 GiB of bf16 needs one 141 GB GPU
    assert on["quantize/big"][1] == ["self-hosted", "linux", "gpu", "h200-sxm-141gb"]
    assert on["spec-snapshot"][0] == "cpu"


def test_an_action_no_builder_holds_is_a_plan_time_diagnostic(tmp_path, capsys) -> None:
    from compiler.cli import main

    small = tmp_path / "builders.yml"
    text = (NEWCOMER.parent / "builders.yml").read_text(encoding="utf-8")
    # no H200 class, and an H100 class whose host memory cannot calibrate the 70B on CPU either
    small.write_text(text.split("  h200:")[0].replace("host_memory_gib: 200", "host_memory_gib: 64"), encoding="utf-8")
    assert main(["plan", str(NEWCOMER), "--store", str(tmp_path / "s"), "--builders", str(small)]) == 1
    out = capsys.readouterr().out
    line = next(i for i, t in enumerate(NEWCOMER.read_text(encoding="utf-8").splitlines(), 1) if t == "  big:")
    assert f"kiln.yaml:{line}:3: error: no builder holds quantize/big: it needs 1 x GPU >= " in out
    from compiler.catalog import load_gpu_catalog

    h100 = load_gpu_catalog().get("H100-SXM5-80GB").memory_mib / 1024
    assert "[K405]" in out and f"note: h100 lacks {out.split('GPU >= ')[1].split(' GiB')[0]} GiB per GPU, it has " \
        f"{round(h100, 1):g}" in out
    assert "quantize/small" not in out.split("[K405]")[0].split("error:")[-1]


def test_a_builders_file_kiln_cannot_use_is_reported_where_it_is_wrong(tmp_path, capsys) -> None:
    from compiler.cli import main

    bad = tmp_path / "builders.yml"
    bad.write_text("builders:\n  gpu:\n    gpu: H100-SXM5-80GB\n    host_memory_gib: lots\n", encoding="utf-8")
    assert main(["plan", str(NEWCOMER), "--store", str(tmp_path / "s"), "--builders", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "builders.yml:4:22: error: host_memory_gib is a number >= 0 [K406]" in err



def test_an_engine_build_goes_to_a_class_that_runs_tensorrt_llm_or_its_container(tmp_path: Path) -> None:
    from compiler.distributed.driver import required
    from compiler.graph.sizes import Machine
    from compiler.machines import place, why_not
    from compiler.targets.registry import REGISTRY

    spec = tmp_path / "kiln.yaml"
    text = (ROOT / "examples" / "h200-tp8-llama70b" / "kiln.yaml").read_text(encoding="utf-8")
    text = text.replace("name: llama70b-h200", "name: llama70b-h200\ntarget: engine")
    spec.write_text(text.replace(", cuda_graph_batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128]", ""), encoding="utf-8")
    engine = _plan(spec, tmp_path).graph.actions["engine/llama70b"]
    h200 = dict(gpus=8, gpu_name="H200-SXM-141GB", gpu_arch="Hopper", gpu_mem_gib=140.4, host_mem_gib=2048,
                disk_gib=4000)
    bare = Machine("bare", **h200, has=frozenset({"gpu", "network"}))
    assert place(REGISTRY, engine, [bare]) is None  # what is installed here does not count for another machine
    assert why_not(REGISTRY, engine, [bare]) == ["bare lacks software: docker"]
    for has in ({"gpu", "network", "tensorrt_llm"}, {"gpu", "network", "docker"}):
        m = Machine("m", **h200, has=frozenset(has))
        assert place(REGISTRY, engine, [m]) is m
        assert set(required(REGISTRY, engine, m)) == has  # a Ray task asks for each of them
    small = Machine("h100", **{**h200, "gpu_name": "H100-SXM5-80GB", "gpu_mem_gib": 79.6, "gpus": 4},
                    has=frozenset({"gpu", "network", "docker"}))
    assert why_not(REGISTRY, engine, [small]) == ["h100 lacks 8 GPU(s), it has 4"]
