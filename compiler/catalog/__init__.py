"""Hardware and model facts: typed catalogs loaded from the packaged JSON, plus capture/config readers."""

from .gpus import GpuCatalog, gpu_from_lgip, load_gpu_catalog
from .lgip import LgipParseError, LgipProfile, LgippPlacement, parse_lgip, parse_lgipp, profiles_from_lgip
from .models import (ConfigError, ModelCatalog, arch_from_hf_config, estimate_params, kv_elems_per_token,
                     load_model_catalog)
from .types import WEAK_STATUSES, GpuSpec, MigGeometry, MigProfile, MlaDims, ModelArch, Status

__all__ = [
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
    "arch_from_hf_config",
    "estimate_params",
    "gpu_from_lgip",
    "kv_elems_per_token",
    "load_gpu_catalog",
    "load_model_catalog",
    "parse_lgip",
    "parse_lgipp",
    "profiles_from_lgip",
]
