"""Storage cost of weight and KV-cache formats.

The figures come from the shared model reference (models.md section 5 and the format table there);
each row names its source. A row is storage only: bytes per element = bits / 8 plus the block
scales amortised over their block. One-off per-tensor scales (a single FP32 per tensor) are left
out because they are negligible next to the tensor itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bits: int  # bits per stored element
    block: int | None  # default block (group) size; None = no per-block scale counted
    block_ndim: int  # 1 = a group of `block` elements, 2 = a block x block tile
    scale_bytes: float  # bytes per block scale
    source: str

    def elements_per_block(self, block: int) -> int:
        return block**self.block_ndim


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("bf16", 16, None, 1, 0, "models.md s5: BF16/FP16 2.0 B/param"),
        WeightFormat("fp16", 16, None, 1, 0, "models.md s5: BF16/FP16 2.0 B/param"),
        WeightFormat("fp8", 8, None, 1, 0, "models.md s5: FP8 per-tensor 1.0 B/param (+ one FP32 per tensor)"),
        # 128x128 tiles with an FP32 scale each (SM90 recipe): 4 B / 16384 elements.
        WeightFormat("fp8_block", 8, 128, 2, 4, "models.md s5: TRT-LLM FP8 block scaling; FP32 scale per 128x128 tile"),
        # One FP32 scale per output row; the row length is a tensor shape, not a format fact, so it is
        # only counted when the caller passes block_size = row length (<= 0.14% for rows >= 2880).
        WeightFormat("fp8_rowwise", 8, None, 1, 4, "models.md s5: TRT-LLM FP8 rowwise; FP32 scale per row"),
        WeightFormat("mxfp8", 8, 32, 1, 1, "models.md s5 table: MXFP8 E4M3 + E8M0 per 32 = 8.25 bits"),
        WeightFormat("nvfp4", 4, 16, 1, 1, "models.md s5 table: NVFP4 E2M1 + E4M3 per 16 = 4.5 bits (+FP32 per tensor)"),
        WeightFormat("mxfp4", 4, 32, 1, 1, "models.md s5 table: MXFP4 E2M1 + E8M0 per 32 = 4.25 bits"),
        # Per-channel FP16 scale: same caveat as fp8_rowwise.
        WeightFormat("int8", 8, None, 1, 2, "models.md s5: TRT-LLM INT8 weight-only, FP16 scale per channel"),
        # One FP16 scale per group; GPTQ zero points (4 bits per group, ~0.4%) are not counted.
        WeightFormat("int4_awq", 4, 128, 1, 2, "models.md s5: TRT-LLM W4A16 AWQ, FP16 scale per group of 128"),
        WeightFormat("int4_gptq", 4, 128, 1, 2, "models.md s5: TRT-LLM W4A16 GPTQ, FP16 scale per group of 128"),
    )
}

#: KV-cache bytes per element. "auto" is the model dtype, BF16 for every catalog model.
#: NVFP4 KV: 4-bit values + one E4M3 scale per 16 (same layout as NVFP4 weights).
KV_BYTES_PER_ELEMENT: dict[str, float] = {
    "auto": 2.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "nvfp4": 0.5 + 1 / 16,
}


def weight_format(fmt: str) -> WeightFormat:
    try:
        return WEIGHT_FORMATS[fmt.lower()]
    except KeyError:
        raise ValueError(f"unknown weight format {fmt!r}; known: {', '.join(WEIGHT_FORMATS)}") from None


def bytes_per_param(fmt: str, block_size: int | None = None) -> float:
    """Bytes per stored weight element, block scales included.

    `block_size` overrides the format's default block (group size, or tile edge for fp8_block).
    """
    f = weight_format(fmt)
    block = block_size if block_size is not None else f.block
    if block is not None and block <= 0:
        raise ValueError(f"block_size must be positive, got {block}")
    scale = f.scale_bytes / f.elements_per_block(block) if block else 0.0
    return f.bits / 8 + scale


def kv_bytes_per_element(fmt: str) -> float:
    try:
        return KV_BYTES_PER_ELEMENT[fmt.lower()]
    except KeyError:
        known = ", ".join(KV_BYTES_PER_ELEMENT)
        raise ValueError(f"unknown KV-cache format {fmt!r}; known: {known}") from None
