from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-expectations", action="store_true", default=False,
                     help="rewrite the inline expectations of spec cases and golden files from current output")


@pytest.fixture
def update_expectations(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-expectations"))


# --- hypothesis profiles ------------------------------------------------------------------------
# KILN_HYPOTHESIS_PROFILE=ci (scripts/test.sh) runs the property tests harder than a developer's
# default "dev" run. Tests that pin their own max_examples keep it.
settings.register_profile("ci", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=200, deadline=None,
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
