#!/usr/bin/env python3
"""Structural measures of Kiln's seams, read from the AST (tests/test_architecture.py holds them,
benchmarks/bench_seams.py prints them):

  target_comparisons   comparisons that name a deploy target (`x.deploy == "host"`,
                       `"kubernetes" in deploys`) outside compiler/targets/: each should ask the
                       target object instead
  spec_reads           reads of the parsed spec in compiler/checks/ (`ctx.spec`, `ctx.ir.spec`):
                       a check should read what the passes resolved (ctx.models(), ctx.hosts(),
                       ctx.ir.units, ...) and the span only from the document
  strings              the string constants of a file (docstrings included), with their lines
  names                the names a file defines at its top level (classes, functions, assigned
                       names) and those it imports, with their lines

    python3 scripts/seams.py      # print the target-name comparisons, the broken nevers and the
                                  # import cycles (scripts/import_cycles.py's walk), a count of each;
                                  # exit 1 if there is any
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterable, Iterator

ROOT = Path(__file__).resolve().parents[1]
TARGET_NAMES = frozenset({"host", "hosts", "kubernetes"})  # the spec's `deploy` values and the targets' names


def strings(path: Path, in_comparisons: bool = False) -> Iterator[tuple[int, str]]:
    """(line, value) of each string constant of `path`; `in_comparisons`: only the operands of a
    comparison (a constant, or an element of a tuple, list or set operand)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not in_comparisons:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.lineno, node.value
            continue
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                values = [operand] if isinstance(operand, ast.Constant) else list(getattr(operand, "elts", []))
                yield from ((node.lineno, v.value) for v in values
                            if isinstance(v, ast.Constant) and isinstance(v.value, str))


def names(path: Path, imports: bool = True) -> Iterator[tuple[int, str]]:
    """(line, name) of each name `path` defines at its top level (class, function, assigned name)
    and, with `imports`, each name it imports anywhere (a function's own imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.lineno, node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                yield from ((node.lineno, n.id) for n in ast.walk(target) if isinstance(n, ast.Name))
    for node in ast.walk(tree) if imports else ():
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((node.lineno, a.asname or a.name.split(".")[-1]) for a in node.names)


def target_comparisons(root: Path = ROOT, names: Iterable[str] = TARGET_NAMES) -> list[str]:
    """`path:line` of every comparison outside compiler/targets/ that names a deploy target."""
    names = set(names)
    found = []
    for path in sorted((root / "compiler").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith("compiler/targets/"):
            found += sorted({f"{rel}:{line}" for line, value in strings(path, in_comparisons=True) if value in names},
                            key=lambda s: int(s.rsplit(":", 1)[1]))
    return found


def spec_reads(root: Path = ROOT) -> dict[str, int]:
    """compiler/checks/ module -> how many times it reads `ctx.spec` or `ctx.ir.spec` (the AST)."""
    out = {}
    for path in sorted((root / "compiler" / "checks").glob("*.py")):
        n = 0
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "spec":
                base = node.value
                if isinstance(base, ast.Attribute) and base.attr == "ir":
                    base = base.value
                n += isinstance(base, ast.Name) and base.id == "ctx"
        if n:
            out[path.relative_to(root).as_posix()] = n
    return out


def _import_cycles():
    """scripts/import_cycles.py, the import walk (loaded by path: scripts/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("import_cycles", Path(__file__).with_name("import_cycles.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ic = _import_cycles()
    edges = ic.module_edges()
    found = target_comparisons()
    broken = ic.broken_nevers(edges)
    cycles = ic.cycles(edges) + ic.cycles(ic.import_edges())
    for place in found:
        print("target-name comparison:", place)
    for line in broken:
        print("never broken:", line)
    for component in cycles:
        print("cycle:", " <-> ".join(component))
    print(f"target-name comparisons outside compiler/targets: {len(found)}; transitive nevers broken: "
          f"{len(broken)}; cycles: {len(cycles)}")
    return 1 if found or broken or cycles else 0


if __name__ == "__main__":
    sys.exit(main())
