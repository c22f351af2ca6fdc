"""The machine each action needs, from the IR: the formulas and where they come from.

Weights are counted from the model's module inventory at a format (compiler/capacity/memory.py
weight_bytes, the same count the capacity figures use). The other terms:

- Calibration (quantize/<model>). Kiln's quantize loads the whole model at its source precision
  on one device (compiler/actions/quantize.py `load`: from_pretrained(...).to(device)) and runs the
  calibration batches through it. ModelOpt sizes a calibration batch as the memory one forward
  pass of `max_sample_length` tokens per sample takes on top of the loaded model (ModelOpt 0.47,
  modelopt/torch/utils/dataset_utils.py `get_max_batch_size`); Kiln models that pass's peak as
  the widest live tensors, batch x seq x (hidden x ACT_WIDTHS x 2 B + vocab x 2 B for the logits),
  plus the CUDA context. Host memory holds the model once while it loads (transformers reads the
  safetensors into host memory before `.to(device)`). On CPU the same sum is host memory. Where
  the format table marks a recipe CUDA-only (NVFP4, ...), only the GPU way exists.
  A model that one GPU of a size cannot hold is sharded over several of them, as ModelOpt's PTQ
  example loads it (Model-Optimizer examples/llm_ptq/example_utils.py `get_model`, called by
  hf_ptq.py: transformers `device_map="auto"` with a per-GPU `max_memory` of `gpu_mem_percentage`
  of each GPU, default 0.8, hf_ptq.py `--gpu_max_mem_percentage`; SGLang's ModelOpt loader keeps
  the same 0.8 as DEFAULT_GPU_MEMORY_FRACTION_FOR_CALIBRATION, "20% GPU memory headroom for
  ModelOpt calibration"). Each GPU of M bytes then holds at most min(SHARD_FRACTION x M,
  M - batch - context) of the weights (the rest of it is the calibration's headroom; the batch's
  tensors live on one GPU at a time as the forward pass walks the layers), so N GPUs of M hold the
  model when N = ceil((weights + its largest layer) / that share): the placement keeps room for the
  largest layer free on the first GPU (transformers 5.14 integrations/accelerate.py
  infer_auto_device_map, max_layer_size on the main device). N is computed for each GPU memory of
  Kiln's GPU catalog that cannot hold the one-GPU need, fewest GPUs first, each N with the smallest
  memory that gives it: a builder with N GPUs of at least M holds that way. Such a load needs
  little host memory: with a device_map, transformers materializes each tensor of the
  memory-mapped safetensors on its GPU (transformers 5.14 core_model_loading.py
  convert_and_load_state_dict_in_model, materialize_device = param_device), and the export writes
  the checkpoint through host memory one shard at a time (ModelOpt 0.47 unified_export_hf.py
  export_hf_checkpoint, max_shard_size "10GB").
  Where N GPUs of a size cannot hold the weights at that share, they can still calibrate them with
  the rest offloaded to host memory, as ModelOpt's PTQ example does when the model does not fit
  (example_utils.py get_model: accelerate's max_memory with a "cpu" entry, the GPUs' cut to
  gpu_mem_percentage; "Calibration can be slow"): accelerate keeps the weights placed on "cpu" in
  host memory and moves each to its GPU as the forward pass reaches it. The host then holds the
  overflow, weights + largest layer - N x share, plus room for one more largest layer (the host is
  a main device that keeps it free: transformers 5.14 integrations/accelerate.py
  infer_auto_device_map, main_devices = [gpus[0], "cpu"]), plus the base (torch and one export
  shard: ModelOpt 0.47 exports an offloaded model through its streaming writer, one layer and one
  shard at a time, unified_export_hf.py export_hf_checkpoint), all over HOST_SHARE (transformers
  itself counts only 90 % of the host's free memory as the "cpu" share, get_max_memory, for the
  loading's spikes). These ways are offered for 8, 4, 2 or 1 GPUs of each catalog memory that cannot
  hold the model at that count, after every way that holds it on GPUs (offloading is slower: each
  offloaded layer crosses PCIe for every batch), least host memory first.
  The CPU way is offered only where the calibration's forward passes take at most CPU_HOURS at
  CPU_FLOPS (see there): 2 FLOP per active parameter per token (the forward pass of a decoder,
  Kaplan et al. 2020, "Scaling Laws for Neural Language Models", C_forward ~ 2N), over samples x
  max_seq_len tokens. Beyond it the basis says why there is no CPU way.
- Engine builds (engine/<model>). TensorRT-LLM's quantize.py calibrates the source model across
  the build's GPUs and trtllm-build builds one rank per GPU (`--workers tp*pp`): tp x pp GPUs of
  the serving architecture (an engine is built for one). Each holds the larger of its share of
  the source model with the calibration batch, and its rank's quantized weights with the
  activation memory TensorRT reserves at build time for the max_num_tokens profile ("TensorRT
  pre-computes the activation tensors memory requirement at build time": TensorRT-LLM docs,
  reference/memory.md, "Activation size"), the same reserve Kiln's capacity figures use
  (compiler/capacity/memory.py reserve_terms). Host memory: the source model once, plus the
  builder's own working memory (TensorRT's builder needs about 2 GB of host memory that does
  not grow with the model: Torch-TensorRT docs, "Resource Management"). Disk: the source, the
  quantized checkpoint and the engines (each the quantized weights' size).
- Images (image-context/, image/, weights-image/): disk for the weights they carry twice (the
  materialized input tree and the image's layer), a little host memory.
- Model sources: disk for the source weights.
Every other action is small (compiler/graph/sizes.py SMALL).

A model the planner cannot size (its architecture unknown) gets the small allowance and says so.
For scale: ModelOpt's layerwise calibration calibrates DeepSeek-R1 (671B) on one node of
8 x 80 GB GPUs (Model-Optimizer PR #1251); Kiln's quantize holds the whole model in GPU memory
(one GPU, or sharded over several) or offloads what its GPUs cannot hold to host memory.
"""

from __future__ import annotations

import math

from compiler.capacity.memory import ACTIVATION_WIDTHS, MiB, reserve_terms, weight_bytes
from compiler.catalog.models import estimate_params
from compiler.graph.sizes import GiB, SMALL, Size, Way, gib
from compiler.ir.passes import sizing as model_sizing

CUDA_CONTEXT = 1 * GiB  # CUDA context and library workspaces of a calibration process
# The share of each GPU the weights may take when calibration is sharded over several GPUs: ModelOpt's
# gpu_mem_percentage (examples/llm_ptq/example_utils.py get_model, hf_ptq.py --gpu_max_mem_percentage,
# default 0.8; see the module docstring).
SHARD_FRACTION = 0.8
EXPORT_SHARD = 10 * 10**9  # ModelOpt 0.47 export_hf_checkpoint's max_shard_size ("10GB")
TORCH_HOST = 2 * GiB  # Python, torch, transformers and ModelOpt imported (a CPU calibration's base)
TRT_BUILDER_HOST = 2 * GiB  # TensorRT builder working memory (Torch-TensorRT docs, Resource Management)
IMAGE_HOST = 1 * GiB  # docker build client and tar streaming
# Offloading to host memory (module docstring): the GPU counts offered, those of NVIDIA's HGX boards
# (8 and 4 GPUs) and smaller servers, and the share of host memory the offloaded weights may take
# (transformers 5.14 integrations/accelerate.py get_max_memory: "cpu" x 0.90).
OFFLOAD_GPUS = (8, 4, 2, 1)
# quantize.py runs torch on this many CPU threads, fixed so that CPU float reductions round the
# same on every builder
CPU_THREADS = 2
HOST_SHARE = 0.9
# The CPU way's bound. quantize.py runs torch on CPU_THREADS threads; each core at best retires
# two 512-bit FMAs per cycle, 2 x 16 FP32 lanes x 2 FLOP = 64 FLOP/cycle (Intel 64 and IA-32
# Architectures Optimization Reference Manual, Intel AVX-512 on Xeon Scalable processors with two
# FMA units), at 3 GHz: 192 GFLOP/s a thread. A peak: a real calibration is slower, so the
# estimate is a lower bound on its time. Beyond CPU_HOURS, the CPU way is not offered.
CPU_FLOPS = CPU_THREADS * 64 * 3.0e9
CPU_HOURS = 24


def source_bytes(rm) -> float | None:
    """The model's weights at its source precision (bytes), or None when its architecture is unknown."""
    if rm.arch is None or rm.formats is None:
        return None
    return weight_bytes(rm.arch, rm.formats.dtype, unquantized_fmt=rm.formats.dtype).total_bytes


def checkpoint_bytes(rm) -> float | None:
    """The weights of the model's servable checkpoint (quantized where the spec quantizes them)."""
    if rm.arch is None or rm.formats is None:
        return None
    s = model_sizing(rm)
    return weight_bytes(rm.arch, s.weights_fmt, exclude=s.exclude, overrides=s.overrides,
                        block_size=s.block_size, unquantized_fmt=rm.formats.dtype).total_bytes


def calibration_bytes(rm, batch: int, seq: int) -> float:
    """Peak activations of one calibration batch (see the module docstring)."""
    return activation_bytes(rm.arch.hidden, rm.arch.vocab, batch, seq)


def activation_bytes(hidden: int, vocab: int, batch: int, seq: int) -> float:
    return batch * seq * (hidden * ACTIVATION_WIDTHS * 2 + vocab * 2)


def _unsized(name: str) -> Size:
    return Size(SMALL.ways, (f"model {name}: architecture unknown, not sized (the small allowance)",))


def largest_layer(rm) -> float:
    """The largest block the sharded load places whole (a decoder layer, the embedding table)."""
    b = weight_bytes(rm.arch, rm.formats.dtype, unquantized_fmt=rm.formats.dtype)
    return max(b.embedding_bytes, (b.total_bytes - b.embedding_bytes) / rm.arch.layers)


def shard_share(act: float, gpu_bytes: float) -> float:
    """The weights one GPU of `gpu_bytes` holds when the calibration is sharded (module docstring)."""
    return min(SHARD_FRACTION * gpu_bytes, gpu_bytes - act - CUDA_CONTEXT)


def calibration_gpus(weights: float, act: float, gpu_bytes: float, layer: float) -> int | None:
    """How many GPUs of `gpu_bytes` each calibrate `weights` with a batch of `act`: 1 where one holds
    the model, the batch and the context (the one-device load), else the sharded count, with room
    for one more `layer` (the largest), which the placement keeps free on the first GPU; None where
    a GPU that small cannot hold the batch and its context beside any weights. quantize.py decides
    its load with the same function, on the GPUs it is given."""
    if weights + act + CUDA_CONTEXT <= gpu_bytes:
        return 1
    share = shard_share(act, gpu_bytes)
    return max(2, math.ceil((weights + layer) / share)) if share > 0 else None


def gpu_memories() -> list[int]:
    """The memory of each GPU of Kiln's catalog (bytes), distinct, smallest first."""
    from compiler.catalog import load_gpu_catalog

    return sorted({g.memory_mib * MiB for g in load_gpu_catalog()})


def sharded_ways(w: float, act: float, layer: float, disk: float) -> list[Way]:
    """One way per GPU count that shards the calibration: N GPUs of at least the smallest catalog
    memory that needs only N (a GPU's memory in GiB as a builder of that GPU states it, to a tenth,
    never above it), fewest GPUs first."""
    smallest: dict[int, int] = {}
    for mem in gpu_memories():
        n = calibration_gpus(w, act, mem, layer)
        if n is not None and n > 1:
            smallest.setdefault(n, mem)
    host = gib(TORCH_HOST + EXPORT_SHARD)
    return [Way(gpus=n, gpu_mem_gib=math.floor(mem / GiB * 10) / 10, host_mem_gib=host, disk_gib=disk)
            for n, mem in sorted(smallest.items())]


def quantize_size(rm, cuda_only: bool, cal) -> Size:
    w = source_bytes(rm)
    if w is None:
        return _unsized(rm.name)
    batch, seq = (cal.batch_size, cal.max_seq_len) if cal is not None else (1, 512)
    act = calibration_bytes(rm, batch, seq)
    disk = gib(2 * w)
    gpu = Way(gpus=1, gpu_mem_gib=gib(w + act + CUDA_CONTEXT), host_mem_gib=gib(w + TORCH_HOST), disk_gib=disk)
    layer = largest_layer(rm)
    sharded = sharded_ways(w, act, layer, disk)
    offload = offload_ways(w, act, layer, disk)
    cpu = Way(gpus=0, host_mem_gib=gib(w + act + TORCH_HOST), disk_gib=disk)
    hours = cpu_hours(rm, rm.spec.quantization.calibration)
    basis = (f"source weights {gib(w):g} GiB ({rm.formats.dtype}, from the module inventory)",
             f"calibration batch {batch} x {seq} tokens: {gib(act):g} GiB (hidden {rm.arch.hidden} x "
             f"{ACTIVATION_WIDTHS} x 2 B + vocab {rm.arch.vocab} x 2 B per token; ModelOpt get_max_batch_size)",
             "one device holds the whole model (quantize.load); disk: the source and the export")
    if sharded:
        basis += (f"or N GPUs share it (device_map \"auto\"), each holding at most {SHARD_FRACTION:g} of its memory "
                  "in weights and the batch and context beside them (ModelOpt examples/llm_ptq get_model, "
                  "gpu_mem_percentage): " + ", ".join(f"{w_.gpus} x {w_.gpu_mem_gib:g} GiB" for w_ in sharded)
                  + "; host memory: torch and one export shard (the weights load straight to the GPUs)",)
    if offload:
        basis += (f"or N GPUs with what their {SHARD_FRACTION:g} shares cannot hold offloaded to host memory "
                  f"(accelerate's \"cpu\" in max_memory, as get_model does), for N in {OFFLOAD_GPUS}: host memory the "
                  f"overflow + its largest layer ({gib(layer):g} GiB) + torch and one export shard, over "
                  f"{HOST_SHARE:g} (transformers get_max_memory); e.g. {offload[0].gpu_text()}",)
    slow = hours > CPU_HOURS
    if slow and not cuda_only:
        basis += (f"no CPU way: its calibration takes at least {hours:.0f} h on the CPU ({cpu_text(rm)}), more "
                  f"than Kiln's bound of {CPU_HOURS} h",)
    ways = (gpu, *sharded, *offload) if cuda_only or slow else (gpu, *sharded, *offload, cpu)
    return Size(ways, basis)


def offload_ways(w: float, act: float, layer: float, disk: float) -> list[Way]:
    """N GPUs of each catalog memory (N of OFFLOAD_GPUS) that cannot hold the weights at their share,
    with the overflow in host memory (module docstring); least host memory first, then fewest GPUs.
    A GPU whose share cannot hold the largest layer (the one it runs the offloaded layers in) gives
    none."""
    out: dict[tuple[int, float], Way] = {}
    for mem in gpu_memories():
        need = calibration_gpus(w, act, mem, layer)
        if need is None or offload_need(w, act, mem, layer, 1) is None:
            continue
        for n in OFFLOAD_GPUS:
            if n >= need:
                continue
            spill, host = offload_need(w, act, mem, layer, n)
            way = Way(gpus=n, gpu_mem_gib=math.floor(mem / GiB * 10) / 10, host_mem_gib=gib(host), disk_gib=disk,
                      offload_gib=gib(spill))
            # two catalog memories the same to a tenth of a GiB: the smaller's need (more host memory)
            out[(n, way.gpu_mem_gib)] = max(way, out.get((n, way.gpu_mem_gib), way), key=lambda x: x.host_mem_gib)
    return sorted(out.values(), key=lambda x: (x.host_mem_gib, x.gpus, x.gpu_mem_gib))


def offload_need(w: float, act: float, gpu_bytes: float, layer: float, n: int) -> tuple[float, float] | None:
    """(weights offloaded, host memory) of calibrating `w` on `n` GPUs of `gpu_bytes` with what their
    shares cannot hold in host memory (module docstring); None where a GPU's share cannot hold the
    largest layer, which the first GPU runs each offloaded layer in. quantize.py decides its load
    with the same function, on the GPUs and the free host memory it is given."""
    share = shard_share(act, gpu_bytes)
    if share <= layer:
        return None
    spill = max(0.0, w + layer - n * share)
    return spill, (spill + layer + TORCH_HOST + EXPORT_SHARD) / HOST_SHARE


def host_share(host_bytes: float) -> int:
    """What an offloading load gives "cpu" in max_memory of `host_bytes` of free host memory: its
    HOST_SHARE, less the base the process itself takes (torch, one export shard)."""
    return int(HOST_SHARE * host_bytes - TORCH_HOST - EXPORT_SHARD)


def calibration_flops(rm, cal) -> float:
    """The forward passes of a calibration: 2 FLOP per active parameter per token (module docstring);
    0 without calibration data (the weights alone are quantized: no forward pass)."""
    if cal is None:
        return 0.0
    return 2 * estimate_params(rm.arch)[1] * cal.samples * cal.max_seq_len


def cpu_hours(rm, cal) -> float:
    """The least time a CPU calibration takes at CPU_FLOPS (hours)."""
    return calibration_flops(rm, cal) / CPU_FLOPS / 3600


def cpu_text(rm) -> str:
    cal = rm.spec.quantization.calibration
    return (f"2 x {estimate_params(rm.arch)[1] / 1e9:.1f}B active parameters x {cal.samples} samples x "
            f"{cal.max_seq_len} tokens = {calibration_flops(rm, cal):.3g} FLOP at {CPU_FLOPS / 1e9:g} GFLOP/s, the "
            f"peak of the {CPU_THREADS} threads Kiln's quantize uses")


def engine_size(rm, arch: str | None, cal) -> Size:
    w = source_bytes(rm)
    q = checkpoint_bytes(rm)
    if w is None or q is None:
        return _unsized(rm.name)
    s = model_sizing(rm)
    ranks = s.tp * s.pp
    batch, seq = (cal.batch_size, cal.max_seq_len) if cal is not None else (1, 512)
    calibrate = w / ranks + calibration_bytes(rm, batch, seq) + CUDA_CONTEXT
    rank_w = weight_bytes(rm.arch, s.weights_fmt, exclude=s.exclude, overrides=s.overrides, block_size=s.block_size,
                          unquantized_fmt=rm.formats.dtype, tp=s.tp, pp=s.pp).total_bytes
    reserve = sum(t.bytes for t in reserve_terms(rm.arch, 80 * GiB, s.max_num_tokens))
    build = rank_w + reserve
    way = Way(gpus=ranks, gpu_arch=arch, gpu_mem_gib=gib(max(calibrate, build)), host_mem_gib=gib(w + TRT_BUILDER_HOST),
              disk_gib=gib(w + 2 * q))
    basis = (f"tp {s.tp} x pp {s.pp} = {ranks} GPU(s){f' of the serving architecture ({arch})' if arch else ''}",
             f"calibration share {gib(calibrate):g} GiB per GPU (source {gib(w):g} GiB / {ranks} + batch + context)",
             f"build {gib(build):g} GiB per GPU (rank weights {gib(rank_w):g} GiB + TensorRT activation reserve for "
             f"max_num_tokens {s.max_num_tokens}: TensorRT-LLM reference/memory.md)",
             f"disk: source {gib(w):g} GiB + checkpoint and engines {gib(2 * q):g} GiB")
    return Size((way,), basis)


def image_size(models: list, label: str) -> Size:
    """An image (or its context) that carries the checkpoints of `models` (ResolvedModels)."""
    total = 0.0
    for rm in models:
        b = checkpoint_bytes(rm)
        if b is None:
            return _unsized(rm.name)
        total += b
    return Size((Way(gpus=0, host_mem_gib=gib(IMAGE_HOST), disk_gib=gib(2 * total + 0.5 * GiB)),),
                (f"{label}: weights {gib(total):g} GiB twice (the input tree and the image layer) + 0.5 GiB",))


def source_size(rm) -> Size:
    w = source_bytes(rm)
    if w is None:
        return _unsized(rm.name)
    return Size((Way(gpus=0, host_mem_gib=gib(IMAGE_HOST), disk_gib=gib(w + 0.5 * GiB)),),
                (f"source weights {gib(w):g} GiB ({rm.formats.dtype}) on disk",))


def serving_arch(ir, model: str) -> str | None:
    """The GPU architecture the model is served on (engines are built for one); None when its
    units span several or none is known."""
    archs = {ir.hosts[u.host].gpu.arch for u in ir.units
             if u.model == model and u.host in ir.hosts and ir.hosts[u.host].gpu is not None}
    return archs.pop() if len(archs) == 1 else None
