"""The configuration-space walk (issue 33): every spec `kiln validate` accepts builds (every action
that needs no GPU, weights, Docker or network runs), and every file it emits is accepted by its
consumer's rules as Kiln holds them (tests/spacewalk.py: the LLM-API option table of the pinned
TensorRT-LLM, Triton's model_config schema and rules, bash -n and shellcheck, systemd-analyze,
the Kubernetes, CRD and Dynamo schemas, mig-parted's rules, the disaggregated server's keys).

A seeded sample of the space runs here, bounded in time; benchmarks/space_walk.py walks ten
thousand specs. Each failure the walk found is a case under tests/walk_cases/ (the shrunk spec, with
what it broke): it must validate and build clean, or (where the fix was a check) the check's own
case is under tests/cases/."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from tests.spacewalk import (DrawChooser, RandomChooser, ReplayChooser, artifact_problems, dump, generate, shrink,
                             walk_one, workspace)

CASES = Path(__file__).parent / "walk_cases"


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory) -> Path:
    return workspace(tmp_path_factory.mktemp("walk") / "spec")


# Bounded: a spec takes a fraction of a second to validate, build and check (shellcheck most of it).
@seed(33)
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_what_validates_builds_and_its_files_are_accepted(spec_dir: Path, data) -> None:
    text = dump(generate(DrawChooser(data)))
    note(text)
    outcome = walk_one(text, spec_dir, spec_dir / ".kiln-store")
    assert outcome.status != "failed", f"{outcome.cause}\n{outcome.detail}\n--- the spec:\n{text}"


def test_the_sample_is_mostly_accepted_and_covers_the_space(spec_dir: Path) -> None:
    """The generator reaches every part of the space, and most of what it makes validates (a walk
    of refusals would prove nothing about builds)."""
    rng = random.Random(7)
    specs = [generate(RandomChooser(rng)) for _ in range(1000)]
    seen = set()
    for s in specs:
        m = s["models"]["m"]
        seen.add(s.get("target", "llmapi"))
        seen.add("kubernetes" if "kubernetes" in s else "hosts")
        seen.add(m.get("serving", {}).get("runtime", "triton"))
        seen |= {"dynamo"} if s.get("kubernetes", {}).get("runtime") == "dynamo" else set()
        seen |= {"disaggregated"} if "disaggregated" in m.get("serving", {}) else set()
        seen |= {"two-hosts"} if "h2" in s["hosts"] else set()
        seen |= {"mig"} if any("mig" in g for g in s["hosts"]["h"]["gpus"]) else set()
        seen |= {"pp"} if m.get("parallelism", {}).get("pp", 1) > 1 else set()
        seen |= {"ep"} if m.get("parallelism", {}).get("ep", 1) > 1 else set()
        seen |= {"attention_dp"} if m.get("parallelism", {}).get("attention_dp") else set()
        seen |= {"streaming"} if m.get("serving", {}).get("streaming") else set()
        seen |= {"quantized"} if "quantization" in m else set()
    assert seen >= {"llmapi", "engine", "hosts", "kubernetes", "triton", "trtllm-serve", "dynamo", "disaggregated",
                    "two-hosts", "mig", "pp", "ep", "attention_dp", "streaming", "quantized"}, seen
    from compiler.pipeline import validate_text

    accepted = sum(validate_text(dump(s), spec_dir).ok for s in specs[:60])
    assert accepted >= 25, accepted


def test_a_trace_replays_to_the_same_spec() -> None:
    rng = random.Random(3)
    for _ in range(20):
        c = RandomChooser(rng)
        spec = generate(c)
        assert generate(ReplayChooser(c.trace)) == spec


def test_shrinking_keeps_only_the_decisions_the_failure_needs() -> None:
    """A failure that needs the engine target and a multi-GPU unit shrinks to a spec with those
    two departures from the defaults and none of the others the random spec had."""
    def fails(spec: dict) -> bool:
        p = spec["models"]["m"].get("parallelism", {})
        return spec.get("target") == "engine" and p.get("tp", 1) * p.get("pp", 1) > 1

    rng = random.Random(11)
    while True:
        c = RandomChooser(rng)
        spec = generate(c)
        if fails(spec) and len(dump(spec)) > 700:
            break
    small = generate(ReplayChooser(shrink(c.trace, fails)))
    assert fails(small)
    m = small["models"]["m"]
    assert set(m) == {"source", "architecture", "limits", "parallelism"}, m
    assert m["parallelism"] in ({"tp": 2}, {"pp": 2}) and "kubernetes" not in small and "image" not in small


# --- each consumer's rules refuse a broken file -----------------------------------------------------------

class _Spec:
    class spec:  # noqa: N801 - what artifact_problems reads of a validation
        class toolchain:  # noqa: N801
            tensorrt_llm = "1.2.1"


@pytest.mark.parametrize("kind,files,problem", [
    ("host-script", {"provision.sh": b"#!/usr/bin/env bash\nif then\n"}, "bash -n"),
    ("host-script", {"provision.sh": b"#!/usr/bin/env bash\nrm -rf $1/x\n"}, "shellcheck"),
    ("host-script", {"kiln-host-x.service": b"[Service]\nType=oneshot\nExecStart=/bin/true\nBogusKey=1\n"},
     "Unknown key"),
    ("llmapi-options", {"llm-api-options.yaml": b"max_batch_size: 8\nkv_cache_config: {free_gpu_mem_fraction: 0.9}\n"},
     "LLM-API option refused"),
    ("llmapi-options", {"llm-api-options.yaml": b"max_batch_size: '8'\n"}, "LLM-API option refused"),
    ("triton-repo", {"m/config.pbtxt": b'name: "m"\nbackend: "python"\nmax_batch_size: -\n'}, "Triton"),
    ("disagg-options", {"disagg-config.yaml": b"port: 8000\nbackend: pytorch\ncontext_servers: {num_instances: 2, "
                                              b"urls: [a:1]}\n"}, "urls do not match"),
    ("k8s-release", {"w.yaml": b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
                               b"spec: {replica: 1, selector: {}, template: {}}\n"}, "Deployment"),
])
def test_each_check_refuses_what_its_consumer_refuses(kind: str, files: dict, problem: str) -> None:
    problems = artifact_problems(kind, files, _Spec)
    assert any(problem in p for p in problems), problems


# --- the cases the walk found ----------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES.glob("*.yaml")), ids=lambda p: p.stem)
def test_walk_case_builds(case: Path, spec_dir: Path) -> None:
    outcome = walk_one(case.read_text(encoding="utf-8"), spec_dir, spec_dir / ".kiln-store")
    assert outcome.status == "built", (outcome.status, outcome.codes, outcome.cause, outcome.detail)
    assert outcome.artifacts > 0


def test_the_workspace_holds_a_checkpoint_of_each_catalog_models_shape(spec_dir: Path) -> None:
    """A generated spec names a catalog `architecture` beside a local `source.path`: K918 refuses the
    pair where the checkpoint's config.json is another model's (the walk once pointed every model at
    the quickstart's 4-layer one), so the workspace keeps one per catalog model, of its shape."""
    import json

    from compiler.catalog import load_model_catalog
    from compiler.catalog.models import arch_from_hf_config
    from compiler.ir.resolve import SHAPE
    from tests.spacewalk import checkpoint

    catalog = load_model_catalog()
    for name in catalog.names:
        config = json.loads((spec_dir / checkpoint(name) / "config.json").read_text(encoding="utf-8"))
        own, arch = arch_from_hf_config(config, name), catalog.get(name)
        assert [f for f, _ in SHAPE if getattr(own, f) != getattr(arch, f)] == [], name
