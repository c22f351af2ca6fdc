"""Argument checks and option texts shared by several commands."""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError

STORE_HELP = "store directory (default: $KILN_STORE or .kiln/store)"
GPU_PROFILES_HELP = "captured `nvidia-smi mig -lgip` output to validate MIG profiles against"


def require_file(spec: Path) -> None:
    if not spec.is_file():
        raise UsageError(f"no such file: {spec}")


def remote_cache(target: str, store):
    """The registry cache named by --cache (compiler/gitops/cache.py); a bad reference is a usage error."""
    from compiler.gitops.cache import CacheSpecError, remote_for

    try:
        return remote_for(target, store)
    except CacheSpecError as e:
        raise UsageError(f"--cache: {e}") from None
