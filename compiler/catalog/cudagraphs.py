"""The CUDA-graph batch sizes TensorRT-LLM's PyTorch backend captures by default (data/cuda_graphs.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from compiler.resources import package_file


@dataclass(frozen=True)
class CudaGraphDefaults:
    batch_sizes: tuple[int, ...]  # ascending
    max_batch_size: int
    source: str  # repository, path and commit the sizes were read from


@lru_cache(maxsize=1)
def load_cuda_graph_defaults() -> CudaGraphDefaults:
    doc = json.loads(package_file("catalog", "data", "cuda_graphs.json").read_text(encoding="utf-8"))
    src = doc["source"]
    return CudaGraphDefaults(tuple(sorted(doc["default_batch_sizes"])), int(doc["default_max_batch_size"]),
                             f"{src['repository']} {src['path']} @ {src['commit'][:12]}")
