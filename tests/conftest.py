from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-expectations", action="store_true", default=False,
                     help="rewrite the inline expectations of spec cases and golden files from current output")


@pytest.fixture
def update_expectations(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-expectations"))
