"""--builders and --as: the builders file (compiler/machines.py) a command places actions with."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import require_file
from .errors import UsageError
from .output import print_diagnostics

BUILDERS_HELP = ("a builders file: the classes of machines (CI runners) that build the spec's actions, with their "
                 "GPUs, memory, disk and software (default: $KILN_BUILDERS)")


def add_builders(parser, as_class: bool = False) -> None:
    parser.add_argument("--builders", type=Path, metavar="FILE", help=BUILDERS_HELP)
    if as_class:
        parser.add_argument("--as", dest="builder_class", metavar="CLASS",
                            help="build as this class of the builders file: what it holds runs, the rest is "
                                 "deferred (default: $KILN_BUILDER_CLASS; without one, this machine is probed)")


def declared_builders(args):
    """The builders file of --builders or $KILN_BUILDERS (compiler/machines.py), or None. A
    file Kiln cannot read is printed with its diagnostics and is a usage error."""
    from compiler.machines import load_builders

    path = getattr(args, "builders", None) or (Path(os.environ["KILN_BUILDERS"]) if os.environ.get("KILN_BUILDERS")
                                               else None)
    if path is None:
        return None
    require_file(path)
    builders = load_builders(path)
    if builders.diagnostics:
        print_diagnostics([builders], stream=sys.stderr)
        raise UsageError(f"{path}: not a builders file Kiln can use (see above)")
    return builders


def declared_builder(args):
    """The Builder of --as CLASS (or $KILN_BUILDER_CLASS) in the builders file; None without one.
    Its software is the class's unless $KILN_BUILDER_HAS pins it."""
    from compiler.graph.builder import ENV_FIXED, Builder

    name = getattr(args, "builder_class", None) or os.environ.get("KILN_BUILDER_CLASS") or None
    if name is None:
        return None
    builders = declared_builders(args)
    if builders is None:
        raise UsageError(f"builder class {name!r} needs a builders file (--builders or $KILN_BUILDERS)")
    machine = builders.get(name)
    if machine is None:
        raise UsageError(f"{builders.file} declares no builder class {name!r}; it declares "
                         + ", ".join(m.name for m in builders.machines))
    if os.environ.get(ENV_FIXED) is not None:
        return Builder(machine=machine)
    return Builder(fixed=machine.has, machine=machine)
