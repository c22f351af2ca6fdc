"""`kiln build` quantizes the quickstart model for real, with NVIDIA ModelOpt on CPU.

The checkpoints are checked against what reads them: safetensors and the exported scales are read
back, the weights dequantized by hand (from the layout the export writes, see `dequantize`) and
compared with the fake-quantized weights of the in-memory ModelOpt model, and the dequantized model
must still generate text. The quality gate and the caching of the quantize action are checked
through `build_spec`. The quickstart is quantized once per test run (tests/conftest.py:
quickstart_build); the tests here read that store and build on copies of it, and the fake-quantized
in-memory model each model is compared with is made once per module.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

_MISSING = [m for m in ("torch", "transformers", "modelopt", "safetensors") if importlib.util.find_spec(m) is None]
if _MISSING:  # pragma: no cover - depends on the machine
    pytestmark = pytest.mark.skip(reason=f"quantization needs torch, transformers and nvidia-modelopt "
                                         f"({', '.join(_MISSING)} missing); bash scripts/install.sh --dev installs them")
torch = safe_open = None  # imported by _heavy_imports, once a test of this module runs


@pytest.fixture(scope="module", autouse=True)
def _heavy_imports():
    """torch and ModelOpt (about ten seconds of imports) load when this module's tests run, not when
    the suite is collected: the pytest-xdist worker that runs none of them never pays for them."""
    global torch, safe_open
    import modelopt.torch.quantization  # noqa: F401  (a broken install fails here, not skips)
    import torch as torch_module
    from safetensors import safe_open as safe_open_function

    torch, safe_open = torch_module, safe_open_function

from compiler.build import build_spec, plan_spec
from compiler.graph.builder import Selection
from compiler.store.local import LocalStore

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
PROMPT = "Kiln checks a deployment spec against"


# --- helpers ------------------------------------------------------------------------------------
def copy_quickstart(dest: Path, edits: dict[str, str] | None = None) -> Path:
    """A private copy of the quickstart; `edits` replaces text in kiln.yaml (each must occur once)."""
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".kiln"))
    spec = dest / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    for old, new in (edits or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    spec.write_text(text, encoding="utf-8")
    return spec


def build(spec: Path, store: Path):
    outcome = build_spec(spec, LocalStore(store))
    assert outcome.validation.ok, [d.message for d in outcome.validation.diagnostics]
    return outcome


def executed(outcome) -> set[str]:
    return {r.id for r in outcome.executed}


def materialize(store: Path, outcome, aid: str, dest: Path) -> Path:
    LocalStore(store).materialize(outcome.results[aid].tree, dest)
    return dest


def tree_files(store: Path, outcome, aid: str) -> dict[str, bytes]:
    s = LocalStore(store)
    return {e.path: s.read_bytes(e.digest) for e in s.tree(outcome.results[aid].tree)}


def unpack_int4(packed: "torch.Tensor") -> "torch.Tensor":
    """uint8 (out/2, in) -> int8 (out, in). Observed layout of ModelOpt 0.47's W4A16_AWQ export:
    byte [r, c] holds row 2r in its low nibble and row 2r+1 in its high nibble, two's complement."""
    p = packed.to(torch.int16)
    low, high = p & 0x0F, (p >> 4) & 0x0F
    low = torch.where(low >= 8, low - 16, low)
    high = torch.where(high >= 8, high - 16, high)
    out = torch.empty((packed.shape[0] * 2, packed.shape[1]), dtype=torch.int16)
    out[0::2], out[1::2] = low, high
    return out.to(torch.int8)


def dequantize(ckpt: Path) -> tuple[dict[str, "torch.Tensor"], dict]:
    """Every tensor of the checkpoint as float32, quantized linear weights dequantized with their
    exported scales; `.weight_scale`/`.input_scale`/`.pre_quant_scale` are returned as they are."""
    qcfg = json.loads((ckpt / "hf_quant_config.json").read_text())["quantization"]
    algo = qcfg["quant_algo"]
    raw = {}
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        for k in f.keys():
            raw[k] = f.get_tensor(k)
    out = {}
    for k, t in raw.items():
        if not k.endswith(".weight") or k[:-len("weight")] + "weight_scale" not in raw:
            out[k] = t.float() if t.is_floating_point() else t
            continue
        scale = raw[k[:-len("weight")] + "weight_scale"].float()
        if algo == "FP8":
            assert t.dtype == torch.float8_e4m3fn and scale.numel() == 1, k
            out[k] = t.float() * scale
        elif algo == "W4A16_AWQ":
            assert t.dtype == torch.uint8, k
            q = unpack_int4(t).float()
            group = qcfg["group_size"]
            assert scale.shape == (q.shape[0], q.shape[1] // group), (k, scale.shape)
            out[k] = q * scale.repeat_interleave(group, dim=1)
        else:
            raise AssertionError(f"no dequantizer for {algo}")
    return out, qcfg


def in_memory_model(spec: Path, store: Path, outcome, calibrate: bool = True, model_name: str = "tiny"):
    """The fake-quantized ModelOpt model, made by the action's own code from the same inputs."""
    from compiler.actions import quantize
    from compiler.actions.calibration import read_texts

    params = outcome.graph.actions[f"quantize/{model_name}"].params
    model, tok = quantize.load(spec.parent / "model", params.dtype, "cpu")
    texts = None
    if calibrate:
        cal = tree_files(store, outcome, f"calibration-set/{model_name}")["calibration.jsonl"].decode()
        texts = read_texts(cal)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(quantize.CPU_THREADS)
    try:
        return quantize.quantize_in_memory(model, tok, params, texts), tok
    finally:
        torch.set_num_threads(threads)


def fake_quant_weights(model) -> dict[str, "torch.Tensor"]:
    out = {}
    with torch.no_grad():
        for name, m in model.named_modules():
            wq = getattr(m, "weight_quantizer", None)
            if wq is not None and wq.is_enabled:
                out[f"{name}.weight"] = wq(m.weight).float()
    return out


def dequantized_model(ckpt: Path, source: Path):
    """A plain transformers Llama holding the checkpoint's dequantized weights (AWQ's remaining
    pre_quant_scale folded into the weight: (x * s) @ W.T == x @ (W * s).T)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    weights, _ = dequantize(ckpt)
    state = {}
    for k, t in weights.items():
        if k.endswith((".weight_scale", ".input_scale", ".pre_quant_scale", ".weight_scale_2")):
            continue
        pqs = weights.get(k[:-len("weight")] + "pre_quant_scale")
        state[k] = t * pqs[None, :] if pqs is not None else t
    config = LlamaConfig(**json.loads((source / "config.json").read_text()))
    model = LlamaForCausalLM(config).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not [m for m in missing if "rotary" not in m], (missing, unexpected)
    return model, AutoTokenizer.from_pretrained(str(ckpt))


def greedy_text(model, tok, prompt: str, n: int = 8) -> str:
    from compiler.actions.quantize import greedy

    ids = tok(prompt, return_tensors="pt").input_ids
    out = greedy(model, ids, n)
    return tok.decode(out[0, ids.shape[1]:])


# --- the quickstart: `tiny` quantized to FP8, `tiny-awq` to INT4 AWQ (built once per run) -----------
@pytest.fixture(scope="module")
def fp8(quickstart_build):
    return quickstart_build


@pytest.fixture(scope="module")
def fp8_model(fp8):
    """The FP8 model fake-quantized in memory by the action's own code (tests only read it)."""
    spec, store, outcome = fp8
    return in_memory_model(spec, store, outcome)


def test_fp8_build_exports_a_modelopt_checkpoint(fp8, tmp_path: Path) -> None:
    spec, store, outcome = fp8
    assert {"quantize/tiny", "quality-gate/tiny", "calibration-set/tiny"} <= set(outcome.results)
    assert outcome.graph.actions["quantize/tiny"].deps == ("calibration-set/tiny",)
    ckpt = materialize(store, outcome, "quantize/tiny", tmp_path / "ckpt")
    names = sorted(p.name for p in ckpt.iterdir())
    assert {"config.json", "hf_quant_config.json", "model.safetensors", "quality.json", "tokenizer.json"} <= set(names)
    q = json.loads((ckpt / "hf_quant_config.json").read_text())["quantization"]
    assert q["quant_algo"] == "FP8" and q["kv_cache_quant_algo"] is None
    assert "lm_head" in q["exclude_modules"]  # the spec's default exclusion
    config = json.loads((ckpt / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["quantization_config"]["quant_method"] == "modelopt"
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.layers.0.mlp.down_proj.weight").dtype == torch.float8_e4m3fn
        assert f.get_tensor("lm_head.weight").dtype == torch.bfloat16  # excluded: not quantized
        assert f.get_tensor("model.layers.3.self_attn.q_proj.input_scale").numel() == 1


def test_quantize_runs_in_its_own_process_and_logs_its_phases(fp8) -> None:
    """The build shows these phases while quantize runs (compiler/graph/executor.py); the child
    process (compiler/graph/child.py) writes them to the action's log as it reaches them."""
    import re

    _, _, outcome = fp8
    log = outcome.results["quantize/tiny"].log.read_text(encoding="utf-8")
    assert re.findall(r"^phase: (.+)$", log, re.M) == ["loading", "evaluating the unquantized model", "calibrating",
                                                        "evaluating the quantized model", "exporting"], log


def test_the_build_quantizes_in_the_way_it_placed_and_its_record_says_which(fp8) -> None:
    """The local build places quantize/tiny on the probed machine (the way compiler/graph/sizes.py
    holds chooses) and the action, in its own process, runs in that way; the record keeps it."""
    from compiler.graph.sizes import holds
    from compiler.machines import probe

    _, store, outcome = fp8
    res = outcome.results["quantize/tiny"]
    way = holds(outcome.graph.actions["quantize/tiny"].size, probe(store, ()))
    assert res.way == way and LocalStore(store).get_action(res.key).way == way.to_json()
    log = res.log.read_text(encoding="utf-8")
    assert f"way {way.short()} ({way.text()})" in log  # the executor's
    on = f"{way.gpus} GPU(s)" if way.gpus else "the CPU"
    assert f"placed to run {way.short()}: calibrating on {on}" in log  # the action's own, from its process


def test_told_the_cpu_way_quantize_runs_on_the_cpu_and_makes_the_same_bytes(fp8, tmp_path: Path) -> None:
    """The CPU way runs on the CPU even where CUDA is visible (the plan placed it there: a MIG slice
    the probe does not count as a GPU, say); what it makes is the build's checkpoint, byte for byte,
    where the build ran in that way too (on a machine without CUDA)."""
    import logging

    from compiler.actions import quantize
    from compiler.graph.kinds import RunContext

    spec, store, outcome = fp8
    action = outcome.graph.actions["quantize/tiny"]
    cpu = next(w for w in action.size.ways if not w.gpus)
    calib = materialize(store, outcome, "calibration-set/tiny", tmp_path / "calib")
    out = tmp_path / "out"
    out.mkdir()
    log = logging.getLogger("test.cpu-way")
    files = {role: Path(path) for role, path in action.files.items()}
    quantize.KIND.run(action.params, RunContext(out, files, {"calibration-set/tiny": calib}, log, way=cpu))
    made = {p.name: p.read_bytes() for p in out.iterdir()}
    assert json.loads(made["quality.json"])["device"] == "cpu"
    if not outcome.results["quantize/tiny"].way.gpus:
        assert made == tree_files(store, outcome, "quantize/tiny")


def test_a_gpu_way_this_machine_cannot_run_is_refused_with_what_it_sees(tmp_path: Path) -> None:
    import logging

    from compiler.actions import quantize
    from compiler.graph.kinds import RunContext
    from compiler.graph.sizes import Way

    action = lowered(tmp_path, {})
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    way = Way(gpus=seen + 1, gpu_mem_gib=80.0, host_mem_gib=8.0)
    (tmp_path / "out").mkdir()
    with pytest.raises(quantize.QuantizeError) as e:
        quantize.KIND.run(action.params, RunContext(tmp_path / "out", {}, {}, logging.getLogger("test"), way=way))
    assert str(e.value).startswith(f"quantize/tiny was placed to run {way.short()} ({way.text()}), and this builder's "
                                   f"process sees {seen or 'no'} CUDA device")
    assert not list((tmp_path / "out").iterdir())


def test_a_ci_class_that_declares_a_gpu_this_runner_lacks_fails_quantize_with_a_kiln_error(tmp_path: Path,
                                                                                          capsys) -> None:
    """`kiln build --as CLASS` places each action against the class's declared resources; where the
    runner is not what its class says (a GPU declared, none here), quantize refuses the GPU way it was
    placed in, in one line, instead of calibrating on the CPU it was not placed on."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the declared GPU way would run here")
    from compiler.cli import main

    spec = copy_quickstart(tmp_path / "spec")
    builders = tmp_path / "builders.yaml"
    builders.write_text("builders:\n  gpu:\n    gpu: H100-SXM5-80GB\n    gpus: 1\n    host_memory_gib: 64\n"
                        "    disk_gib: 100\n    has: [torch, gpu]\n", encoding="utf-8")
    code = main(["build", str(spec), "--store", str(tmp_path / "store"), "--builders", str(builders), "--as", "gpu",
                 "--only", "quantize/tiny"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err, err
    assert ("failed: quantize/tiny: QuantizeError: quantize/tiny was placed to run on 1 GPU (1 x GPU >= "
            in err), err
    assert "and this builder's process sees no CUDA device" in err


def test_fp8_dequantized_weights_match_the_fake_quantized_model(fp8, fp8_model, tmp_path: Path) -> None:
    """Finding: not bit-exact. ModelOpt 0.47's FP8 export divides the bf16 weight by its fp32
    scale in bf16 (a 0-dim fp32 tensor does not promote a bf16 tensor) before the cast to fp8, while
    the fake quantizer used in calibration and in the quality gate divides in fp32. The double
    rounding moves about 3% of the weights by one fp8 step; the test pins both facts."""
    spec, store, outcome = fp8
    ckpt = materialize(store, outcome, "quantize/tiny", tmp_path / "ckpt")
    exported, _ = dequantize(ckpt)
    model, _ = fp8_model
    fq = fake_quant_weights(model)
    assert len(fq) == 4 * 7  # q, k, v, o, gate, up, down in 4 layers; lm_head excluded
    total = differ = 0
    for name, w in fq.items():
        module = model.get_submodule(name[:-len(".weight")])
        scale = exported[name[:-len("weight")] + "weight_scale"]
        # the exported scale is the calibrated amax over the fp8 maximum (448)
        assert torch.equal(scale, module.weight_quantizer.amax.float() / 448.0), name
        # the export's own rounding, reproduced: every exported weight is fp8(bf16(W / scale)) * scale
        with torch.no_grad():
            emulated = (module.weight / scale).to(torch.float8_e4m3fn).float() * scale
        assert torch.equal(exported[name], emulated), name
        # against the fake-quantized weight (rounded to the model dtype, bf16): equal, or one fp8 step off
        got = exported[name].to(torch.bfloat16).float()
        off = got != w
        total, differ = total + w.numel(), differ + int(off.sum())
        step = torch.maximum(got.abs(), w.abs()) / 8 + scale * 2.0 ** -9  # e4m3: 3 mantissa bits
        assert bool(((got - w).abs() <= step)[off].all()), name
    assert differ / total < 0.05, f"{differ} of {total} weights differ from the fake-quantized model"
    # unquantized tensors are copied unchanged
    for name in ("lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert torch.equal(exported[name], model.state_dict()[name].float()), name


def test_fp8_dequantized_model_generates_text(fp8, fp8_model, tmp_path: Path) -> None:
    spec, store, outcome = fp8
    ckpt = materialize(store, outcome, "quantize/tiny", tmp_path / "ckpt")
    model, tok = dequantized_model(ckpt, spec.parent / "model")
    text = greedy_text(model, tok, PROMPT)
    assert text.strip(), "the dequantized model generated nothing"
    # and it is the quantized model: its next-token choices agree with the in-memory fake-quant
    # model (which also quantizes activations) almost everywhere on an eval text
    fq_model, _ = fp8_model
    sample = json.loads((spec.parent / "data" / "eval-prose.jsonl").read_text().splitlines()[0])["text"]
    ids = tok(sample, return_tensors="pt").input_ids[:, :128]
    with torch.inference_mode():
        a = model(ids).logits.argmax(-1)
        b = fq_model(ids).logits.argmax(-1)
    assert (a == b).float().mean().item() >= 0.9


def test_fp8_quality_gate_passes_with_both_figures(fp8, tmp_path: Path) -> None:
    spec, store, outcome = fp8
    gate = json.loads(tree_files(store, outcome, "quality-gate/tiny")["quality.json"])
    measured = json.loads(tree_files(store, outcome, "quantize/tiny")["quality.json"])
    assert gate["passed"] is True and gate["max_regression_pct"] == 5.0
    assert gate["metric"] == "perplexity" and gate["samples"] == 40
    base, quant = gate["unquantized"], gate["quantized"]
    assert base == measured["unquantized"] and quant == measured["quantized"]
    assert 1.0 < base < 1000  # a trained model: an untrained one is near the vocabulary size (4096)
    assert abs(gate["regression_pct"] - (quant - base) / base * 100) < 1e-3
    # the release manifest carries the figures of every gate
    in_manifest = json.loads(outcome.manifest)["quality"]
    assert set(in_manifest) == {"tiny", "tiny-awq"}
    assert in_manifest["tiny"] == {k: gate[k] for k in ("metric", "samples", "unquantized", "quantized",
                                                         "regression_pct", "max_regression_pct", "passed")}


def test_fp8_same_inputs_same_bytes_in_another_store(fp8, tmp_path: Path) -> None:
    """Everything but the INT4 AWQ chain, again from nothing: the same trees, byte for byte. (AWQ is
    the slowest thing the suite does; its second, independent run is the in-memory model of the
    int4 tests, whose scales must equal the stored checkpoint's exactly.)"""
    spec, store, outcome = fp8
    again = build_spec(spec, LocalStore(tmp_path / "store-b"), selection=Selection(skip=("quantize/tiny-awq",)))
    assert not again.failed
    assert "quantize/tiny" in {r.id for r in again.executed}
    built = {aid: r.tree for aid, r in again.results.items() if r.tree}
    assert len(built) >= len(outcome.results) - 4  # the AWQ chain: quantize, gate, and what reads them
    assert built == {aid: outcome.results[aid].tree for aid in built}
    assert tree_files(tmp_path / "store-b", again, "quantize/tiny") == tree_files(store, outcome, "quantize/tiny")


def test_fp8_rebuild_with_unchanged_inputs_quantizes_nothing(fp8) -> None:
    spec, store, outcome = fp8
    again = build(spec, store)
    assert executed(again) == set()
    assert again.results["quantize/tiny"].status == "cached"
    assert again.manifest == outcome.manifest


def test_changing_only_the_threshold_reruns_only_the_gate(fp8, tmp_path: Path) -> None:
    spec, store, outcome = fp8
    measured = json.loads(tree_files(store, outcome, "quantize/tiny")["quality.json"])
    copy = tmp_path / "spec"
    shutil.copytree(spec.parent, copy)
    text = (copy / "kiln.yaml").read_text()
    (copy / "kiln.yaml").write_text(text.replace("max_regression_pct: 5.0", "max_regression_pct: 0.5"))
    store_copy = tmp_path / "store"
    shutil.copytree(store, store_copy)
    plan = plan_spec(copy / "kiln.yaml", LocalStore(store_copy))
    # spec-snapshot records the whole spec, so it follows any spec change
    assert {p.id for p in plan.plan if not p.cached} == {"quality-gate/tiny", "spec-snapshot"}
    out = build(copy / "kiln.yaml", store_copy)
    assert executed(out) == {"quality-gate/tiny", "spec-snapshot"}
    assert (measured["regression_pct"] <= 0.5) == (not out.failed)
    if not out.failed:
        gate = json.loads(tree_files(store_copy, out, "quality-gate/tiny")["quality.json"])
        assert gate["max_regression_pct"] == 0.5 and gate["passed"] is True


def test_changing_the_calibration_file_requantizes_and_nothing_else(fp8, tmp_path: Path) -> None:
    spec, store, outcome = fp8
    copy = tmp_path / "spec"
    shutil.copytree(spec.parent, copy)
    # same name, other content: code instead of prose
    shutil.copyfile(copy / "data" / "calib-code.jsonl", copy / "data" / "calib-prose.jsonl")
    store_copy = tmp_path / "store"
    shutil.copytree(store, store_copy)
    # spec-snapshot records every input digest, so it follows any input change; both models
    # calibrate on this file. The Triton repository takes its tokenizer from the source: untouched.
    changed = {"calibration-set/tiny", "quantize/tiny", "quality-gate/tiny", "calibration-set/tiny-awq",
               "quantize/tiny-awq", "quality-gate/tiny-awq", "spec-snapshot"}
    plan = plan_spec(copy / "kiln.yaml", LocalStore(store_copy))
    assert {p.id for p in plan.plan if not p.cached} == changed
    # built without re-running INT4 AWQ (the slowest action there is): the FP8 model shows the effect
    out = build_spec(copy / "kiln.yaml", LocalStore(store_copy), selection=Selection(skip=("quantize/tiny-awq",)))
    assert not out.failed, [(r.id, r.error) for r in out.failed]
    assert executed(out) == changed - {"quantize/tiny-awq", "quality-gate/tiny-awq"}
    old = tree_files(store, outcome, "quantize/tiny")
    new = tree_files(store_copy, out, "quantize/tiny")
    assert old["model.safetensors"] != new["model.safetensors"]  # other activation scales
    assert old["tokenizer.json"] == new["tokenizer.json"]


# --- INT4 AWQ ------------------------------------------------------------------------------------
# The shared build's INT4 gate evaluates on code from the training text (tests/quickstart.py:
# QUANTIZED_EDITS), so that the failing-gate case below has a measurable regression to catch.
@pytest.fixture(scope="module")
def int4(quickstart_build):
    return quickstart_build


@pytest.fixture(scope="module")
def int4_model(int4):
    """The INT4 AWQ model fake-quantized in memory by the action's own code: a second, independent
    AWQ run (made once; tests only read it)."""
    spec, store, outcome = int4
    return in_memory_model(spec, store, outcome, model_name="tiny-awq")


def test_int4_awq_checkpoint_dequantizes_to_the_fake_quantized_model(int4, int4_model, tmp_path: Path) -> None:
    spec, store, outcome = int4
    ckpt = materialize(store, outcome, "quantize/tiny-awq", tmp_path / "ckpt")
    exported, qcfg = dequantize(ckpt)
    assert qcfg["quant_algo"] == "W4A16_AWQ" and qcfg["group_size"] == 128 and qcfg["pre_quant_scale"] is True
    model, _ = int4_model
    fq = fake_quant_weights(model)
    assert len(fq) == 4 * 7
    state = model.state_dict()
    total = differ = 0
    for name, w in fq.items():
        # int4 values times their group's scale, rounded to bf16 like the fake-quantized weight; a
        # weight at (or within float rounding of) the midpoint of two int4 levels may round the
        # other way in the export's arithmetic: observed on ~0.03% of them, each one level off
        got = exported[name].to(torch.bfloat16).float()
        off = got != w
        total, differ = total + w.numel(), differ + int(off.sum())
        scale = exported[name[:-len("weight")] + "weight_scale"].repeat_interleave(qcfg["group_size"], dim=1)
        assert torch.allclose(((got - w).abs() / scale)[off], torch.ones(()), rtol=0, atol=0.03), name
        # AWQ scales: folded into the preceding norm where one exists (q/k/v, gate/up), kept as
        # pre_quant_scale otherwise (o_proj, down_proj); either way equal to the in-memory model
        pqs = name[:-len("weight")] + "pre_quant_scale"
        if pqs in exported:
            assert torch.equal(exported[pqs], model.get_submodule(name[:-len(".weight")])
                               .input_quantizer.pre_quant_scale.float()), pqs
    assert differ / total < 0.001, f"{differ} of {total} weights differ from the fake-quantized model"
    for i in range(4):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            key = f"model.layers.{i}.{norm}.weight"
            assert torch.equal(exported[key], state[key].float()), key
    # the folding really happened: the norms differ from the source model's
    with safe_open(str(spec.parent / "model" / "model.safetensors"), "pt") as f:
        src = f.get_tensor("model.layers.0.input_layernorm.weight").float()
    assert not torch.equal(exported["model.layers.0.input_layernorm.weight"], src)


def test_int4_awq_dequantized_model_generates_text(int4, int4_model, tmp_path: Path) -> None:
    spec, store, outcome = int4
    ckpt = materialize(store, outcome, "quantize/tiny-awq", tmp_path / "ckpt")
    model, tok = dequantized_model(ckpt, spec.parent / "model")
    assert greedy_text(model, tok, PROMPT).strip()
    # weight-only: the dequantized model computes what the fake-quant model computes
    fq_model, _ = int4_model
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        a, b = model(ids).logits, fq_model(ids).logits.float()
    assert torch.allclose(a, b, rtol=0.05, atol=0.25), (a - b).abs().max()


def test_int4_quality_gate_fails_when_the_budget_is_tiny(int4, tmp_path: Path) -> None:
    spec, store, outcome = int4
    measured = json.loads(tree_files(store, outcome, "quantize/tiny-awq")["quality.json"])
    assert measured["regression_pct"] > 0.1, measured  # 4-bit weights cost measurable perplexity here
    copy = tmp_path / "spec"
    shutil.copytree(spec.parent, copy)
    text = (copy / "kiln.yaml").read_text()
    (copy / "kiln.yaml").write_text(text.replace("max_regression_pct: 50.0", "max_regression_pct: 0.1"))
    store_copy = tmp_path / "store"
    shutil.copytree(store, store_copy)
    out = build(copy / "kiln.yaml", store_copy)
    assert executed(out) == {"quality-gate/tiny-awq", "spec-snapshot"}  # no re-quantization
    err = {r.id: r.error for r in out.failed}["quality-gate/tiny-awq"]
    assert "fails its quality gate" in err and "int4_awq" in err
    assert f"unquantized {measured['unquantized']:g}" in err
    assert f"quantized (int4_awq weights) {measured['quantized']:g}" in err
    assert "allowed 0.1%" in err


# --- recipes, sources and GPU-only formats (no quantization run) ---------------------------------
def lowered(tmp_path: Path, edits: dict[str, str]):
    spec = copy_quickstart(tmp_path / "spec", edits)
    outcome = plan_spec(spec, LocalStore(tmp_path / "store"))
    assert outcome.validation.ok, [d.message for d in outcome.validation.diagnostics if d.is_error]
    return outcome.graph.actions["quantize/tiny"]


def test_recipe_maps_exclusions_overrides_and_kv_cache_onto_modelopt_entries(tmp_path: Path) -> None:
    from compiler.actions.quantize import build_quant_config

    action = lowered(tmp_path, {
        "weights: fp8": "weights: int4_awq\n      kv_cache: fp8\n      exclude: [lm_head, 'model.layers.0.*']\n"
                        "      overrides: [{match: '*mlp.down_proj', block_size: 64},"
                        " {match: 'model.layers.3.self_attn.o_proj', weights: bf16}]"})
    cfg = build_quant_config(action.params)
    entries = cfg["quant_cfg"]
    assert cfg["algorithm"]["method"] == "awq_lite"
    assert {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": (4, 3), "axis": None}} in entries
    assert {"quantizer_name": "model.layers.0.*.*", "enable": False} in entries
    down = [e for e in entries if e["quantizer_name"] == "*mlp.down_proj.weight_quantizer"]
    assert down and down[0]["cfg"]["block_sizes"][-1] == 64 and down[0]["cfg"]["num_bits"] == 4
    assert {"quantizer_name": "model.layers.3.self_attn.o_proj.weight_quantizer", "enable": False} in entries
    # the spec's entries come after ModelOpt's defaults: ModelOpt applies them in order, last wins
    names = [e["quantizer_name"] for e in entries]
    assert names.index("*[kv]_bmm_quantizer") < names.index("model.layers.0.*.*") < \
        names.index("*mlp.down_proj.weight_quantizer")
    # and applied to the model, they switch the right quantizers
    import modelopt.torch.quantization as mtq
    from compiler.actions.quantize import load

    model, _ = load(EXAMPLE / "model", "bf16", "cpu")
    mtq.quantize(model, {"quant_cfg": entries, "algorithm": "max"}, None)
    layers = model.model.layers
    assert not layers[0].mlp.up_proj.weight_quantizer.is_enabled
    assert not layers[0].self_attn.k_bmm_quantizer.is_enabled
    assert layers[1].self_attn.k_bmm_quantizer.is_enabled
    assert layers[1].mlp.down_proj.weight_quantizer.block_sizes[-1] == 64
    assert layers[1].mlp.up_proj.weight_quantizer.block_sizes[-1] == 128
    assert not layers[3].self_attn.o_proj.weight_quantizer.is_enabled
    assert layers[3].self_attn.q_proj.weight_quantizer.is_enabled
    assert not model.lm_head.weight_quantizer.is_enabled


def test_key_follows_what_quantize_reads(tmp_path: Path) -> None:
    base = lowered(tmp_path / "a", {})
    assert base.needs == ("torch",)
    assert set(base.inputs) == {"eval", "source/config.json", "source/model.safetensors", "source/tokenizer.json",
                                "source/tokenizer_config.json"}
    assert "max_regression_pct" not in json.dumps(base.params_json)  # the threshold belongs to quality-gate
    assert base.params_json["calibration"] == {"max_seq_len": 128, "batch_size": 1}
    assert base.params.activations == "fp8" and base.params.modelopt == "0.47.0"


def test_nvfp4_needs_a_gpu_builder(tmp_path: Path) -> None:
    from compiler.actions import quantize
    from compiler.graph.kinds import RunContext

    action = lowered(tmp_path, {})
    from compiler.catalog.formats import load_format_table

    nvfp4 = quantize.modelopt_plan(load_format_table().recipe("nvfp4"))
    params = action.params.model_copy(update={"weights": "nvfp4", "activations": "nvfp4", "plan": nvfp4})
    assert quantize.needs_gpu(params) == ["NVFP4"]
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the refusal is for CPU-only builders")
    import logging

    (tmp_path / "out").mkdir()
    with pytest.raises(quantize.QuantizeError, match="quantizing NVFP4 needs a GPU builder"):
        quantize.KIND.run(params, RunContext(tmp_path / "out", {}, {}, logging.getLogger("test")))
    assert not list((tmp_path / "out").iterdir())


def test_huggingface_source_offline_uses_a_verified_local_copy(tmp_path: Path, monkeypatch) -> None:
    import logging

    from compiler.actions.source import SourceError as QuantizeError
    from compiler.actions.source import SourceRef, directory_digest, fetch_huggingface

    mirror = tmp_path / "models"
    shutil.copytree(EXAMPLE / "model", mirror / "kiln" / "tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty Hugging Face cache
    monkeypatch.setenv("KILN_MODELS", str(mirror))
    digest = directory_digest(EXAMPLE / "model")
    source = SourceRef(huggingface="kiln/tiny", revision="0" * 40, digest=digest)
    log = logging.getLogger("test")
    assert fetch_huggingface(source, log) == mirror / "kiln" / "tiny"
    with pytest.raises(QuantizeError, match="sets no `source.digest`"):
        fetch_huggingface(source.model_copy(update={"digest": None}), log)
    (mirror / "kiln" / "tiny" / "tokenizer_config.json").write_text("{}")
    with pytest.raises(QuantizeError, match=f"has digest sha256:[0-9a-f]{{64}}, not {digest}"):
        fetch_huggingface(source, log)
    with pytest.raises(QuantizeError, match="no local copy"):
        fetch_huggingface(source.model_copy(update={"huggingface": "kiln/absent"}), log)


def test_exact_match_metric_scores_greedy_continuations(tmp_path: Path) -> None:
    from compiler.actions.quantize import evaluate, load, read_eval, regression_pct

    model, tok = load(EXAMPLE / "model", "bf16", "cpu")
    prompts = ["def lower(ctx: LowerContext) -> list[Action]:\n   ", PROMPT]
    own = [greedy_text(model, tok, p, 4) for p in prompts]  # what the model itself continues with
    lines = [{"prompt": prompts[0], "answer": own[0]}, {"prompt": prompts[1], "answer": own[1] + " not this"}]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    items = read_eval(path, "exact_match", None)
    assert evaluate(model, tok, items, "exact_match", 64) == 0.5
    assert evaluate(model, tok, items[:1], "exact_match", 64) == 1.0
    assert regression_pct("exact_match", 0.5, 0.25) == 50.0 and regression_pct("perplexity", 10.0, 10.5) == 5.0
    path.write_text('{"text": "no prompt here"}\n')
    from compiler.actions.quantize import QuantizeError

    with pytest.raises(QuantizeError, match='"prompt" and "answer"'):
        read_eval(path, "exact_match", None)
