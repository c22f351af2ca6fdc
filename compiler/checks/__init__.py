"""Semantic checks: one module per rule family, one class per rule (see `kiln explain CODE`)."""

from __future__ import annotations

import importlib

from compiler.diagnostics import Diagnostic, Rule, registered_rules

from .base import Check, CheckContext

_FAMILY_MODULES: tuple[str, ...] = ("refs", "mig", "memory", "precision", "clocks", "kernels", "parallelism",
                                     "toolchain", "kubernetes", "disaggregated", "builders", "measured")


def _load() -> None:
    for mod in _FAMILY_MODULES:
        importlib.import_module(f"{__name__}.{mod}")


def all_checks() -> list[type[Check]]:
    _load()
    found: list[type[Check]] = []
    stack = list(Check.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "code" in cls.__dict__:
            found.append(cls)
    return sorted(found, key=lambda c: (c.order, c.code))


def all_rules() -> list[type[Rule]]:
    """Every diagnostic code Kiln can raise: the loader's and parser's (compiler.spec.rules),
    resolution's (compiler.ir.resolve) and the checks'."""
    import compiler.ir.resolve  # noqa: F401  (registers K901-K903, K910)
    import compiler.spec.rules  # noqa: F401

    _load()
    return registered_rules()


def get_rule(code: str) -> type[Rule] | None:
    return {r.code: r for r in all_rules()}.get(code.upper())


def run_checks(ctx: CheckContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for check in all_checks():
        out.extend(check().run(ctx))
    return out


__all__ = ["Check", "CheckContext", "all_checks", "all_rules", "get_rule", "run_checks"]
