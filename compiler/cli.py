"""`kiln` command line: parse arguments, call the library, format output. Nothing else lives here.

Exit codes: 0 success (warnings allowed), 1 the input has errors, 2 usage error, 3 internal error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from compiler import __version__

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INCOMPLETE = 4  # `kiln build`: nothing failed, but some actions were deferred (see compiler/graph/builder.py)


class UsageError(Exception):
    """Bad command-line use (exit 2)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help
        return int(e.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except UsageError as e:
        print(f"kiln: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # never show a traceback for a bug unless asked to
        if os.environ.get("KILN_DEBUG"):
            raise
        print(f"kiln: internal error: {type(e).__name__}: {e}\n"
              "This is a bug in kiln; rerun with KILN_DEBUG=1 for details.", file=sys.stderr)
        return EXIT_INTERNAL


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln", description="Declarative compiler for LLM inference deployments.")
    p.add_argument("--version", action="version", version=f"kiln {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    v = sub.add_parser("validate", help="check specs against the schema and the hardware facts")
    v.add_argument("specs", nargs="+", type=Path, metavar="SPEC")
    v.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    v.add_argument("--output", "-o", type=Path, help="write the report to this file instead of stdout")
    v.add_argument("--gpu-profiles", type=Path, metavar="FILE",
                   help="captured `nvidia-smi mig -lgip` output to validate MIG profiles against")
    v.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    v.set_defaults(handler=_cmd_validate)

    e = sub.add_parser("explain", help="print the documentation of a diagnostic code")
    e.add_argument("code", nargs="?", help="e.g. K101; without a code, list all codes")
    e.set_defaults(handler=_cmd_explain)

    s = sub.add_parser("schema", help="write the JSON Schema of the spec")
    s.add_argument("--output-dir", type=Path, default=Path("schemas"))
    s.add_argument("--check", action="store_true", help="exit 1 if the schema on disk is stale")
    s.add_argument("--stdout", action="store_true", help="print the schema instead of writing it")
    s.set_defaults(handler=_cmd_schema)

    from compiler.commands import register_more

    register_more(sub)
    return p


def _color(mode: str, stream) -> bool:
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        return
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    tmp.replace(output)


def _cmd_validate(args: argparse.Namespace) -> int:
    from compiler.diagnostics.render import render_json, render_sarif, render_text, summary_line
    from compiler.pipeline import Options, validate_path

    if args.gpu_profiles is not None and not args.gpu_profiles.is_file():
        raise UsageError(f"--gpu-profiles: no such file: {args.gpu_profiles}")
    for spec in args.specs:
        if not spec.exists():
            raise UsageError(f"no such file: {spec}")
    options = Options(gpu_profiles=args.gpu_profiles)
    diags, sources = [], {}
    for spec in args.specs:
        result = validate_path(spec, options)
        diags.extend(result.diagnostics)
        if result.document is not None:
            sources[result.file] = result.document.text
    if args.format == "json":
        emit(render_json(diags), args.output)
    elif args.format == "sarif":
        emit(render_sarif(diags, __version__), args.output)
    else:
        color = args.output is None and _color(args.color, sys.stdout)
        body = render_text(diags, sources, color=color)
        names = ", ".join(str(s) for s in args.specs)
        footer = f"{names}: {summary_line(diags)}"
        emit((body + "\n" if body else "") + footer, args.output)
    return EXIT_ERRORS if any(d.is_error for d in diags) else EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from compiler.checks import all_rules, get_rule

    if not args.code:
        for rule in all_rules():
            first = rule.doc().split("\n")[0]
            print(f"{rule.code}  {rule.severity.value:<7}  {rule.name:<34} {first}")
        return EXIT_OK
    rule = get_rule(args.code)
    if rule is None:
        raise UsageError(f"unknown diagnostic code {args.code!r}; `kiln explain` lists them")
    print(f"{rule.code} {rule.name} ({rule.severity.value}, {rule.family()})\n")
    print(rule.doc())
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    from compiler.spec.schema import SCHEMA_FILE, schema_is_current, schema_text, write_schema

    if args.stdout:
        sys.stdout.write(schema_text())
        return EXIT_OK
    if args.check:
        if schema_is_current(args.output_dir):
            print(f"{args.output_dir / SCHEMA_FILE} is up to date")
            return EXIT_OK
        print(f"{args.output_dir / SCHEMA_FILE} is stale; run `kiln schema` and commit the result", file=sys.stderr)
        return EXIT_ERRORS
    path = write_schema(args.output_dir)
    print(f"wrote {path}")
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
