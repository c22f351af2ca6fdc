"""A calibration sharded over the GPUs of one builder, or offloading what they cannot hold to host
memory (compiler/actions/quantize.py gpu_shares, load).

The load's arguments and the decision between the one-device load, a sharded one and an offloading
one are checked here on any machine: the decision is the plan's formula (compiler/actions/sizing.py
calibration_gpus, offload_need) applied to the model's own weights, the GPUs a builder reports and
its free host memory. The sharded path itself (transformers device_map over the visible GPUs,
ModelOpt's calibration and export) runs for real where two CUDA GPUs or more are visible, the
offloading one where one is, and each checkpoint is compared with the one-device load's.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_MISSING = [m for m in ("torch", "transformers", "modelopt", "accelerate") if importlib.util.find_spec(m) is None]
if _MISSING:  # pragma: no cover - depends on the machine
    pytestmark = pytest.mark.skip(reason=f"quantization needs torch, transformers, accelerate and nvidia-modelopt "
                                         f"({', '.join(_MISSING)} missing); bash scripts/install.sh --dev installs them")

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
MODEL = QUICKSTART / "model"


@pytest.fixture(scope="module")
def params(tmp_path_factory):
    """The quickstart's FP8 quantize parameters, as its plan lowers them."""
    from compiler.build import open_store, plan_spec
    from compiler.graph.builder import Builder

    store = open_store(tmp_path_factory.mktemp("plan") / "store", create=False, missing_ok=True)
    out = plan_spec(QUICKSTART / "kiln.yaml", store, builder=Builder(fixed=frozenset()))
    assert out.graph is not None, [str(d) for d in out.validation.diagnostics]
    return out.graph.actions["quantize/tiny"].params


def test_the_one_device_load_keeps_its_arguments() -> None:
    import torch

    from compiler.actions import quantize

    assert quantize.load_kwargs("bf16") == {"dtype": torch.bfloat16}
    assert quantize.load_kwargs("fp16", None) == {"dtype": torch.float16}
    assert quantize.load_kwargs("bf16", {0: 7, 1: 9}) == {"dtype": torch.bfloat16, "device_map": "auto",
                                                          "max_memory": {0: 7, 1: 9}}
    model, _ = quantize.load(MODEL, "bf16", "cpu")
    assert not hasattr(model, "hf_device_map")  # no accelerate dispatch: moved to its device whole
    assert {p.device.type for p in model.parameters()} == {"cpu"} and not model.training


def test_the_run_shards_exactly_where_the_plans_formula_does(params) -> None:
    from transformers import AutoConfig

    from compiler.actions import quantize
    from compiler.actions.sizing import CUDA_CONTEXT, activation_bytes, calibration_gpus, shard_share

    cfg = AutoConfig.from_pretrained(str(MODEL))
    c = params.calibration
    act = activation_bytes(cfg.hidden_size, cfg.vocab_size, c.batch_size, c.max_seq_len)
    w, layer = quantize.weight_bytes_of(MODEL, params.dtype)
    assert 0.9 * MODEL.joinpath("model.safetensors").stat().st_size < w  # the weights, counted on the meta device
    assert w / cfg.num_hidden_layers / 2 < layer < w / 2
    roomy = 80 << 30
    assert quantize.gpu_shares(MODEL, params, []) is None  # CPU
    assert quantize.gpu_shares(MODEL, params, [roomy]) is None  # one GPU: the one-device load
    assert quantize.gpu_shares(MODEL, params, [roomy, roomy]) is None  # one of them holds it
    # GPUs whose room beside the batch and the context holds 0.7 of the weights: two of them, with
    # the largest layer's room on the first
    two = int(CUDA_CONTEXT + act + 0.7 * w)
    assert calibration_gpus(w, act, two, layer) == 2 and calibration_gpus(w, act, two, 0.5 * w) == 3
    shares = quantize.gpu_shares(MODEL, params, [two, two, two])
    assert shares == {i: int(shard_share(act, two)) for i in range(3)}  # all visible GPUs share it
    assert sum(shares.values()) >= w + layer
    three = int(CUDA_CONTEXT + act + 0.45 * w)
    with pytest.raises(quantize.QuantizeError, match=r"needs 3 GPUs of .* GiB, this builder has 2"):
        quantize.gpu_shares(MODEL, params, [three, three])
    with pytest.raises(quantize.QuantizeError, match="larger GPUs"):
        quantize.gpu_shares(MODEL, params, [CUDA_CONTEXT, CUDA_CONTEXT])


def test_transformers_places_every_weight_on_the_gpus_the_formula_counts(params) -> None:
    """transformers' own device_map="auto" placement (what from_pretrained computes from the shares;
    it needs no GPU to compute) keeps the whole model on the GPUs, none of it on "disk" or "cpu",
    for as many GPUs as the formula says and for more."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations.accelerate import _get_device_map

    from compiler.actions import quantize
    from compiler.actions.sizing import CUDA_CONTEXT, activation_bytes, calibration_gpus

    cfg = AutoConfig.from_pretrained(str(MODEL))
    w, layer = quantize.weight_bytes_of(MODEL, params.dtype)
    act = activation_bytes(cfg.hidden_size, cfg.vocab_size, params.calibration.batch_size,
                           params.calibration.max_seq_len)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=quantize.torch_dtype(params.dtype))
    for room in (0.3, 0.45, 0.9):
        mem = int(CUDA_CONTEXT + act + room * w)
        need = calibration_gpus(w, act, mem, layer)
        for count in (need, need + 1):
            shares = quantize.gpu_shares(MODEL, params, [mem] * count)
            placed = {str(d) for d in _get_device_map(model, "auto", dict(shares), None).values()}
            assert placed <= {str(i) for i in range(count)} and len(placed) >= 2, (room, count, placed)


def _cuda_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _calibrate_and_export(params, shares, out: Path) -> dict:
    """The action's own load, calibration and export of the quickstart model; the load's devices."""
    import torch
    from modelopt.torch.export import export_hf_checkpoint

    from compiler.actions import quantize
    from compiler.actions.calibration import read_texts

    texts = read_texts((QUICKSTART / "data" / "calib-prose.jsonl").read_text(encoding="utf-8"))[:16]
    torch.manual_seed(0)
    model, tok = quantize.load(MODEL, params.dtype, "cuda", shares)
    devices = dict(getattr(model, "hf_device_map", {"": str(next(model.parameters()).device)}))
    model = quantize.quantize_in_memory(model, tok, params, texts)
    export_hf_checkpoint(model, dtype=next(p.dtype for p in model.parameters() if p.is_floating_point()),
                         export_dir=out)
    return devices


def test_a_sharded_calibration_exports_what_the_one_device_one_does(params, tmp_path: Path) -> None:
    gpus = _cuda_gpus()
    if gpus < 2:
        pytest.skip(f"a sharded calibration needs 2 CUDA GPUs or more; {gpus} visible here")
    import torch

    from compiler.actions import quantize

    memories = [torch.cuda.get_device_properties(i).total_memory for i in range(gpus)]
    assert quantize.gpu_shares(MODEL, params, memories) is None  # the tiny model fits one GPU: the action loads it whole
    # The shares a GPU of just enough memory would get, so that the load spreads over every visible GPU
    w, _ = quantize.weight_bytes_of(MODEL, params.dtype)
    shares = {i: int(2 * w / gpus) for i in range(gpus)}  # spread over several: transformers balances them
    sharded = _calibrate_and_export(params, shares, tmp_path / "sharded")
    assert len({str(d) for d in sharded.values()}) >= 2, sharded  # the layers are on several GPUs
    whole = _calibrate_and_export(params, None, tmp_path / "whole")
    assert set(whole.values()) == {"cuda:0"}
    files = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "sharded").iterdir())
    _assert_same_checkpoint(tmp_path / "whole", tmp_path / "sharded")


def _assert_same_checkpoint(a: Path, b: Path) -> None:
    """The same tensors, bit for bit, whatever shard files hold them, and the same JSON files (the
    index that names the shards aside)."""
    import torch
    from safetensors import safe_open

    def tensors(d: Path) -> dict:
        out = {}
        for f in sorted(d.glob("*.safetensors")):
            with safe_open(str(f), "pt") as h:
                out.update({k: h.get_tensor(k) for k in h.keys()})
        return out

    ta, tb = tensors(a), tensors(b)
    assert sorted(ta) == sorted(tb)
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k
    for f in sorted(a.glob("*.json")):
        if f.name != "model.safetensors.index.json":
            assert json.loads(f.read_text(encoding="utf-8")) == \
                json.loads((b / f.name).read_text(encoding="utf-8")), f.name


# --- offloading to host memory ---------------------------------------------------------------------
FLEET = ROOT / "examples" / "k8s-two-pools"  # its `big`: Llama 3.1 405B, calibrated to FP8


@pytest.fixture(scope="module")
def llama405b(tmp_path_factory):
    """quantize/big's parameters, its plan's size, and a directory holding the 405B's config.json
    (from the catalog's architecture: the worker counts the weights on the meta device from it)."""
    from transformers import LlamaConfig

    from compiler.build import open_store, plan_spec
    from compiler.graph.builder import Builder

    store = open_store(tmp_path_factory.mktemp("plan405") / "store", create=False, missing_ok=True)
    out = plan_spec(FLEET / "kiln.yaml", store, builder=Builder(fixed=frozenset()))
    action = out.graph.actions["quantize/big"]
    a = out.validation.resolved.models["big"].arch
    model_dir = tmp_path_factory.mktemp("llama405b")
    LlamaConfig(hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
                tie_word_embeddings=a.tied_embeddings, architectures=["LlamaForCausalLM"]).save_pretrained(model_dir)
    return action.params, action.size, model_dir


def test_on_8_h100s_the_worker_offloads_the_405b_as_the_plans_way_says(llama405b) -> None:
    """The issue's own example: the worker's decision and its load arguments for 8 x H100-SXM5-80GB
    are the plan's offload way for them (the same formula on the weights it counts itself)."""
    import torch

    from compiler.actions import quantize
    from compiler.actions.sizing import host_share
    from compiler.catalog import load_gpu_catalog
    from compiler.graph.sizes import GiB

    params, size, model_dir = llama405b
    h100 = load_gpu_catalog().get("H100-SXM5-80GB").memory_mib << 20
    way = next(w for w in size.ways if w.gpus == 8 and w.gpu_mem_gib == round(h100 / GiB, 1))
    assert way.offload_gib > 0
    two_tb = 2048 * GiB
    shares = quantize.gpu_shares(model_dir, params, [h100] * 8, two_tb)
    assert set(shares) == {*range(8), "cpu"} and shares["cpu"] == host_share(two_tb)
    weights, layer = quantize.weight_bytes_of(model_dir, params.dtype)
    # the weights it counts are the plan's (the module inventory), to 0.5 %; so is what it offloads
    assert abs(weights / GiB - 756) < 0.005 * 756
    spill = weights + layer - sum(v for k, v in shares.items() if k != "cpu")
    assert abs(spill / GiB - way.offload_gib) < 0.01 * way.offload_gib
    assert quantize.load_kwargs(params.dtype, shares) == {"dtype": torch.bfloat16, "device_map": "auto",
                                                          "max_memory": shares}
    # with less free host memory than the way needs, the worker says what it needs and has
    with pytest.raises(quantize.QuantizeError) as e:
        quantize.gpu_shares(model_dir, params, [h100] * 8, 256 * GiB)
    text = str(e.value)
    assert "needs 12 GPUs of 79.6 GiB, this builder has 8" in text and "it has 256.0 GiB free" in text
    need = float(text.split("needs ")[2].split(" GiB of free host memory")[0])
    assert abs(need - way.host_mem_gib) < 0.01 * way.host_mem_gib
    # twelve of them hold it on their GPUs alone: no offload
    assert "cpu" not in quantize.gpu_shares(model_dir, params, [h100] * 12, two_tb)


def test_the_worker_offloads_exactly_where_the_plans_formula_does(params) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations.accelerate import _get_device_map
    import torch

    from compiler.actions import quantize
    from compiler.actions.sizing import CUDA_CONTEXT, activation_bytes, host_share, offload_need

    cfg = AutoConfig.from_pretrained(str(MODEL))
    c = params.calibration
    act = activation_bytes(cfg.hidden_size, cfg.vocab_size, c.batch_size, c.max_seq_len)
    w, layer = quantize.weight_bytes_of(MODEL, params.dtype)
    three = int(CUDA_CONTEXT + act + 0.45 * w)  # three such GPUs hold it, two do not
    for count in (1, 2):
        spill, need = offload_need(w, act, three, layer, count)
        enough = int(need) + 1
        shares = quantize.gpu_shares(MODEL, params, [three] * count, enough)
        assert shares["cpu"] == host_share(enough) >= spill + layer
        # a way placed without offload reserved no host memory for it: the worker does not offload then
        with pytest.raises(quantize.QuantizeError, match=rf"placed on {count} GPU\(s\) of .* without offloading"):
            quantize.gpu_shares(MODEL, params, [three] * count, enough, allow_offload=False)
        with pytest.raises(quantize.QuantizeError, match=r"of free host memory, it has .* GiB free"):
            quantize.gpu_shares(MODEL, params, [three] * count, int(need) - 1)
        # transformers' own placement of those shares: some of the model on "cpu", none on "disk"
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=quantize.torch_dtype(params.dtype))
        placed = {str(d) for d in _get_device_map(model, "auto", dict(shares), None).values()}
        assert "cpu" in placed and "disk" not in placed and placed - {"cpu"}, placed
    assert "cpu" not in quantize.gpu_shares(MODEL, params, [three] * 3, 1 << 40)  # all on GPUs


def test_a_load_that_spills_to_disk_is_a_kiln_error_not_a_traceback(tmp_path: Path) -> None:
    """Where the devices hold less than the plan gave them (other processes on the GPUs),
    transformers puts the rest on "disk": silently for safetensors it can read in place, with an
    `offload_folder` ValueError for weights it must re-save (MoE experts). Both are refused."""
    import torch
    from transformers import AutoModelForCausalLM, MixtralConfig

    from compiler.actions import quantize

    with pytest.raises(quantize.QuantizeError) as e:
        quantize.load(MODEL, "bf16", "cpu", {"cpu": 1000})
    text = str(e.value)
    assert "does not fit the memory Kiln planned: it needs host 0.0 GiB" in text and " on disk" in text
    assert ("no CUDA device" in text) is (not torch.cuda.is_available())
    moe = tmp_path / "moe"
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(MixtralConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2), dtype=torch.bfloat16).save_pretrained(moe)
    with pytest.raises(ValueError, match="offload_folder"):  # what transformers itself says
        AutoModelForCausalLM.from_pretrained(str(moe), device_map="auto", max_memory={"cpu": 1000})
    with pytest.raises(quantize.QuantizeError, match="does not fit the memory Kiln planned"):
        quantize.load(moe, "bf16", "cpu", {"cpu": 1000})


def test_an_offloaded_calibration_exports_what_the_one_device_one_does(params, tmp_path: Path) -> None:
    gpus = _cuda_gpus()
    if gpus < 1:
        pytest.skip(f"an offloaded calibration needs a CUDA GPU (accelerate moves the offloaded layers to it); "
                    f"{gpus} visible here")
    from compiler.actions import quantize

    w, _ = quantize.weight_bytes_of(MODEL, params.dtype)
    shares = {0: int(w / 2), "cpu": 4 * int(w)}  # half the model on GPU 0, the rest in host memory
    offloaded = _calibrate_and_export(params, shares, tmp_path / "offloaded")
    assert {"cpu"} < {str(d) for d in offloaded.values()}, offloaded
    _calibrate_and_export(params, None, tmp_path / "whole")
    # ModelOpt exports an offloaded model through its streaming writer: other shard files, the same tensors
    _assert_same_checkpoint(tmp_path / "whole", tmp_path / "offloaded")
