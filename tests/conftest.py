from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# Before anything imports torch: OpenMP's threads wait passively in this process and in every
# server and build it starts (they inherit it). Spinning at barriers, the default, takes the
# other xdist worker's core from the thread being waited for: twice the CPU for the same tests,
# the quantize steps several times slower (compiler/graph/zygote.py does the same for builds).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-expectations", action="store_true", default=False,
                     help="rewrite the inline expectations of spec cases and golden files from current output")


# --- scheduling ---------------------------------------------------------------------------------
# pytest-xdist (scripts/test.sh: --dist loadfile) hands whole files to its workers in collection
# order, so a slow file collected last runs alone while the other worker idles. The slowest files
# (about 20 s or more of an idle 2-core run each; `pytest --durations`) go first, longest first;
# the rest keep their order. Only the order changes: every test still runs.
SLOW_FILES = ("test_store.py", "test_triton_server.py", "test_quantize.py", "test_host_scripts.py",
              "test_tune.py", "test_llmapi_serving.py", "test_image.py", "test_serving_lifecycle.py",
              "test_gitops_registry.py", "test_install.py", "test_format_walk.py", "test_render_review.py",
              "test_registry_hostile.py", "test_store_hostile.py", "test_fuzz_store.py",
              "test_disaggregated_e2e.py", "test_disaggregated_hosts.py", "test_disaggregated_pair.py",
              "test_signing.py", "test_space_walk.py", "test_k8s_edit_matrix.py",
              "test_distributed.py", "test_tune_reads.py", "test_field_effects.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))  # stable: file order kept


# Files that go to one worker together: each imports ModelOpt (with torch and transformers, about
# 10 CPU-seconds) in the test process or quantizes through a build's zygote (compiler/graph/zygote.py,
# the same imports again). On one worker that is paid once, not once per worker.
SAME_WORKER = {name: "quantizing" for name in (
    "test_quantize.py", "test_image.py", "test_builder.py", "test_format_walk.py", "test_format_table.py",
    "test_checkpoint_config.py", "test_quantize_sharded.py")}


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook; without xdist it is never called
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileGroupScheduling(LoadFileScheduling):
        """--dist loadfile, but the files of a SAME_WORKER group are one unit of work."""

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SAME_WORKER.get(scope.rpartition("/")[2], scope)

    return FileGroupScheduling(config, log)


@pytest.fixture
def update_expectations(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-expectations"))


# --- hypothesis profiles ------------------------------------------------------------------------
# KILN_HYPOTHESIS_PROFILE=ci (scripts/test.sh) runs the property tests harder than a developer's
# default "dev" run. Tests that pin their own max_examples keep it. Every input a property test has
# found a bug with is pinned with @example and runs every time; the random examples beyond them
# are a budget (the spec fuzzers validate a whole spec per example: 2000 of them took minutes).
settings.register_profile("ci", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("KILN_HYPOTHESIS_PROFILE", "dev"))


# --- real services ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def registry():
    """A real OCI registry (Debian docker-registry) on 127.0.0.1 for this test session."""
    from tests.services import Registry, registry_available

    if not registry_available():
        pytest.fail("docker-registry is not installed: run the tests through scripts/test.sh, which installs it")
    reg = Registry()
    yield reg
    reg.stop()


# --- the quantized quickstart, built once per test run ------------------------------------------
@pytest.fixture(scope="session")
def quickstart_build(tmp_path_factory):
    """examples/quickstart (with tests/quickstart.py's QUANTIZED_EDITS) built once for the whole run,
    quantization and quality gates included, into one store: `(spec, store dir, BuildOutcome)`.

    Quantizing is the slowest thing the suite does (INT4 AWQ above all), so every module that needs
    a quantized checkpoint reads this store; a test that changes the spec or the store works on a
    copy of it (`shutil.copytree(store, ...)`), never on the store itself."""
    import shutil
    from pathlib import Path

    from compiler.build import build_spec
    from compiler.graph.builder import Builder
    from compiler.store.local import LocalStore
    from tests.quickstart import QUANTIZED_EDITS, edited

    example = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
    root = tmp_path_factory.mktemp("quickstart-build")
    shutil.copytree(example, root / "spec", ignore=shutil.ignore_patterns(".kiln"))
    spec = root / "spec" / "kiln.yaml"
    spec.write_text(edited(spec.read_text(encoding="utf-8"), QUANTIZED_EDITS), encoding="utf-8")
    outcome = build_spec(spec, LocalStore(root / "store"), builder=Builder(fixed=frozenset({"torch"})))
    assert outcome.validation.ok, [d.message for d in outcome.validation.diagnostics]
    assert not outcome.failed and not outcome.deferred, [(r.id, r.status, r.error) for r in outcome.results.values()
                                                         if r.status not in ("built", "cached")]
    return spec, root / "store", outcome


# --- the runtime's transformers ------------------------------------------------------------------
@pytest.fixture(scope="session")
def runtime_transformers():
    """transformers of the examples' TensorRT-LLM pin (tests/runtime_transformers.py), in a venv of
    its own, cached across sessions: it reads checkpoints as the runtime does, and it is the execution
    environment of the Triton models that tokenize, as the runtime's container is."""
    from tests.runtime_transformers import PypiUnreachable, RuntimeTransformers, runtime_version

    version = runtime_version()
    try:
        reader = RuntimeTransformers(version).ensure()
    except PypiUnreachable as e:
        pytest.skip(str(e))
    assert reader.installed_version() == version
    return reader
