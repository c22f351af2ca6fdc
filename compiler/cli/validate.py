"""`kiln validate`, `kiln explain`, `kiln schema`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import add_gpu_profiles, check_output_file, gpu_profiles
from .errors import UsageError
from .exitcodes import ExitCode
from .output import print_diagnostics, use_color


def register(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser("validate", help="check specs against the schema and the hardware facts")
    v.add_argument("specs", nargs="+", type=Path, metavar="SPEC")
    v.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    v.add_argument("--output", "-o", type=Path, help="write the report to this file instead of stdout")
    add_gpu_profiles(v)
    v.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    v.set_defaults(handler=cmd_validate)

    e = sub.add_parser("explain", help="print the documentation of a diagnostic code")
    e.add_argument("code", nargs="?", help="e.g. K101; without a code, list all codes")
    e.set_defaults(handler=cmd_explain)

    s = sub.add_parser("schema", help="write the JSON Schema of the spec")
    s.add_argument("--output-dir", type=Path, default=Path("schemas"))
    s.add_argument("--check", action="store_true", help="exit 1 if the schema or the field reference on disk is stale")
    s.add_argument("--reference", type=Path, metavar="FILE",
                   help="the field reference generated from the schema (default: docs/spec-reference.md beside "
                        "the output directory)")
    s.add_argument("--stdout", action="store_true", help="print the schema instead of writing it")
    s.set_defaults(handler=cmd_schema)


def cmd_validate(args: argparse.Namespace) -> ExitCode:
    from compiler.pipeline import Options, validate_path

    captures = gpu_profiles(args)
    check_output_file(args.output, "--output")
    for spec in args.specs:
        try:
            exists = spec.exists()
        except (OSError, ValueError) as e:  # a name longer than the filesystem allows
            raise UsageError(f"cannot use {str(spec)[:200]!r}: {getattr(e, 'strerror', None) or e}") from None
        if not exists:
            raise UsageError(f"no such file: {spec}")
    options = Options(gpu_profiles=captures)
    results = [validate_path(spec, options) for spec in args.specs]
    color = args.format == "text" and args.output is None and use_color(args.color, sys.stdout)
    print_diagnostics(results, args.format, output=args.output, color=color)
    return ExitCode.ERRORS if any(not r.ok for r in results) else ExitCode.OK


def cmd_explain(args: argparse.Namespace) -> ExitCode:
    from compiler.checks import all_rules, get_rule

    if not args.code:
        for rule in all_rules():
            first = rule.doc().split("\n")[0]
            print(f"{rule.code}  {rule.severity.value:<7}  {rule.name:<34} {first}")
        return ExitCode.OK
    rule = get_rule(args.code)
    if rule is None:
        raise UsageError(f"unknown diagnostic code {args.code!r}; `kiln explain` lists them")
    print(f"{rule.code} {rule.name} ({rule.severity.value}, {rule.family()})\n")
    print(rule.doc())
    return ExitCode.OK


def cmd_schema(args: argparse.Namespace) -> ExitCode:
    from compiler.spec.reference import REFERENCE_FILE, reference_is_current, write_reference
    from compiler.spec.schema import SCHEMA_FILE, schema_is_current, schema_text, write_schema

    if args.stdout:
        sys.stdout.write(schema_text())
        return ExitCode.OK
    # the reference sits where the repository keeps it relative to schemas/ (docs/spec-reference.md)
    reference = args.reference if args.reference is not None else args.output_dir.parent / REFERENCE_FILE
    try:
        if args.check:
            stale = [p for p, current in ((args.output_dir / SCHEMA_FILE, schema_is_current(args.output_dir)),
                                          (reference, reference_is_current(reference))) if not current]
            if not stale:
                print(f"{args.output_dir / SCHEMA_FILE} and {reference} are up to date")
                return ExitCode.OK
            for path in stale:
                print(f"{path} is stale; run `kiln schema` and commit the result", file=sys.stderr)
            return ExitCode.ERRORS
        path = write_schema(args.output_dir)
        ref = write_reference(reference)
    except OSError as e:  # --output-dir is a file, or a name the filesystem does not take
        where = e.filename if getattr(e, "filename", None) else args.output_dir
        raise UsageError(f"{str(where)[:200]}: {e.strerror or e}") from None
    print(f"wrote {path} and {ref}")
    return ExitCode.OK
