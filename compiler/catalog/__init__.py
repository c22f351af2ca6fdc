"""Hardware and model facts: typed catalogs loaded from the packaged JSON, plus capture/config readers."""

from .capture import (CAPTURE_SOURCE_PREFIX, Capture, CaptureMismatchError, capture_sources, gpu_with_capture,
                      identify, read_capture)
from .gpus import GpuCatalog, Variant, gpu_from_lgip, load_gpu_catalog
from .lgip import LgipParseError, LgipProfile, LgippPlacement, parse_lgip, parse_lgipp, profiles_from_lgip
from .models import (ConfigError, ModelCatalog, arch_from_hf_config, estimate_params, kv_elems_per_token,
                     load_model_catalog)
from .types import WEAK_STATUSES, GpuSpec, MigGeometry, MigProfile, MlaDims, ModelArch, Status

__all__ = [
    "CAPTURE_SOURCE_PREFIX",
    "Capture",
    "CaptureMismatchError",
    "ConfigError",
    "GpuCatalog",
    "GpuSpec",
    "LgipParseError",
    "LgipProfile",
    "LgippPlacement",
    "MigGeometry",
    "MigProfile",
    "MlaDims",
    "ModelArch",
    "ModelCatalog",
    "Status",
    "WEAK_STATUSES",
    "Variant",
    "arch_from_hf_config",
    "capture_sources",
    "estimate_params",
    "gpu_from_lgip",
    "gpu_with_capture",
    "identify",
    "kv_elems_per_token",
    "load_gpu_catalog",
    "load_model_catalog",
    "parse_lgip",
    "parse_lgipp",
    "profiles_from_lgip",
    "read_capture",
]
