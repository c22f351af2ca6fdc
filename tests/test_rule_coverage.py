"""Every diagnostic code is exercised, and the rules that the catalog cannot trigger are tested directly."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compiler.catalog import load_gpu_catalog
from compiler.checks.base import CheckContext
from compiler.checks.mig import MigUnsupported
from compiler.checks import all_rules, get_rule
from compiler.pipeline import validate_path

from .expectations import case_files, parse_expectations

CASES = Path(__file__).parent / "cases"
# Faults of bytes and files, not of text: tests/test_loader.py covers them.
NOT_A_TEXT_CASE = {"K008", "K009", "K010"}
# No GPU in the catalog lacks MIG; tested below with a catalog entry that has it switched off.
UNREACHABLE_FROM_CATALOG = {"K201"}
# Needs two revisions (`kiln plan --base`): tests/test_k8s_fleet.py, K955, K956 and K954 tests/test_k8s_rollout_plan.py,
# K850 tests/test_k8s_grove.py;
# or a builders file (K405, K406: `kiln plan --builders`, tests/test_sizing.py).
PLAN_TIME = {"K450", "K850", "K855", "K858", "K859", "K955", "K956", "K954", "K405", "K406"}
# Notes (a case pins errors and warnings): K917, a measurement record before `inputs`, tests/test_tune_records.py.
NOTES = {"K917"}
# Retired: registered for `kiln explain`, raised by nothing (tests/test_disaggregated.py builds what it refused).
RETIRED = {"K164", "K860"}  # registered so `kiln explain` answers; raised by nothing


def test_every_rule_has_a_case() -> None:
    covered: set[str] = set()
    for case in case_files(CASES):
        covered |= {e.code for e in parse_expectations(case.read_text(encoding="utf-8"))}
    codes = {r.code for r in all_rules()}
    assert codes - covered - NOT_A_TEXT_CASE - UNREACHABLE_FROM_CATALOG - PLAN_TIME - NOTES - RETIRED == set()


def test_every_rule_is_documented() -> None:
    for rule in all_rules():
        assert rule.doc(), f"{rule.code} has no documentation for `kiln explain`"
        assert get_rule(rule.code.lower()) is rule


def test_mig_on_a_gpu_without_mig_is_an_error() -> None:
    example = Path(__file__).parents[1] / "examples" / "quickstart" / "kiln.yaml"
    result = validate_path(example)
    assert result.ok
    host = result.resolved.hosts["dev-h100"]
    no_mig = dataclasses.replace(host.gpu, mig=dataclasses.replace(host.gpu.mig, supported=False))
    resolved = dataclasses.replace(result.resolved, hosts={"dev-h100": dataclasses.replace(host, gpu=no_mig)})
    ctx = CheckContext(resolved)
    diags = list(MigUnsupported().run(ctx))
    assert [d.code for d in diags] == ["K201"]
    assert diags[0].span.line == result.document.span_of(("hosts", "dev-h100", "gpus", 0, "mig"), key=True).line
    assert "does not support MIG" in diags[0].message
    assert load_gpu_catalog().get("H100-SXM5-80GB").mig.supported  # the real entry is untouched


def test_each_rule_sits_in_its_family_and_a_renumbered_one_says_where_it_went() -> None:
    """`kiln explain` files a rule by its digits (compiler/diagnostics/rules.py: Kx5x Kubernetes,
    Kx6x disaggregated serving); K860, a Kubernetes rule about the spec's name, sat in the
    disaggregated slot and was filed there, so it is K955 and K860 stays to point at it."""
    from compiler.checks import get_rule

    assert get_rule("K955").family() == "references and names (Kubernetes target)"
    assert get_rule("K860").doc().startswith("Retired: renumbered K955")
