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
        # FP8 calibrates on CPU too (the format table's FP8 row is not CUDA-only) where its forward
        # passes take less than CPU_HOURS (the 8B); between them, the sharded ways of a model that
        # some catalog GPU cannot hold alone, then those offloading to host memory
        gpu, *rest = size.ways
        sharded = [w for w in rest if w.gpus > 1 and not w.offload_gib]
        offload = [w for w in rest if w.offload_gib]
        assert rest[:len(sharded)] == sharded and rest[len(sharded):len(sharded) + len(offload)] == offload
        assert all(w.gpu_mem_gib < gpu.gpu_mem_gib for w in sharded)
        assert bool(sharded) is bool(offload) is (model == "big")
        assert gpu.gpus == 1 and gpu.gpu_mem_gib > source and gpu.host_mem_gib >= source
        cpu = rest[len(sharded) + len(offload):]
        assert [w.gpus for w in cpu] == ([0] if model == "small" else [])  # 70B x 512 x 1024 tokens: > 24 h
        assert all(w.host_mem_gib > source for w in cpu)
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
def _init(tmp_path: Path, capsys, example: Path = NEWCOMER.parent) -> Path:
    import shutil

    from compiler.cli import main

    shutil.copytree(example, tmp_path / "deploy")
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


# --- a calibration sharded over the GPUs of one builder -------------------------------------------
FLEET = ROOT / "examples" / "k8s-two-pools"  # its model `big` is Llama 3.1 405B, calibrated to FP8 by quantize/big


def _gpu_class(tmp_path: Path, gpu: str, gpus: int, host: int = 256) -> Path:
    """A builders file: GitHub's hosted runner and one GPU class of `gpus` x `gpu` (256 GiB of host
    memory: too little to calibrate the 405B on CPU or to offload a third of it, ample for a
    sharded load)."""
    f = tmp_path / f"builders-{gpus}-{host}.yml"
    f.write_text("builders:\n  cpu:\n    runs-on: [ubuntu-latest]\n    host_memory_gib: 16\n    disk_gib: 14\n"
                 "    has: [torch, network, docker]\n  gpu:\n    runs-on: [self-hosted, linux, gpu]\n"
                 f"    gpu: {gpu}\n    gpus: {gpus}\n    host_memory_gib: {host}\n    disk_gib: 8000\n"
                 "    has: [torch, gpu, docker, network]\n", encoding="utf-8")
    return f


def test_a_405b_calibration_is_sharded_over_as_many_gpus_as_hold_it(tmp_path: Path) -> None:
    from compiler.actions.sizing import SHARD_FRACTION, gpu_memories

    out = _plan(FLEET / "kiln.yaml", tmp_path)
    size = out.graph.actions["quantize/big"].size
    source = total_params(out.validation.resolved.models["big"].arch) * 2 / GiB  # bf16: ~756 GiB
    one, *rest = size.ways
    sharded = [w for w in rest if not w.offload_gib]
    assert one.gpus == 1 and one.gpu_mem_gib > source and all(w.gpus for w in rest)  # no CPU way: days of it
    assert [w.gpus for w in sharded] == sorted({w.gpus for w in sharded}) and sharded[0].gpus > 1
    catalog = [m / GiB for m in gpu_memories()]
    for w in sharded:
        mem = min(m for m in catalog if m >= w.gpu_mem_gib)  # the catalog GPU the way stands for
        assert mem - w.gpu_mem_gib < 0.1
        # N GPUs hold the weights at SHARD_FRACTION of each, N - 1 do not: the count is the formula's
        assert (w.gpus - 1) * SHARD_FRACTION * mem < source <= w.gpus * SHARD_FRACTION * mem
        assert w.host_mem_gib < 16 < source  # the weights load straight to the GPUs
    by_count = {w.gpus: w.gpu_mem_gib for w in sharded}
    h100, h200 = (round(load_gpu_memory(n), 1) for n in ("H100-SXM5-80GB", "H200-SXM-141GB"))
    assert by_count[7] == h200 and by_count[12] == h100  # 8 x 80 GB hold 509 GiB of its 756 at 0.8 each
    assert any("gpu_mem_percentage" in b for b in size.basis)
    # a model one catalog GPU holds keeps the one-device way alone (its key and its load unchanged)
    assert [w.gpus for w in out.graph.actions["quantize/chat"].size.ways] == [1, 0]


def load_gpu_memory(name: str) -> float:
    from compiler.catalog import load_gpu_catalog

    return load_gpu_catalog().get(name).memory_mib / 1024


def test_a_class_with_enough_gpus_takes_the_sharded_calibration_and_a_smaller_one_is_k405(tmp_path, capsys) -> None:
    from compiler.cli import main

    spec, store = str(FLEET / "kiln.yaml"), str(tmp_path / "s")
    eight = _gpu_class(tmp_path, "H200-SXM-141GB", 8)
    assert main(["plan", spec, "--store", store, "--builders", str(eight), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not [d for d in doc["diagnostics"] if d.get("code") == "K405"]
    big = next(a for a in doc["actions"]["actions"] if a["id"] == "quantize/big")
    assert big["builder"] == "gpu" and big["builder_way"]["gpus"] == 7
    assert main(["plan", spec, "--store", store, "--builders", str(eight)]) == 0
    text = capsys.readouterr().out
    assert f"builds on: gpu (7 x GPU >= {round(load_gpu_memory('H200-SXM-141GB'), 1):g} GiB)" in text
    assert main(["plan", spec, "--store", store, "--builders", str(eight), "--matrix"]) == 0
    jobs = json.loads(capsys.readouterr().out)["include"]
    on = {a: (j["class"], j["runs-on"]) for j in jobs for a in j["actions"].split()}
    assert on["quantize/big"] == ("gpu", ["self-hosted", "linux", "gpu"])
    for gpu, count, need in (("H200-SXM-141GB", 4, 7), ("H100-SXM5-80GB", 8, 12)):
        small = _gpu_class(tmp_path, gpu, count)
        assert main(["plan", spec, "--store", store, "--builders", str(small)]) == 1
        out = capsys.readouterr().out
        assert "error: no builder holds quantize/big: it needs 1 x GPU >= " in out and "[K405]" in out
        assert f"note: gpu lacks " in out and f"(or over {need} GPUs: {need} GPU(s), it has {count})" in out
        assert main(["plan", spec, "--store", store, "--builders", str(small), "--matrix"]) == 1
        assert "no builder holds quantize/big" in capsys.readouterr().err


def test_ray_asks_for_the_sharded_calibrations_gpus_of_the_node_type_that_holds_them(tmp_path: Path) -> None:
    from compiler.distributed.driver import _choose, accelerator_of, required
    from compiler.distributed.ray import machine_of, task_options
    from compiler.machines import way_rank
    from compiler.targets.registry import REGISTRY

    action = _plan(FLEET / "kiln.yaml", tmp_path).graph.actions["quantize/big"]

    def node(accelerator: str, gpus: int, ip: str) -> dict:  # an entry of ray.nodes() (no such node here)
        return {"NodeManagerAddress": ip, "NodeID": "f" * 56, "Alive": True,
                "Resources": {"CPU": 128, "GPU": gpus, f"accelerator_type:{accelerator}": 1, "memory": 512 * GiB,
                              "torch": 1, "network": 1}}

    h100, h200 = machine_of(node("H100", 8, "10.0.0.1")), machine_of(node("H200", 8, "10.0.0.2"))
    machine, way = _choose(REGISTRY, action, [h100, h200], way_rank)
    assert machine is h200 and way.gpus == 7 and not way.offload_gib  # all on GPUs before any offload
    job = {"needs": required(REGISTRY, action, machine)}
    opts = task_options(job, way, "kiln:quantize/big", accelerator_of(machine, way))
    assert opts["num_gpus"] == 7 and opts["resources"]["accelerator_type:H200"] > 0
    assert {"torch", "network"} <= set(opts["resources"]) and opts["memory"] == int(way.host_mem_gib * GiB)
    # 8 x 80 GB hold 509 GiB of its 756: the rest goes to the node's host memory, which Ray reserves
    machine, way = _choose(REGISTRY, action, [h100], way_rank)
    assert machine is h100 and way.gpus == 8 and way.offload_gib > 756 - 8 * 0.8 * 80
    opts = task_options({"needs": required(REGISTRY, action, machine)}, way, "kiln:quantize/big",
                        accelerator_of(machine, way))
    assert opts["num_gpus"] == 8 and opts["memory"] == int(way.host_mem_gib * GiB) > way.offload_gib * GiB


def test_the_release_workflow_sends_the_405b_calibration_to_the_gpu_runner_with_enough_gpus(tmp_path, capsys,
                                                                                           monkeypatch) -> None:
    from ruamel.yaml import YAML

    from compiler.cli import main
    from compiler.machines import load_builders

    root = _init(tmp_path, capsys, FLEET)
    release = YAML(typ="safe").load((root / ".github" / "workflows" / "kiln-release.yml").read_text(encoding="utf-8"))
    builders = load_builders(root / release["env"]["KILN_BUILDERS"])
    assert [(m.name, m.gpus) for m in builders.machines] == [("cpu", 0), ("h100-sxm5-80gb", 8), ("b200-180gb", 8)]
    monkeypatch.chdir(root)
    monkeypatch.setenv("KILN_BUILDERS", release["env"]["KILN_BUILDERS"])
    assert main(["plan", "deploy/kiln.yaml", "--store", str(tmp_path / "store"), "--matrix"]) == 0
    jobs = json.loads(capsys.readouterr().out)["include"]
    on = {a: (j["class"], j["runs-on"]) for j in jobs for a in j["actions"].split()}
    # 6 x B200 hold its 756 GiB of bf16 at 0.8 each; 8 x H100 do not (it would calibrate on their host's CPUs)
    assert on["quantize/big"] == ("b200-180gb", ["self-hosted", "linux", "gpu", "b200-180gb"])
    assert on["spec-snapshot"][0] == "cpu"


def test_mig_slices_never_share_a_sharded_calibration(tmp_path: Path) -> None:
    """A CUDA process sees one MIG instance: a class of sliced GPUs holds no way over several GPUs,
    whatever its slices' memory adds up to."""
    from compiler.machines import load_builders, place, why_not
    from compiler.targets.registry import REGISTRY

    action = _plan(NEWCOMER, tmp_path).graph.actions["quantize/big"]  # the 70B: 4 x GPU >= 44.9 GiB among its ways
    four = next(w for w in action.size.ways if w.gpus == 4)
    f = tmp_path / "builders.yml"
    for mig in ("3g.71gb", None):
        f.write_text("builders:\n  sliced:\n    gpu: H200-SXM-141GB\n    gpus: 8\n"
                     + (f"    mig: {mig}\n" if mig else "") + "    host_memory_gib: 64\n    disk_gib: 1000\n"
                     "    has: [torch, gpu, docker, network]\n", encoding="utf-8")
        (sliced,) = load_builders(f).machines
        if mig is None:
            assert place(REGISTRY, action, [sliced]) is sliced  # whole H200s: one holds the 70B
            continue
        assert sliced.mig == mig and sliced.gpu_mem_gib >= four.gpu_mem_gib
        assert place(REGISTRY, action, [sliced]) is None
        (note,) = why_not(REGISTRY, action, [sliced])
        assert f"(or over 4 GPUs: 4 whole GPUs, it has {mig} MIG slices (a process sees one))" in note


# --- offloading to host memory; the CPU way's bound; the needs line ------------------------------
def test_8_h100s_with_enough_host_memory_calibrate_the_405b_offloading_the_rest(tmp_path, capsys) -> None:
    """ModelOpt's PTQ example loads a model its GPUs cannot hold with the overflow on "cpu": an 8 x
    80 GB class with 2 TB of host memory holds the 405B's calibration that way; with 256 GiB it is
    K405, saying how much host memory the offload needs."""
    from compiler.actions.sizing import (EXPORT_SHARD, HOST_SHARE, TORCH_HOST, activation_bytes, largest_layer,
                                         shard_share, source_bytes)
    from compiler.cli import main
    from compiler.graph.sizes import gib

    spec, store = str(FLEET / "kiln.yaml"), str(tmp_path / "s")
    out = _plan(FLEET / "kiln.yaml", tmp_path)
    rm = out.validation.resolved.models["big"]
    size = out.graph.actions["quantize/big"].size
    h100 = load_gpu_memory("H100-SXM5-80GB") * GiB
    w, layer = source_bytes(rm), largest_layer(rm)
    cal = out.graph.actions["quantize/big"].params.calibration
    share = shard_share(activation_bytes(rm.arch.hidden, rm.arch.vocab, cal.batch_size, cal.max_seq_len), h100)
    spill = w + layer - 8 * share  # what 8 GPUs at their 0.8 share (less the first's largest layer) cannot hold
    way = next(x for x in size.ways if x.gpus == 8 and x.gpu_mem_gib == round(h100 / GiB, 1))
    assert way.offload_gib == gib(spill) and 240 < way.offload_gib < 260
    assert way.host_mem_gib == gib((spill + layer + TORCH_HOST + EXPORT_SHARD) / HOST_SHARE)
    first_offload = next(i for i, x in enumerate(size.ways) if x.offload_gib)
    assert all(x.offload_gib for x in size.ways[first_offload:])  # every all-GPU way comes first
    two_tb = _gpu_class(tmp_path, "H100-SXM5-80GB", 8, host=2048)
    assert main(["plan", spec, "--store", store, "--builders", str(two_tb), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    big = next(a for a in doc["actions"]["actions"] if a["id"] == "quantize/big")
    assert big["builder"] == "gpu" and big["builder_way"] == way.to_json()
    # `kiln build --as gpu` and an engine choosing such a node decide the same way, by the same function
    from compiler.distributed.driver import _choose
    from compiler.graph.builder import Builder
    from compiler.machines import load_builders, way_rank
    from compiler.targets.registry import REGISTRY

    gpu = load_builders(two_tb).get("gpu")
    action = out.graph.actions["quantize/big"]
    assert Builder(fixed=gpu.has, machine=gpu).way(size) == way == _choose(REGISTRY, action, [gpu], way_rank)[1]
    assert main(["plan", spec, "--store", store, "--builders", str(two_tb)]) == 0
    assert f"builds on: gpu (8 x GPU >= 79.6 GiB offloading {way.offload_gib:g} GiB to host memory)" \
        in capsys.readouterr().out
    small = _gpu_class(tmp_path, "H100-SXM5-80GB", 8, host=256)
    assert main(["plan", spec, "--store", store, "--builders", str(small)]) == 1
    text = capsys.readouterr().out
    assert "error: no builder holds quantize/big" in text and "[K405]" in text
    assert (f"(or over 8 GPU(s) offloading {way.offload_gib:g} GiB of weights to host memory: "
            f"{way.host_mem_gib:g} GiB host memory, it has 256)") in text


def test_the_cpu_way_is_offered_only_up_to_a_days_calibration(tmp_path, capsys) -> None:
    from compiler.actions.sizing import CPU_FLOPS, CPU_HOURS, cpu_hours
    from compiler.cli import main

    for spec, model, offered in ((ROOT / "examples" / "quickstart" / "kiln.yaml", "tiny", True),
                                 (NEWCOMER, "small", True), (NEWCOMER, "big", False), (FLEET / "kiln.yaml", "big", False)):
        out = _plan(spec, tmp_path)
        rm = out.validation.resolved.models[model]
        size = out.graph.actions[f"quantize/{model}"].size
        hours = cpu_hours(rm, rm.spec.quantization.calibration)
        assert (hours <= CPU_HOURS) is offered, (model, hours)
        assert (size.ways[-1].gpus == 0) is offered  # the CPU way, last, or none
        why = [b for b in size.basis if b.startswith("no CPU way")]
        assert bool(why) is not offered
        if not offered:
            assert f"at least {hours:.0f} h" in why[0] and f"{CPU_FLOPS / 1e9:g} GFLOP/s" in why[0]
    assert cpu_hours(rm, rm.spec.quantization.calibration) > 10 * CPU_HOURS  # the 405B: weeks, at the peak
    # A class that could only calibrate the 405B on its CPU is K405, and the note says why not
    f = tmp_path / "cpu.yml"
    f.write_text("builders:\n  cpu:\n    host_memory_gib: 4096\n    disk_gib: 8000\n    has: [torch, network]\n",
                 encoding="utf-8")
    assert main(["plan", str(FLEET / "kiln.yaml"), "--store", str(tmp_path / "s"), "--builders", str(f)]) == 1
    text = capsys.readouterr().out
    assert "no builder holds quantize/big" in text and "note: no CPU way: its calibration takes at least" in text


def test_the_needs_line_names_a_few_ways_and_counts_the_others(tmp_path, capsys) -> None:
    from compiler.cli import main
    from compiler.graph.sizes import SHOWN

    size = _plan(FLEET / "kiln.yaml", tmp_path).graph.actions["quantize/big"].size
    assert main(["plan", str(FLEET / "kiln.yaml"), "--store", str(tmp_path / "s")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "needs: 1 x GPU >= 757" in ln)
    sharded = [w for w in size.ways if w.gpus > 1 and not w.offload_gib]
    offload = [w for w in size.ways if w.offload_gib]
    assert len(sharded) > SHOWN and len(offload) > SHOWN
    for w in sharded[:SHOWN] + offload[:SHOWN]:  # the fewest GPUs, the least offload
        assert w.gpu_text() in line
    assert sharded[SHOWN].gpu_text() + "," not in line and " or " + sharded[SHOWN].gpu_text() not in line
    more = len(size.ways) - 1 - 2 * SHOWN
    assert line.endswith(f"(and {more} more ways over other GPU counts: the JSON plan lists them)")
    assert len(line) < 1000


# --- the probe on a MIG-enabled host ----------------------------------------------------------------
def test_the_probe_counts_whole_gpus_and_refuses_mig_slices_for_calibration(tmp_path, monkeypatch) -> None:
    """nvidia-smi's memory.total is the whole GPU's even where MIG is on (the project's stand-in
    reports it so, as a real MIG-enabled H100 does); a process there sees one MIG instance, so the
    probe counts only the GPUs with MIG off, and a host whose GPUs are all sliced calibrates
    nothing on them, saying why."""
    from compiler.graph.builder import Builder
    from compiler.graph.sizes import MIG_PROBED
    from compiler.machines import place, probe, why_not
    from compiler.targets.registry import REGISTRY
    from tests.fakes import fake_host

    action = _plan(NEWCOMER, tmp_path).graph.actions["quantize/small"]  # the 8B: one H100 holds it
    state = tmp_path / "gpus.json"
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fakes'}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("KILN_FAKE_SMI_STATE", str(state))
    h100 = round(load_gpu_memory("H100-SXM5-80GB"), 1)
    has = {"torch", "gpu", "network"}
    for enabled, gpus, mem in (((), 8, h100), (range(4), 4, h100), (range(8), 8, 0.0)):
        fake_host.make_host(state, "H100-SXM5-80GB", 8, "590.48.01", mig_enabled=enabled)
        m = probe(tmp_path, has)
        assert (m.gpus, m.gpu_arch, m.gpu_mem_gib) == (gpus, "Hopper", mem), enabled
        assert m.mig == (MIG_PROBED if len(enabled) == 8 else None)
        # host memory for the one-GPU way and too little for the CPU way (this machine's own is what
        # it is): the GPUs decide
        gpu_way, cpu_way = action.size.ways
        assert cpu_way.gpus == 0 and cpu_way.host_mem_gib > gpu_way.host_mem_gib
        m = dataclasses.replace(m, host_mem_gib=gpu_way.host_mem_gib, disk_gib=1000.0)
        if m.mig is None:
            assert place(REGISTRY, action, [m]) is m
            continue
        assert place(REGISTRY, action, [m]) is None
        (note,) = why_not(REGISTRY, action, [m])
        assert "its GPUs are in MIG mode (a process sees one MIG instance" in note, note
        # with the host memory the CPU way needs, the build places it there, and quantize is told so
        # (compiler/actions/quantize.py placed_devices: the CPU, though CUDA shows a MIG instance)
        roomy = dataclasses.replace(m, host_mem_gib=cpu_way.host_mem_gib)
        assert Builder(fixed=roomy.has, machine=roomy).way(action.size) == cpu_way
