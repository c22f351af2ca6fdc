"""`kiln store verify` and `kiln store gc`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import store_path
from .errors import UsageError

STORE_NO_SPEC_HELP = ("store directory (default: $KILN_STORE, else .kiln/store at the root of the git work tree "
                      "holding the current directory, or in the current directory outside git)")
from .exitcodes import ExitCode


def register(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser("store", help="inspect and maintain the artifact store")
    st_sub = st.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    v = st_sub.add_parser("verify", help="check every object, record and release in the store")
    v.add_argument("--store", type=Path, help=STORE_NO_SPEC_HELP)
    v.add_argument("--repair", action="store_true",
                   help="remove corrupt objects and files, and the records that need them; the next build "
                        "rebuilds them")
    v.set_defaults(handler=cmd_store_verify)
    g = st_sub.add_parser("gc", help="remove what the last N releases of each spec do not reference")
    g.add_argument("--store", type=Path, help=STORE_NO_SPEC_HELP)
    g.add_argument("--keep", type=int, default=5, help="releases to keep per spec (default 5)")
    g.set_defaults(handler=cmd_store_gc)


def cmd_store_verify(args: argparse.Namespace) -> ExitCode:
    from compiler.build import open_store
    from compiler.store.maintenance import verify

    store = open_store(store_path(args.store), create=False)
    problems = verify(store, repair=args.repair)
    for p in problems:
        print(f"store: {p}")
    if args.repair and problems:
        print(f"{store.root}: removed what was corrupt; the next build rebuilds it")
        return ExitCode.ERRORS
    print(f"{store.root}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return ExitCode.ERRORS if problems else ExitCode.OK


def cmd_store_gc(args: argparse.Namespace) -> ExitCode:
    from compiler.build import open_store
    from compiler.store.maintenance import gc

    if args.keep < 1:
        raise UsageError("--keep must be at least 1")
    store = open_store(store_path(args.store), create=False)
    stats = gc(store, args.keep)
    for problem in stats.problems:  # entries Kiln did not write (a link from a restored cache...)
        print(f"store: {problem}")
    print(f"{store.root}: kept {stats.kept_releases} release(s); removed {stats.removed_actions} action(s), "
          f"{stats.removed_objects} object(s), {stats.removed_tmp} temporary file(s)")
    if stats.problems:
        print(f"{store.root}: {len(stats.problems)} entr{'y' if len(stats.problems) == 1 else 'ies'} Kiln did not "
              "write (above); `kiln store verify` checks the rest")
        return ExitCode.ERRORS
    return ExitCode.OK
