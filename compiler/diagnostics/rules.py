"""Rule registry: every diagnostic code is a class whose docstring `kiln explain` prints.

Codes are stable and grouped by family (the first digit):
K0xx YAML, K1xx spec structure, K2xx MIG, K3xx precision x architecture, K4xx memory and capacity,
K5xx clocks and power, K6xx kernels and runtime, K7xx parallelism, K8xx toolchain, K9xx references.

Every first digit is taken, so the rules that exist only for the Kubernetes target (hosts with
`deploy: kubernetes`) take the tens digit 5 of the family they belong to: Kx5x (K151 spec
structure, K25x MIG, K75x parallelism, K85x toolchain, K95x names). No other rule uses a tens
digit 5 (KUBERNETES_TENS); they live in compiler/checks/kubernetes.py. The rules of
disaggregated prefill/decode serving take the tens digit 6 the same way (K16x, K46x, K66x, K86x;
DISAGGREGATED_TENS, compiler/checks/disaggregated.py).
"""

from __future__ import annotations

import inspect
from typing import ClassVar

from .model import Severity

FAMILIES: dict[str, str] = {
    "K0": "YAML",
    "K1": "spec structure",
    "K2": "MIG",
    "K3": "precision x architecture",
    "K4": "memory and capacity",
    "K5": "clocks and power",
    "K6": "kernels and runtime",
    "K7": "parallelism",
    "K8": "toolchain",
    "K9": "references and names",
}

KUBERNETES_TENS = "5"  # Kx5x: the Kubernetes target's rules, in the family they belong to
DISAGGREGATED_TENS = "6"  # Kx6x: disaggregated prefill/decode serving's rules

_REGISTRY: dict[str, type["Rule"]] = {}


class Rule:
    """Base of every rule. Subclasses set `code`, `name` and `severity`; the docstring is the doc."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = Severity.ERROR

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("code")
        if code is None:  # abstract intermediate class
            return
        if code in _REGISTRY and _REGISTRY[code] is not cls:
            raise RuntimeError(f"diagnostic code {code} registered twice")
        _REGISTRY[code] = cls

    @classmethod
    def family(cls) -> str:
        family = FAMILIES.get(cls.code[:2], "other")
        if cls.code[2:3] == KUBERNETES_TENS:
            return f"{family} (Kubernetes target)"
        return f"{family} (disaggregated serving)" if cls.code[2:3] == DISAGGREGATED_TENS else family

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")


def registered_rules() -> list[type[Rule]]:
    """The rules whose modules have been imported, by code (compiler.checks.all_rules imports them all)."""
    return [_REGISTRY[c] for c in sorted(_REGISTRY)]


def registered_rule(code: str) -> type[Rule] | None:
    """The rule of a code whose module is imported (every code a diagnostic carries is)."""
    return _REGISTRY.get(code.upper())
