"""The Python models of the served repositories import their packages from the execution
environment the test harness gives them (tests/tritonserver.py), never from the base interpreter.

A fresh machine has numpy and transformers only in the test venv: the base interpreter that the
Python backend's stub embeds (a pyenv build, Debian's python3) has neither. A harness that relied on
the base interpreter passed only where someone had installed them there by hand. These checks fail
when a Python model cannot import what it needs, and show that the execution environment, not
the machine, decides what it can import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tritonserver import TritonServer, TritonUnavailable, execution_environment

PROBE = '''
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import transformers  # what the preprocessing and postprocessing models import

        self.found = {"prefix": sys.prefix, "transformers": transformers.__file__, "numpy": np.__file__}

    def execute(self, requests):
        out = np.array([json.dumps(self.found).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("found", out)]) for _ in requests]
'''

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "x" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "found" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}'''


def probe(repository: Path, name: str, extra: str = "") -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra), encoding="utf-8")
    (repository / name / "1" / "model.py").write_text(PROBE, encoding="utf-8")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("triton-env")
    bare = tmp / "bare-env"  # the base interpreter's own venv, nothing installed in it
    subprocess.run([sys.executable, "-c", "import sys, venv; venv.create(sys.argv[1], with_pip=False)", str(bare)],
                   check=True, env={"PATH": "/usr/bin:/bin"})
    repository = tmp / "repository"
    probe(repository, "harness")  # the harness adds the test environment
    probe(repository, "bare", f'parameters: {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{bare}" }} }}\n')
    try:
        server = TritonServer(repository, tmp)
    except TritonUnavailable as e:
        pytest.fail(f"{e}: the test extra installs it")
    try:
        server.wait_live()
    except BaseException:
        server.stop()
        raise
    yield server
    server.stop()


def test_a_python_model_imports_from_the_test_environment(server) -> None:
    index = server.index()
    assert index["harness"]["state"] == "READY", server.log()[-4000:]
    status, body = server.infer("harness", [{"name": "x", "shape": [1], "datatype": "INT32", "data": [0]}])
    assert status == 200, body
    found = json.loads(body["outputs"][0]["data"][0])
    env = execution_environment()
    assert Path(found["prefix"]).resolve() == env.resolve(), found
    for package in ("transformers", "numpy"):
        assert Path(found[package]).resolve().is_relative_to(env.resolve()), (package, found)


def test_a_model_whose_environment_lacks_a_package_fails_to_load(server) -> None:
    """The bare environment was made from the same base interpreter: if the base interpreter's
    packages leaked into a model, this one would load."""
    index = server.index()
    assert index["bare"]["state"] == "UNAVAILABLE", index["bare"]
    log = server.log()
    assert "No module named" in log and ("'transformers'" in log or "'numpy'" in log), log[-4000:]
