"""Semantic checks: one module per rule family, one class per rule (see `kiln explain CODE`)."""

from __future__ import annotations

from compiler.diagnostics import Diagnostic

from .base import Check, CheckContext

_FAMILY_MODULES: tuple[str, ...] = ("refs", "mig", "memory", "precision", "clocks", "kernels", "parallelism",
                                     "toolchain")


def all_checks() -> list[type[Check]]:
    import importlib

    for mod in _FAMILY_MODULES:
        importlib.import_module(f"{__name__}.{mod}")
    found: list[type[Check]] = []
    stack = list(Check.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "code" in cls.__dict__:
            found.append(cls)
    return sorted(found, key=lambda c: (c.order, c.code))


def run_checks(ctx: CheckContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for check in all_checks():
        out.extend(check().run(ctx))
    return out


__all__ = ["Check", "CheckContext", "all_checks", "run_checks"]
