"""Argument checks and option texts shared by several commands."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from .errors import UsageError

STORE_HELP = ("store directory (default: $KILN_STORE, else .kiln/store at the root of the git work tree holding "
              "the spec, or beside the spec outside git)")
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
            try:
                found = f.is_file()
            except (OSError, ValueError) as e:  # a name longer than the filesystem allows
                raise UsageError(f"--gpu-profiles: cannot use {str(f)[:200]!r}: "
                                 f"{getattr(e, 'strerror', None) or e}") from None
            if not found:
                raise UsageError(f"--gpu-profiles: no such file: {f}")
        captures.append(tuple(files))
    return tuple(captures)


def require_file(spec: Path) -> None:
    try:
        if spec.is_file():
            return
    except (OSError, ValueError) as e:  # a name longer than the filesystem allows, a NUL byte
        raise UsageError(f"cannot use {str(spec)[:200]!r}: {getattr(e, 'strerror', None) or e}") from None
    raise UsageError(f"no such file: {spec}")


def check_output_file(path: Path | None, option: str) -> None:
    """Refuse, before any work, an output file that cannot be written: a directory, a file where
    its directory should be, a name the filesystem does not take."""
    if path is None:
        return
    try:
        if path.is_dir():
            raise UsageError(f"{option} {path}: is a directory; give a file name")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise UsageError(f"{option} {path}: {parent} is not a directory")
                break
        os.stat(path.parent if path.parent.exists() else "/")  # raises for a name too long to use
        if len(os.fsencode(path.name)) > 255:
            raise UsageError(f"{option} {str(path)[:200]}...: the file name is longer than the filesystem allows")
    except OSError as e:
        raise UsageError(f"{option} {str(path)[:200]}: {e.strerror or e}") from None


def write_output(path: Path, data: bytes, option: str) -> None:
    """Write `data` to a temporary file next to `path` and rename it over `path` (never half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UsageError(f"{option} {path}: cannot write it: {e.strerror or e}") from None


def remote_cache(target: str, store):
    """The registry cache named by --cache (compiler/gitops/cache.py); a bad reference is a usage error."""
    from compiler.gitops.cache import CacheSpecError, remote_for

    try:
        return remote_for(target, store)
    except CacheSpecError as e:
        raise UsageError(f"--cache: {e}") from None


def store_path(explicit: Path | None, spec: Path | None = None) -> Path:
    """The store a command uses (compiler.build.store_dir). When that is the default at the root of
    the spec's project and the current directory holds another store (where Kiln looked before it
    followed the spec's repository), says which one is used and how to use the other."""
    from compiler.build import DEFAULT_STORE, store_dir

    path = store_dir(explicit, spec)
    if explicit is None and not os.environ.get("KILN_STORE") and path != DEFAULT_STORE:
        try:
            here = (DEFAULT_STORE / "objects").is_dir()
        except OSError:
            here = False
        if here:
            print(f"kiln: note: using the store at {path} (the root of the spec's project), not the one in this "
                  f"directory ({DEFAULT_STORE}); pass --store {DEFAULT_STORE} to use that one", file=sys.stderr)
    return path
