"""`kiln export` (a release's artifacts to a directory) and `kiln show` (one artifact's file, or its
file list): getting what `kiln build` produced out of the store (compiler/releases.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import STORE_HELP, store_path
from .errors import UsageError
from .exitcodes import ExitCode
from .output import print_diagnostics

RELEASE_HELP = "a spec file (its last build in the store) or a release manifest digest (sha256:...)"


def register(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("export", help="write a release's artifacts to a directory (one directory per artifact)")
    e.add_argument("release", metavar="SPEC|DIGEST", help=RELEASE_HELP)
    e.add_argument("--to", type=Path, required=True, metavar="DIR",
                   help="target directory: DIR/<artifact id>/... and DIR/release.json (existing files are replaced)")
    e.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="export only the artifacts whose id or kind matches, e.g. 'host-script/*'; repeatable")
    e.add_argument("--store", type=Path, help=STORE_HELP)
    e.add_argument("--allow-partial", action="store_true",
                   help="exit 0 when selected artifacts are still pending (a partial build's release): they are "
                        "listed and left out either way; without it the exit code is 4")
    e.set_defaults(handler=cmd_export)

    s = sub.add_parser("show", help="print one file of a release's artifact (or list the artifact's files)")
    s.add_argument("release", metavar="SPEC|DIGEST", help=RELEASE_HELP)
    s.add_argument("path", metavar="ARTIFACT[/PATH]",
                   help="e.g. host-script/dev-h100/provision.sh; an artifact id alone lists its files")
    s.add_argument("--store", type=Path, help=STORE_HELP)
    s.set_defaults(handler=cmd_show)


def _existing_store(explicit: Path | None, release: str):
    from compiler.build import open_store

    spec = None if release.startswith("sha256:") else Path(release)  # a spec: the store of its project
    path = store_path(explicit, spec)
    if not (path / "objects").is_dir():
        raise UsageError(f"no store at {path} (build first, or pass --store)")
    return open_store(path)


def _release(args: argparse.Namespace):
    """(store, release), or (store, None) after printing the spec's diagnostics."""
    from compiler.releases import ReleaseError, find_release

    store = _existing_store(args.store, args.release)
    try:
        validation, release = find_release(store, args.release)
    except ReleaseError as e:
        raise UsageError(str(e)) from None
    if release is None:
        print_diagnostics([validation], stream=sys.stderr, suffix="; no release to read")
    return store, release


def cmd_export(args: argparse.Namespace) -> ExitCode:
    from compiler.releases import ReleaseError, export_release
    from compiler.store.local import StoreError

    store, release = _release(args)
    if release is None:
        return ExitCode.ERRORS
    try:
        written, pending = export_release(store, release, args.to, tuple(args.only))
    except ReleaseError as e:
        raise UsageError(str(e)) from None
    except StoreError as e:
        print(f"kiln: error: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    for artifact, files in written:
        print(f"{args.to / artifact.id}/  {artifact.kind}, {files} file(s)")
    for artifact in pending:
        print(f"pending: {artifact.id} ({artifact.pending}); not exported", file=sys.stderr)
    print(f"exported {len(written)} artifact(s) of release {release.digest} to {args.to}/ "
          f"(manifest: {args.to / 'release.json'})" + (f"; {len(pending)} pending, not exported" if pending else ""))
    return ExitCode.INCOMPLETE if pending and not args.allow_partial else ExitCode.OK


def cmd_show(args: argparse.Namespace) -> ExitCode:
    from compiler.releases import ReleaseError, locate
    from compiler.store.export import copy_verified, find_entry
    from compiler.store.local import StoreError

    store, release = _release(args)
    if release is None:
        return ExitCode.ERRORS
    try:
        artifact, path = locate(release, args.path.strip("/"))
    except ReleaseError as e:
        raise UsageError(str(e)) from None
    if artifact.tree is None:
        print(f"kiln: error: {artifact.id} is pending ({artifact.pending}): it was not built", file=sys.stderr)
        return ExitCode.ERRORS
    try:
        if not path:
            for e in store.tree(artifact.tree):
                print(f"{'rwxr-xr-x' if e.executable else 'rw-r--r--'} {e.size:>12} {artifact.id}/{e.path}")
            return ExitCode.OK
        entry = find_entry(store, artifact.tree, path)
        if entry is None:
            raise UsageError(f"{artifact.id} has no file {path!r} "
                             f"(`kiln show {args.release} {artifact.id}` lists them)")
        sys.stdout.flush()
        copy_verified(store, entry, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    except StoreError as e:
        print(f"kiln: error: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    return ExitCode.OK
