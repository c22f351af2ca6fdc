"""Storage cost of weight and KV-cache formats, read from the format table.

The figures are the table's (compiler/catalog/data/formats.json, `weights` and `kv_cache`, each with
its source): bytes per element = bits / 8 plus the block scales amortised over their block. One-off
per-tensor scales (a single FP32 per tensor) are left out: they are negligible next to the tensor.
"""

from __future__ import annotations

from compiler.catalog.formats import WeightFormat, load_format_table


def weight_format(fmt: str) -> WeightFormat:
    return load_format_table().weight(fmt)


def bytes_per_param(fmt: str, block_size: int | None = None) -> float:
    """Bytes per stored weight element, block scales included.

    `block_size` overrides the format's default block (group size, or tile edge for fp8_block).
    """
    if block_size is not None and block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    return weight_format(fmt).bytes_per_param(block_size)


def kv_bytes_per_element(fmt: str) -> float:
    """KV-cache bytes per element; "auto" is the model dtype (BF16 for every catalog model)."""
    return load_format_table().kv(fmt).bytes_per_element
