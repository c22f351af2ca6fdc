#!/usr/bin/env python3
"""Print the import cycles between Kiln's packages (compiler.<package>), or nothing.

A package here is the first level below `compiler` (compiler.graph, compiler.ir, a top-level
module such as compiler.build). Every `import` statement counts, also one inside a function:
a lazy import hides a dependency from the reader but not from this script.

    python3 scripts/import_cycles.py            # exit 1 and list the cycles, if there are any
    python3 scripts/import_cycles.py --edges    # also print which package imports which
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def import_edges(root: Path = ROOT, top: str = "compiler") -> dict[str, set[str]]:
    """Package -> the other packages it imports (each an edge of the dependency graph)."""
    edges: dict[str, set[str]] = {}
    for path in sorted((root / top).rglob("*.py")):
        module = _module_name(path, root)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    targets = [".".join(base + ([node.module] if node.module else []))]
                elif node.module:
                    targets = [node.module]
                # `from compiler import resources` imports a module; `from compiler import __version__` does not
                targets += [f"{t}.{a.name}" for t in list(targets) for a in node.names
                            if _is_module(root, f"{t}.{a.name}")]
            for target in targets:
                if target == top or not target.startswith(top + "."):
                    continue  # `from compiler import __version__` is the package's own metadata
                a, b = _package(module), _package(target)
                if a != b:
                    edges.setdefault(a, set()).add(b)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", action="store_true", help="print the package dependency graph too")
    args = parser.parse_args(argv)
    edges = import_edges()
    if args.edges:
        for package in sorted(edges):
            print(f"{package} -> {', '.join(sorted(edges[package]))}")
    found = cycles(edges)
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
