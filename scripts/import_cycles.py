#!/usr/bin/env python3
"""Print the import cycles between Kiln's packages and between its modules, or nothing.

Every `import` statement counts, also one inside a function: a lazy import hides a dependency from
the reader but not from this script. Only an import under `if TYPE_CHECKING:` does not: it never
runs, annotations alone name what it imports. Importing `a.b.c` runs `a` and `a.b` first, so a
module also depends on the packages above what it imports.

A package here is the first level below `compiler` (compiler.graph, compiler.ir, a top-level module
such as compiler.build), except what the deploy targets build: each module or package under
compiler/targets/ (a target's action kinds and emitters, compiler.targets.<name>; the build's kind
registry, compiler.targets.registry; the disruption record, compiler.targets.disruption) is a package
of its own, since the action kinds read the record and the registry reads the action kinds. The
target objects the IR and the checks ask are compiler.deploy, a package like any other.

What a package never reaches, through any chain of imports (NEVERS), is checked on the same walk.

    python3 scripts/import_cycles.py            # exit 1 and list the cycles and broken nevers, if any
    python3 scripts/import_cycles.py --edges    # also print which package imports which
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILT = "compiler.targets"  # what the deploy targets build: one package per module or package below it


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3] if module.startswith(BUILT + ".") else parts[:2])


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """The import statements that run, at any depth (a function's included), none under TYPE_CHECKING."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(n for n in ast.iter_child_nodes(node) if not _type_checking(n))


def module_edges(root: Path = ROOT, top: str = "compiler") -> dict[str, set[str]]:
    """Module -> the modules of `top` its import statements run (parent packages included)."""
    edges: dict[str, set[str]] = {}
    for path in sorted((root / top).rglob("*.py")):
        module = _module_name(path, root)
        is_package = path.name == "__init__.py"
        out = edges.setdefault(module, set())
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
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
                parts = target.split(".")
                for i in range(2, len(parts) + 1):  # a.b.c runs a.b first (`compiler` itself is metadata)
                    name = ".".join(parts[:i])
                    # a package is set up before its modules run: importing it from one of them is no edge
                    if parts[0] == top and not (module + ".").startswith(name + ".") and _is_module(root, name):
                        out.add(name)
    return edges


def import_edges(root: Path = ROOT, top: str = "compiler") -> dict[str, set[str]]:
    """Package -> the other packages it imports (each an edge of the dependency graph)."""
    edges: dict[str, set[str]] = {}
    for module, targets in module_edges(root, top).items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a != b:
                edges.setdefault(a, set()).add(b)
    return edges


def reach(edges: dict[str, set[str]], start: set[str]) -> set[str]:
    """Every module the modules `start` import, directly or through others (not `start` itself)."""
    seen: set[str] = set()
    todo = [w for v in start for w in edges.get(v, ())]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(edges.get(v, ()))
    return seen - start


# What a package never reaches through any chain of imports (module by module, a function's own
# imports and the packages above what is imported included): (package, what it never reaches, why).
RENDERERS = ("compiler.serving.triton", "compiler.serving.yamlout")  # they write a repository's files
BUILDS = ("compiler.actions", "compiler.targets", "compiler.lower", "compiler.build", "compiler.gitops",
          "compiler.cli", "compiler.release", "compiler.pipeline")
EMITTERS = ("compiler.targets.hosts", "compiler.targets.kubernetes", "compiler.targets.registry")
NEVERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("compiler.checks", (*BUILDS, *RENDERERS, "compiler.graph"), "checking never emits or builds"),
    ("compiler.graph", ("compiler.actions", "compiler.targets", "compiler.cli"),
     "the executor knows no kind, target or terminal"),
    ("compiler.capacity", ("compiler.ir", "compiler.checks"), "capacity computes from facts"),
    ("compiler.catalog", ("compiler.ir", "compiler.spec"), "the catalog knows no spec"),
    ("compiler.store", ("compiler.actions", "compiler.targets"), "the store knows bytes"),
    ("compiler.runtimes", ("compiler.actions", "compiler.targets", *RENDERERS, "compiler.graph"),
     "a runtime knows no target or action kind"),
    # the target objects are what the spec, the IR and the checks ask: asking them pulls in nothing
    ("compiler.deploy", ("compiler",), "a target's object imports nothing of the compiler"),
    *((package, BUILDS, "the analysis asks a target's object, never what a target builds")
      for package in ("compiler.spec", "compiler.diagnostics", "compiler.ir")),
    ("compiler.actions", EMITTERS, "a common kind knows no target's kinds"),
)


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def broken_nevers(edges: dict[str, set[str]], nevers=NEVERS) -> list[str]:
    """One line per module of a package that reaches what its package never may."""
    found = []
    for package, never, why in nevers:
        for module in sorted(m for m in edges if within(m, (package,))):
            bad = sorted(m for m in reach(edges, {module}) if within(m, never) and not within(m, (package,)))
            if bad:
                found.append(f"{module} reaches {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} ({why})")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
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
    # a module cycle inside one package works only while the order of the imports allows it
    between_modules = cycles(module_edges())
    for component in between_modules:
        print("module import cycle: " + " <-> ".join(component))
    broken = broken_nevers(module_edges())
    for line in broken:
        print("never broken: " + line)
    return 1 if found or between_modules or broken else 0


if __name__ == "__main__":
    sys.exit(main())
