"""`kiln` command line: parse arguments, call the library, format output. Nothing else lives here.

One module per command group registers its subcommands (`register(sub)`); each handler takes the
parsed arguments and returns an ExitCode (exitcodes.py). Diagnostics are printed by output.py.
The library never imports this package.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Sequence

from compiler import __version__

from . import artifacts, build, catalog, lock, plan, release, render, store, tune, validate
from .errors import UsageError
from .exitcodes import ExitCode
from .readergone import guarded_output

__all__ = ["ExitCode", "UsageError", "build_parser", "main"]

# `kiln --help` lists the commands in this order.
COMMAND_MODULES = (validate, catalog, plan, render, build, artifacts, lock, tune, release, store)


class KilnParser(argparse.ArgumentParser):
    """argparse, with the one usage trap of Kiln's options explained where argparse's words mislead."""

    argv: tuple[str, ...] = ()  # what main() parses (the subcommands' parsers share it)

    def error(self, message: str):  # type: ignore[override]
        # `--gpu-profiles` takes one or two files, so argparse's greedy `nargs="+"` also takes a spec
        # written after it and then says the spec is missing
        if "required: SPEC" in message and "--gpu-profiles" in KilnParser.argv:
            message += ("; --gpu-profiles takes the files that follow it, so give SPEC before it "
                        "(kiln validate SPEC --gpu-profiles LGIP [LGIPP]) or end its files with --")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    p = KilnParser(prog="kiln", description="Declarative compiler for LLM inference deployments.")
    p.add_argument("--version", action="version", version=f"kiln {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=KilnParser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return p


_parser = build_parser  # the name tests/test_gitops_ci.py imports


def main(argv: Sequence[str] | None = None) -> ExitCode:
    parser = build_parser()
    KilnParser.argv = tuple(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help and --version
        return ExitCode.USAGE if e.code else ExitCode.OK
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    for stream in (sys.stdout, sys.stderr):  # a path from argv may hold surrogates (undecodable bytes)
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")

    with guarded_output():
        try:
            return _run(args)
        except BrokenPipeError as e:  # not through stdout/stderr's text (they go on): the command stopped
            print(f"kiln: stopped: a pipe it wrote to was closed ({e.strerror or e})", file=sys.stderr)
            return ExitCode.BROKEN_PIPE


def _run(args: argparse.Namespace) -> ExitCode:
    from compiler.diagnostics.render import shown
    from compiler.gitops.redaction import redact  # not .oci: urllib and http load only for registry commands
    from compiler.store.local import StoreError, StoreUnusable

    try:
        return args.handler(args)
    except (UsageError, StoreUnusable) as e:  # StoreUnusable: --store (or $KILN_STORE) is no store
        print(f"kiln: error: {shown(redact(str(e)))}", file=sys.stderr)
        return ExitCode.USAGE
    except StoreError as e:  # the store's own files; `kiln store verify` says more
        print(f"kiln: error: store: {shown(redact(str(e)))}", file=sys.stderr)
        return ExitCode.ERRORS
    except BrokenPipeError:
        raise  # main: the command stopped before it finished
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as e:  # never show a traceback for a bug unless asked to
        if os.environ.get("KILN_DEBUG"):
            raise
        print(f"kiln: internal error: {type(e).__name__}: {shown(redact(str(e)))}\n"
              "This is a bug in kiln; rerun with KILN_DEBUG=1 for details.", file=sys.stderr)
        return ExitCode.INTERNAL
