"""The packaged GPU and model catalogs, config.json reading and the catalog listing."""

from __future__ import annotations

import json
import re

import pytest

from compiler.catalog import (
    ConfigError,
    GpuCatalog,
    MigGeometry,
    arch_from_hf_config,
    estimate_params,
    kv_elems_per_token,
    load_gpu_catalog,
    load_model_catalog,
)
from compiler.catalog.listing import render_catalog

STATUSES = {"verified", "partially-verified", "inferred", "unverified"}
GPU_KEYS = [
    "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "A30-24GB", "H100-SXM5-80GB", "H100-PCIe-80GB",
    "H100-NVL-94GB", "H200-SXM-141GB", "H200-NVL-141GB", "GH200-96GB", "GH200-144GB", "B200-180GB", "GB200-186GB",
    "B300-288GB", "GB300-288GB", "RTX-PRO-6000-Blackwell-Server-96GB", "L40S-48GB", "L4-24GB",
]
NO_MIG_KEYS = ["L40S-48GB", "L4-24GB"]
MIG_KEYS = [k for k in GPU_KEYS if k not in NO_MIG_KEYS]
# GPUs whose whole supported-clock list was read from a real `nvidia-smi -q` (so their minimum clock is known)
CLOCKS_CAPTURED = {"L40S-48GB": "k8s-test-infra-l40s-capture", "L4-24GB": "l4-smi-capture"}
# models.md section 2: KV-cache elements per token
KV_TABLE = {
    "llama-2-70b": 163_840, "llama-3.1-8b": 65_536, "llama-3.1-70b": 163_840, "llama-3.1-405b": 258_048,
    "llama-3.3-70b": 163_840, "mixtral-8x7b": 65_536, "mixtral-8x22b": 114_688, "gpt-oss-20b": 24_576,
    "gpt-oss-120b": 36_864, "qwen3-8b": 73_728, "qwen3-32b": 131_072, "qwen3-235b-a22b": 96_256,
    "deepseek-v3": 61 * (512 + 64), "starcoder2-15b": 40_960, "deberta-v3-large": 0, "gpt-j-6b": 229_376,
}


@pytest.fixture(scope="module")
def gpus() -> GpuCatalog:
    return load_gpu_catalog()


@pytest.fixture(scope="module")
def models():
    return load_model_catalog()


# ------------------------------------------------------------------------------------------------ GPUs

def test_every_listed_gpu_loads(gpus):
    assert gpus.names == GPU_KEYS
    for key in GPU_KEYS:
        g = gpus.get(key)
        assert g is not None and g.name == key
        assert g.mig.supported == bool(g.mig.profiles) == (key in MIG_KEYS)
        assert g.memory_mib > 0 and g.memory_gb > 0 and g.bandwidth_tbps > 0
        assert g.memory_gb * 1000 ** 3 * 0.9 <= g.memory_mib * 1024 ** 2 <= g.memory_gb * 1024 ** 3


def test_loader_is_cached(gpus):
    assert load_gpu_catalog() is gpus
    assert load_model_catalog() is load_model_catalog()


@pytest.mark.parametrize("key", GPU_KEYS)
def test_clock_power_ranges(gpus, key):
    g = gpus[key]
    lo, hi = g.graphics_mhz
    assert 0 < lo < hi <= 4000
    assert g.memory_mhz and all(m > 0 for m in g.memory_mhz)
    pmin, pmax = g.power_w
    assert 0 < pmin < pmax == g.tdp_w
    assert re.fullmatch(r"0x[0-9A-F]{4}", g.pci_device_id)
    assert g.min_driver is None or re.fullmatch(r"\d+\.\d+(\.\d+)?", g.min_driver)


@pytest.mark.parametrize("key", GPU_KEYS)
def test_statuses_are_known(gpus, key):
    g = gpus[key]
    assert set(g.status.values()) <= STATUSES
    for fact in ("compute_capability", "sms", "memory_mib", "bandwidth_tbps", "tflops", "graphics_mhz",
                 "graphics_mhz_min", "graphics_mhz_max", "memory_mhz", "power_w", "tdp_w", "min_driver"):
        assert fact in g.status, fact
    for p in g.mig.profiles:
        assert {p.id_status, p.placement_status, p.sm_status} <= STATUSES


@pytest.mark.parametrize("key", [k for k in GPU_KEYS if k not in CLOCKS_CAPTURED])
def test_filled_in_facts_are_marked_weak(gpus, key):
    # the reference has no minimum clocks; whatever we hold must not claim to be verified
    assert gpus[key].status_of("graphics_mhz_min") in {"inferred", "unverified"}
    assert gpus[key].status_of("graphics_mhz") in {"inferred", "unverified"}


@pytest.mark.parametrize("key,source", sorted(CLOCKS_CAPTURED.items()))
def test_captured_clock_ranges(gpus, key, source):
    # a minimum clock may only claim more than "unverified" where a real supported-clocks list was read
    g = gpus[key]
    assert source in g.sources and gpus.source(source)
    assert g.graphics_mhz[0] == 210 and g.status_of("graphics_mhz_min") not in {"inferred", "unverified"}
    assert g.memory_mhz[-1] == 405 and len(g.memory_mhz) == 2  # GDDR boards expose an idle memory clock too


@pytest.mark.parametrize("key", MIG_KEYS)
def test_mig_geometry_is_consistent(gpus, key):
    mig = gpus[key].mig
    assert mig.max_instances == mig.compute_slices
    assert mig.memory_slices in (4, 8)
    names = [p.name for p in mig.profiles]
    assert len(names) == len(set(names))
    ids = [p.id for p in mig.profiles]
    assert len(ids) == len(set(ids))
    full = [p for p in mig.profiles if p.compute_slices == mig.compute_slices]
    assert full, "some profile must use every compute slice"
    for p in full:
        assert p.memory_slices == mig.memory_slices and p.placements == (0,) and p.max_count == 1
    for p in mig.profiles:
        g, gb = re.match(r"(\d+)g\.(\d+)gb", p.name).groups()
        assert int(g) == p.compute_slices and int(gb) == p.memory_gb
        assert p.placement_size == p.memory_slices
        assert p.placements == tuple(sorted(set(p.placements)))
        for start in p.placements:
            assert 0 <= start and start + p.placement_size <= mig.memory_slices
            assert start % p.placement_size == 0  # aligned like -lgipp prints them
        assert p.max_count * p.compute_slices <= mig.compute_slices
        assert p.max_count <= mig.max_instances and p.max_count <= len(p.placements)
        if p.has_media_extensions:
            assert p.max_count == 1
        assert p.memory_gb <= gpus[key].memory_gb


def test_seven_slice_parts_use_all_slices_with_7g(gpus):
    for g in gpus:
        if g.mig.memory_slices == 8:
            seven = [p for p in g.mig.profiles if p.name.startswith("7g.")]
            assert len(seven) == 1 and seven[0].compute_slices == 7 and seven[0].memory_slices == 8
            assert seven[0].id == 0


def test_placements_match_the_id_pattern(gpus):
    eight = {19: ((0, 1, 2, 3, 4, 5, 6), 1), 20: ((0, 1, 2, 3, 4, 5, 6), 1), 15: ((0, 2, 4, 6), 2),
             14: ((0, 2, 4), 2), 9: ((0, 4), 4), 5: ((0,), 4), 0: ((0,), 8)}
    for g in gpus:
        for p in g.mig.profiles:
            if g.mig.memory_slices == 8:
                assert (p.placements, p.placement_size) == eight[p.id], (g.name, p.name)
                want = "verified" if g.name == "A100-SXM4-40GB" else "inferred"
                assert p.placement_status == want
    rtx = gpus["RTX-PRO-6000"]
    assert rtx.mig.max_instances == 4 and rtx.mig.memory_slices == 4
    sizes = {p.name: (p.placements, p.placement_size) for p in rtx.mig.profiles}
    assert sizes["1g.24gb"] == ((0, 1, 2, 3), 1)
    assert sizes["2g.48gb"] == ((0, 2), 2)
    assert sizes["4g.96gb"] == ((0,), 4)
    assert all(p.placement_status == "inferred" for p in rtx.mig.profiles)


def test_a30_profiles(gpus):
    a30 = gpus["A30"]
    mig = a30.mig
    assert (mig.max_instances, mig.compute_slices, mig.memory_slices, mig.min_driver) == (4, 4, 4, "460.73.01")
    assert [(p.name, p.id) for p in mig.profiles] == [
        ("1g.6gb", 14), ("1g.6gb+me", 21), ("2g.12gb", 5), ("2g.12gb+me", 6), ("4g.24gb", 0)]
    assert [p.sm for p in mig.profiles] == [14, 14, 28, 28, 56] and a30.sms == 56
    assert all(p.sm == 14 * p.compute_slices for p in mig.profiles)  # linear, like the A100
    # the plain 1g and 2g profiles tile the GPU: their instances' compute slices sum to all four
    for name in ("1g.6gb", "2g.12gb", "4g.24gb"):
        p = mig.profile(name)
        assert p.max_count * p.compute_slices == mig.compute_slices
        assert p.max_count * p.memory_slices == mig.memory_slices
        assert sorted(s + i for s in p.placements for i in range(p.placement_size)) == [0, 1, 2, 3]
    # a mixed layout (2g@0 + 1g@2 + 1g@3) also uses exactly the 4 compute slices
    assert sum(mig.profile(n).compute_slices for n in ("2g.12gb", "1g.6gb", "1g.6gb")) == 4
    assert sum(p.memory_gb for p in [mig.profile("1g.6gb")] * 4) <= a30.memory_gb
    assert all(p.placement_status != "inferred" for p in mig.profiles)  # read from a real -lgipp
    assert [p.memory_mib for p in mig.profiles] == [5952, 5952, 11968, 11968, 24000]
    assert a30.compute_capability == (8, 0) and a30.tflops["fp8"] is None and a30.pci_device_id == "0x20B7"


def test_a100_pcie_80gb_mirrors_the_sxm4_profiles(gpus):
    pcie, sxm = gpus["A100-PCIe"], gpus["A100-SXM4-80GB"]
    assert pcie.name == "A100-PCIe-80GB" and pcie.pci_device_id == "0x20B5" and pcie.sm_version == 80
    assert [(p.name, p.id, p.placements, p.sm) for p in pcie.mig.profiles] == \
           [(p.name, p.id, p.placements, p.sm) for p in sxm.mig.profiles]
    assert pcie.mig.profile("1g.5gb") is None  # 40GB-only (gpu-operator#603)
    # copied from the SXM4 board, so nothing about the PCIe board's profiles may claim more than inferred
    assert all({p.id_status, p.sm_status, p.placement_status} == {"inferred"} for p in pcie.mig.profiles)
    assert pcie.tdp_w == 300 < sxm.tdp_w and pcie.bandwidth_tbps < sxm.bandwidth_tbps


@pytest.mark.parametrize("key", NO_MIG_KEYS)
def test_ada_boards_have_no_mig(gpus, key):
    g = gpus[key]
    assert g.arch == "Ada Lovelace" and g.compute_capability == (8, 9) and g.sm_version == 89
    assert g.mig == MigGeometry(supported=False) and g.status_of("mig") == "verified"
    assert g.mig.profile("1g.10gb") is None and g.mig.profile_names == []
    assert g.nvlink_gbps is None  # PCIe only
    assert g.tflops["fp8"] == 2 * g.tflops["bf16"] or abs(g.tflops["fp8"] / g.tflops["bf16"] - 2) < 0.03
    assert g.tflops["fp4"] is None


def test_ada_board_facts(gpus):
    l40s, l4 = gpus["L40S"], gpus["L4"]
    assert (l40s.sms, l40s.memory_mib, l40s.power_w, l40s.pci_device_id) == (142, 46068, (100, 350), "0x26B9")
    assert (l4.sms, l4.memory_mib, l4.power_w, l4.pci_device_id) == (58, 23034, (40, 72), "0x27B8")
    assert l40s.graphics_mhz == (210, 2520) and l4.graphics_mhz == (210, 2040)
    assert l40s.memory_gb == 48 and l4.memory_gb == 24


def test_h100_sxm5_sms_match_lgip(gpus):
    h100 = gpus["H100-SXM5-80GB"]
    assert [p.sm for p in h100.mig.profiles] == [16, 16, 26, 32, 60, 64, 132]
    assert [p.name for p in h100.mig.profiles] == [
        "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert [p.id for p in h100.mig.profiles] == [19, 20, 15, 14, 9, 5, 0]
    assert all(p.sm_status == "verified" and p.id_status == "verified" for p in h100.mig.profiles)


def test_a100_profiles(gpus):
    a40, a80 = gpus["A100-SXM4-40GB"], gpus["A100-SXM4-80GB"]
    assert a40.mig.profile("1g.5gb") is not None and a80.mig.profile("1g.5gb") is None
    assert [p.sm for p in a80.mig.profiles] == [14, 14, 14, 28, 42, 56, 98]
    assert a80.power_w == (100, 400) and a80.status_of("power_w") == "verified"


def test_precision_support(gpus):
    for g in gpus:
        if g.compute_capability < (8, 9):
            assert g.tflops["fp8"] is None
        else:
            assert g.tflops["fp8"], g.name  # Ada (SM89) and later have FP8 tensor cores
        if g.compute_capability < (10, 0):
            assert g.tflops["fp4"] is None
        else:
            assert g.tflops["fp4"] and g.tflops["fp8"] and g.tflops["bf16"]
    assert gpus["B300"].sm_version == 103 and gpus["H100"].sm_version == 90


def test_aliases_resolve(gpus):
    want = {"H100": "H100-SXM5-80GB", "H200": "H200-SXM-141GB", "B200": "B200-180GB", "GB200": "GB200-186GB",
            "B300": "B300-288GB", "A100-80GB": "A100-SXM4-80GB",
            "RTX-PRO-6000": "RTX-PRO-6000-Blackwell-Server-96GB"}
    for alias, key in want.items():
        assert gpus.resolve_name(alias) == key
        assert gpus.get(alias) is gpus.get(key)
    for alias, key in gpus.aliases.items():
        assert key in gpus.names and alias not in gpus.names
    assert gpus.resolve_name("h100 sxm5_80gb") == "H100-SXM5-80GB"
    assert gpus.resolve_name("NVIDIA H100 80GB HBM3") == "H100-SXM5-80GB"
    assert gpus.resolve_name("A100") is None  # 40GB or 80GB: deliberately not an alias
    new = {"L40S": "L40S-48GB", "NVIDIA L40S": "L40S-48GB", "l40s": "L40S-48GB", "L4": "L4-24GB",
           "NVIDIA L4": "L4-24GB", "A30": "A30-24GB", "NVIDIA A30": "A30-24GB", "A100-PCIe": "A100-PCIe-80GB",
           "A100-PCIE-80GB": "A100-PCIe-80GB", "NVIDIA A100 80GB PCIe": "A100-PCIe-80GB",
           "nvidia a100 80gb pcie": "A100-PCIe-80GB", "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB"}
    for alias, key in new.items():
        assert gpus.resolve_name(alias) == key, alias
    assert gpus.get("V100") is None and "V100" not in gpus
    with pytest.raises(KeyError, match="did you mean"):
        gpus["H100-SXM-80GB"]


def test_ambiguous_alias_is_rejected(gpus):
    specs = {g.name: g for g in gpus}
    with pytest.raises(ValueError, match="ambiguous"):
        GpuCatalog(specs, {"h100": "H100-SXM5-80GB", "H100 ": "H100-PCIe-80GB"})
    with pytest.raises(ValueError, match="unknown GPU"):
        GpuCatalog(specs, {"X": "nope"})


def test_suggest(gpus):
    assert gpus.suggest("H100-SXM-80GB")[0] == "H100-SXM5-80GB"
    assert "B200-180GB" in gpus.suggest("B200-192GB")
    assert gpus.suggest("") == []


def _without_variants(gpus: GpuCatalog) -> GpuCatalog:
    return GpuCatalog({g.name: g for g in gpus}, gpus.aliases)


def test_variants_put_the_base_first(gpus):
    plain = _without_variants(gpus)
    # string closeness alone gets these wrong: an H800 is no H200, an RTX 6000 Ada no RTX PRO 6000 Blackwell
    assert plain.suggest("H800")[0] == "H200-SXM-141GB"
    assert plain.suggest("RTX 6000 Ada")[0] == "RTX-PRO-6000-Blackwell-Server-96GB"
    want = {
        "H800": "H100-SXM5-80GB", "NVIDIA H800": "H100-SXM5-80GB", "h800 sxm5 80gb": "H100-SXM5-80GB",
        "H800-SXM5-80GB-HBM3": "H100-SXM5-80GB", "H800 PCIe": "H100-PCIe-80GB", "A800": "A100-SXM4-80GB",
        "NVIDIA A800-SXM4-80GB": "A100-SXM4-80GB", "NVIDIA A800 80GB PCIe": "A100-PCIe-80GB",
        "A800-40GB": "A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB": "A100-SXM4-40GB", "H100 SXM5 94GB": "H100-NVL-94GB",
        "GH200 480GB": "GH200-96GB", "NVIDIA GH200 144G HBM3e": "GH200-144GB", "GH200": "GH200-96GB",
        "RTX 6000 Ada": "L40S-48GB", "NVIDIA RTX 6000 Ada Generation": "L40S-48GB", "L40": "L40S-48GB",
        "B200-192GB": "B200-180GB", "HGX B200": "B200-180GB", "GB200 NVL72": "GB200-186GB",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX-PRO-6000-Blackwell-Server-96GB",
    }
    for name, base in want.items():
        found = gpus.variant_of(name)
        assert found is not None and found[0] == base, name
        assert found[1] and "\n" not in found[1]
        assert gpus.suggest(name)[0] == base, name
        assert gpus.get(name) is None  # a variant is a hint, never a silent alias


def test_variants_without_a_catalog_part(gpus):
    for name in ("H20", "NVIDIA H20", "A10G", "A10"):
        base, reason = gpus.variant_of(name)
        assert base is None and "not in the catalog" in reason
        assert gpus.suggest(name) == []  # no look-alike: A10 is not an A100, H20 not an H200
    assert "96 GB" in gpus.variant_of("H20")[1]


def test_hint(gpus):
    assert gpus.hint("H800").endswith("the nearest catalog GPU is 'H100-SXM5-80GB'")
    assert "NVLink" in gpus.hint("H800") and gpus.hint("H800").startswith("'H800' is not in the catalog: ")
    assert "nearest" not in gpus.hint("H20")
    assert gpus.hint("H100-SXM-80GB") == "did you mean 'H100-SXM5-80GB'?"
    assert gpus.hint("zzzz") is None


def test_variant_table_is_consistent(gpus):
    assert gpus.variant_of("H100") is None and gpus.variant_of("L40S") is None  # catalog names are not variants
    assert gpus.variant_of("V100") is None and gpus.variant_of("") is None
    assert gpus.variant_of("H2000") is None  # a prefix must end at a "-" boundary
    for spelling, (base, reason) in gpus.variants.items():
        assert base is None or base in gpus.names, spelling
        assert reason and gpus.resolve_name(spelling) is None
        for key in gpus.variant_sources(spelling):
            assert gpus.source(key)
        assert gpus.variant_sources(spelling), spelling
    specs = {g.name: g for g in gpus}
    with pytest.raises(ValueError, match="unknown base"):
        GpuCatalog(specs, variants={"X1": {"base": "nope", "reason": "r"}})
    with pytest.raises(ValueError, match="already a catalog name"):
        GpuCatalog(specs, {"H100": "H100-SXM5-80GB"}, variants={"H100": {"base": None, "reason": "r"}})
    with pytest.raises(ValueError, match="twice"):
        GpuCatalog(specs, variants={"X1": {"base": None, "reason": "r"}, "NVIDIA X1": {"base": None, "reason": "r"}})


def test_sources_table_covers_every_key(gpus, models):
    for g in gpus:
        assert g.sources
        for key in g.sources:
            assert gpus.source(key)
    for m in models:
        for key in m.sources:
            assert models.source(key)
    assert "github.com/NVIDIA/DCGM/issues/152" in gpus.source("dcgm-issue-152")
    with pytest.raises(KeyError):
        gpus.source("no-such-source")


# ------------------------------------------------------------------------------------------------ models

def test_model_catalog_names(models):
    assert set(KV_TABLE) | {"tinyllama-kiln-quickstart"} == set(models.names)
    assert models.get("Llama-3.1-8B") is models.get("llama-3.1-8b")
    assert models.get("llama-4") is None
    assert models.suggest("llama-3.1-8")[0] == "llama-3.1-8b"
    for m in models:
        assert set(m.status.values()) <= STATUSES


@pytest.mark.parametrize("name,elems", sorted(KV_TABLE.items()))
def test_kv_elems_per_token_matches_reference(models, name, elems):
    m = models[name]
    assert kv_elems_per_token(m) == elems
    if not m.mla and not m.encoder_only:
        assert 2 * m.layers * m.kv_heads * m.head_dim == elems


@pytest.mark.parametrize("name", sorted(KV_TABLE))
def test_estimated_params_match_reference(models, name):
    m = models[name]
    total, active = estimate_params(m)
    tol = 0.01 if name != "deberta-v3-large" else 0.02  # biases, sinks and DeBERTa's position tables are ignored
    assert abs(total - m.params_total) / m.params_total < tol
    if m.is_moe and not name.startswith("gpt-oss"):  # gpt-oss's active count excludes the embedding
        assert abs(active - m.params_active) / m.params_active < tol


def test_model_specific_facts(models):
    ds = models["deepseek-v3"]
    assert ds.mla is not None and ds.dense_layers == 3 and ds.shared_experts == 1 and ds.experts == 256
    assert models["gpt-oss-20b"].sliding_window == 128 and models["gpt-oss-20b"].sliding_window_layers == 12
    assert models["starcoder2-15b"].gated_mlp is False
    assert models["deberta-v3-large"].encoder_only
    assert models["llama-3.3-70b"].status_of("layers") == "unverified"
    assert models["llama-3.1-8b"].status_of("layers") == "verified"
    tiny = models["tinyllama-kiln-quickstart"]
    assert (tiny.layers, tiny.hidden, tiny.heads, tiny.kv_heads, tiny.head_dim, tiny.intermediate, tiny.vocab,
            tiny.max_position, tiny.tied_embeddings) == (4, 256, 8, 4, 32, 688, 4096, 1024, False)
    assert tiny.sources == ("kiln-quickstart",) and models.source("kiln-quickstart")


LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000,
    "eos_token_id": 128001, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 128256,
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1,
    "first_k_dense_replace": 3, "norm_topk_prob": True, "scoring_func": "sigmoid", "hidden_act": "silu",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
    "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "vocab_size": 129280,
}
DIMS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_position",
        "moe_intermediate", "experts", "experts_per_token", "shared_experts", "dense_layers", "tied_embeddings",
        "gated_mlp", "mla", "sliding_window", "sliding_window_layers", "encoder_only", "hf_architecture")


def _dims(arch):
    return {k: getattr(arch, k) for k in DIMS}


def test_hf_config_llama_matches_catalog(models):
    arch = arch_from_hf_config(LLAMA_31_8B, "my-llama")
    assert arch.name == "my-llama"
    assert _dims(arch) == _dims(models["llama-3.1-8b"])
    assert abs(arch.params_total - 8.03e9) / 8.03e9 < 0.005
    assert arch.status_of("params_total") == "inferred"
    no_head_dim = {k: v for k, v in LLAMA_31_8B.items() if k != "head_dim"}
    assert arch_from_hf_config(no_head_dim, "x").head_dim == 4096 // 32


def test_hf_config_deepseek_matches_catalog(models):
    arch = arch_from_hf_config(DEEPSEEK_V3, "dsv3")
    assert _dims(arch) == _dims(models["deepseek-v3"])
    assert kv_elems_per_token(arch) == 61 * (512 + 64)
    assert abs(arch.params_total - 671.026e9) / 671.026e9 < 0.005
    assert abs(arch.params_active - 37.552e9) / 37.552e9 < 0.005
    # transformers writes head_dim = qk_rope_head_dim into saved configs; MLA must ignore it
    assert arch_from_hf_config({**DEEPSEEK_V3, "head_dim": 64}, "d").head_dim == 192


def test_hf_config_other_families(models):
    gpt_oss = {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64,
        "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
        "num_local_experts": 32, "experts_per_token": 4, "sliding_window": 128, "vocab_size": 201088,
        "max_position_embeddings": 131072, "tie_word_embeddings": False,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
    }
    assert _dims(arch_from_hf_config(gpt_oss, "g")) == _dims(models["gpt-oss-20b"])
    no_types = {k: v for k, v in gpt_oss.items() if k != "layer_types"}
    assert arch_from_hf_config(no_types, "g").sliding_window_layers == 12

    gptj = {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_layer": 28, "n_embd": 4096,
            "n_head": 16, "rotary_dim": 64, "n_inner": None, "n_positions": 2048, "vocab_size": 50400,
            "tie_word_embeddings": False}
    assert _dims(arch_from_hf_config(gptj, "j")) == _dims(models["gpt-j-6b"])

    sc2 = {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "hidden_size": 6144,
           "intermediate_size": 24576, "num_hidden_layers": 40, "num_attention_heads": 48,
           "num_key_value_heads": 4, "max_position_embeddings": 16384, "sliding_window": 4096,
           "vocab_size": 49152, "use_bias": True}
    assert _dims(arch_from_hf_config(sc2, "s")) == _dims(models["starcoder2-15b"])

    mixtral = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
               "max_position_embeddings": 32768, "sliding_window": None, "vocab_size": 32000,
               "tie_word_embeddings": False}
    arch = arch_from_hf_config(mixtral, "m")
    assert _dims(arch) == _dims(models["mixtral-8x7b"])
    assert abs(arch.params_total - 46.7e9) / 46.7e9 < 0.005

    qwen_moe = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
                "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 94,
                "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
                "max_position_embeddings": 40960, "sliding_window": None, "use_sliding_window": False,
                "max_window_layers": 94, "vocab_size": 151936, "tie_word_embeddings": False}
    assert _dims(arch_from_hf_config(qwen_moe, "q")) == _dims(models["qwen3-235b-a22b"])


@pytest.mark.parametrize("mutate,key", [
    (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
    (lambda c: c.pop("vocab_size"), "vocab_size"),
    (lambda c: c.update(hidden_size="4096"), "hidden_size"),
    (lambda c: c.update(num_attention_heads=0), "num_attention_heads"),
    (lambda c: c.update(num_key_value_heads=5), "num_key_value_heads"),
    (lambda c: c.update(num_key_value_heads=True), "num_key_value_heads"),
    (lambda c: c.update(tie_word_embeddings="no"), "tie_word_embeddings"),
    (lambda c: c.update(num_local_experts=8), "num_experts_per_tok"),
    (lambda c: c.update(num_local_experts=2, num_experts_per_tok=4), "num_experts_per_tok"),
    (lambda c: c.update(layer_types=["full_attention"], sliding_window=128), "layer_types"),
    (lambda c: c.pop("max_position_embeddings"), "max_position_embeddings"),
])
def test_hf_config_errors_name_the_key(mutate, key):
    cfg = dict(LLAMA_31_8B)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        arch_from_hf_config(cfg, "bad")
    assert err.value.key == key
    assert isinstance(err.value, ValueError)


def test_hf_config_rejects_non_mapping():
    with pytest.raises(ConfigError):
        arch_from_hf_config(["not", "a", "dict"], "x")  # type: ignore[arg-type]


def test_hf_config_mla_missing_key():
    cfg = dict(DEEPSEEK_V3)
    del cfg["qk_nope_head_dim"]
    with pytest.raises(ConfigError) as err:
        arch_from_hf_config(cfg, "x")
    assert err.value.key == "qk_nope_head_dim"


# ------------------------------------------------------------------------------------------------ listing

def test_render_text_is_deterministic_and_marked(gpus):
    out = render_catalog(gpus)
    assert out == render_catalog(load_gpu_catalog())
    for key in GPU_KEYS:
        assert key in out
    assert "Legend:" in out and "* inferred" in out and "? unverified" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("H100-PCIe-80GB") and "1g.10gb " in ln)
    assert "19*" in line  # inferred ID
    l40s = next(ln for ln in out.splitlines() if ln.startswith("L40S-48GB"))
    assert l40s.split()[-1] == "no" and "8.9" in l40s
    a30 = [ln for ln in out.splitlines() if ln.startswith("A30-24GB ")]
    assert len(a30) == 1 + 5 and any("{0,1,2,3}:1 " in ln and "1g.6gb " in ln for ln in a30)
    assert not any(ln.startswith("L4-24GB") and "g." in ln for ln in out.splitlines())  # no MIG rows


def test_render_one_gpu(gpus):
    out = render_catalog(gpus, gpu="H100")
    assert "H100-SXM5-80GB" in out and "H200" not in out
    assert "{0,2,4,6}:2*" in out and "7g.80gb" in out
    md = render_catalog(gpus, "markdown", gpu="RTX-PRO-6000")
    assert md.startswith("## GPUs") and "| 1g.24gb+me.all |" in md and "{0,1,2,3}:1\\*" in md


def test_render_json(gpus):
    data = json.loads(render_catalog(gpus, "json", gpu="B300"))
    (b300,) = data["gpus"]
    assert b300["name"] == "B300-288GB" and b300["compute_capability"] == [10, 3]
    assert [p["name"] for p in b300["mig"]["profiles"]][-1] == "7g.269gb"
    assert len(json.loads(render_catalog(gpus, "json"))["gpus"]) == len(GPU_KEYS)


def test_render_errors(gpus):
    with pytest.raises(ValueError, match="did you mean"):
        render_catalog(gpus, gpu="H100-SXM-80GB")
    with pytest.raises(ValueError, match="format"):
        render_catalog(gpus, fmt="html")


def test_catalog_formats_lists_the_format_table(capsys) -> None:
    import json

    from compiler.catalog.formats import load_format_table
    from compiler.cli import main

    assert main(["catalog", "--formats", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    table = load_format_table()
    assert len(doc["recipes"]) == len(table.recipes)
    mxfp4 = next(r for r in doc["recipes"] if r["weights"] == "mxfp4" and r["activations"] is None)
    assert mxfp4["experts_only"] and mxfp4["moe"]["TRITON"] == [90]
    assert main(["catalog", "--formats"]) == 0
    text = capsys.readouterr().out
    assert "W4A16_MXFP4" in text and "experts only" in text and "Default MoE backend: CUTLASS" in text
    assert main(["catalog", "--formats", "--models"]) == 2  # one listing at a time
