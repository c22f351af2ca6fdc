"""Argument checks and option texts shared by several commands."""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError

STORE_HELP = "store directory (default: $KILN_STORE or .kiln/store)"
GPU_PROFILES_HELP = ("captured `nvidia-smi mig -lgip` output (and `-lgipp`, in the same file or a second one) of "
                     "one GPU model; its hosts are validated against it instead of the catalog. Repeat the option "
                     "for each GPU model")


def add_gpu_profiles(parser) -> None:
    parser.add_argument("--gpu-profiles", type=Path, nargs="+", action="append", default=[], metavar="FILE",
                        help=GPU_PROFILES_HELP)


def gpu_profiles(args) -> tuple[tuple[Path, ...], ...]:
    """The captures given with --gpu-profiles (each one or two files), checked to exist."""
    captures = []
    for files in args.gpu_profiles:
        if len(files) > 2:
            raise UsageError("--gpu-profiles takes one or two files (-lgip, then -lgipp) per GPU model; "
                             "repeat the option for another GPU model")
        for f in files:
            if not f.is_file():
                raise UsageError(f"--gpu-profiles: no such file: {f}")
        captures.append(tuple(files))
    return tuple(captures)


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
