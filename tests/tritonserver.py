"""A real `tritonserver` for tests: the binary and Python backend the nvidia-pytriton wheel bundles.

The wheel keeps the Python backend's stub apart, one per Python version; a backend directory of
the test's own gets libtriton_python.so, its utilities and the stub for this interpreter (the
wheel's files are never changed). The stub links libpython3.X.so, so this interpreter's LIBDIR
goes first on LD_LIBRARY_PATH, then the wheel's bundled libraries.

The packages the models import (numpy, transformers) come from the test environment by the Python
backend's own mechanism for that, an execution environment: every Python model of the served copy
of the repository gets the `EXECUTION_ENV_PATH` parameter naming this interpreter's virtual
environment (python_backend README, "Creating Custom Execution Environments"; an unpacked
environment is a directory with `bin/activate`). The backend sources that script before it starts
the stub, so the stub's embedded interpreter finds the environment's `python3` first on PATH and
takes the environment's site-packages. Without it the stub runs the base interpreter (a pyenv
build, Debian's python3) with whatever happens to be installed there, and an environment
variable such as PYTHONPATH does not reach the embedded interpreter. A repository whose Python
models only tokenize can run in another environment: the runtime's transformers without torch
(tests/runtime_transformers.py), as in the runtime's container, where each model's process
starts in a third of the time the test venv's transformers, which imports torch, takes.

The server listens on 127.0.0.1 only, on ports chosen free, and is stopped (by its own pid) when
the test ends.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path


class TritonUnavailable(Exception):
    pass


def _pytriton_root() -> Path:
    try:
        import pytriton
    except ImportError:
        raise TritonUnavailable("nvidia-pytriton is not installed (pip install -e '.[test]')") from None
    return Path(pytriton.__file__).resolve().parent


def backend_directory(dest: Path) -> Path:
    """A `--backend-directory` with the Python backend and this interpreter's stub."""
    root = _pytriton_root() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonUnavailable(f"nvidia-pytriton has no Python backend stub for Python {version}")
    python = dest / "python"
    python.mkdir(parents=True, exist_ok=True)
    for f in (root / "backends" / "python").iterdir():
        if f.is_file():
            shutil.copy2(f, python / f.name)
    shutil.copy2(stub, python / "triton_python_backend_stub")
    return dest


def execution_environment() -> Path:
    """This interpreter's virtual environment, the execution environment of the served models."""
    env = Path(sys.prefix)
    if sys.prefix == sys.base_prefix or not (env / "bin" / "activate").is_file():
        raise TritonUnavailable(f"the tests run in {env}, not a virtual environment with bin/activate: "
                                "the Python models' execution environment must be one (scripts/install.sh --dev)")
    return env


def python_models(repository: Path) -> list[Path]:
    """The config.pbtxt of every model of `repository` that the Python backend runs."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    found = []
    for config in sorted(repository.glob("*/config.pbtxt")):
        parsed = text_format.Parse(config.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
        if parsed.backend == "python":
            found.append(config)
    return found


def with_execution_environment(repository: Path, dest: Path, env: Path) -> Path:
    """A copy of `repository` at `dest` whose Python models run in `env` (the original is unchanged)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(repository, dest, symlinks=True)
    for config in python_models(dest):
        text = config.read_text(encoding="utf-8")
        if "EXECUTION_ENV_PATH" in text:
            continue
        with open(config, "a", encoding="utf-8") as f:
            f.write(f'\nparameters: {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{env}" }} }}\n')
    return dest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TritonServer:
    def __init__(self, repository: Path, workdir: Path, env: dict[str, str] | None = None,
                 python_env: Path | None = None):
        """`env`: variables for the server and its Python models (PYTHONPATH entries are prepended).
        `python_env`: the Python models' execution environment, this interpreter's venv by default."""
        extra = dict(env or {})
        root = _pytriton_root()
        binary = root / "tritonserver" / "bin" / "tritonserver"
        backends = backend_directory(workdir / "backends")
        self.repository = with_execution_environment(repository, workdir / "served-repository",
                                                     python_env or execution_environment())
        libs = [sysconfig.get_config_var("LIBDIR") or "", str(root.parent / "nvidia_pytriton.libs")]
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join([p for p in libs if p] + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        env.update(extra)
        if "PYTHONPATH" in extra and os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = f"{extra['PYTHONPATH']}:{os.environ['PYTHONPATH']}"
        self.http = _free_port()
        self.grpc = _free_port()
        grpc, metrics = self.grpc, _free_port()
        self.log_path = workdir / "tritonserver.log"
        self._log = open(self.log_path, "wb")
        args = [str(binary), f"--model-repository={self.repository}", f"--backend-directory={backends}",
                "--http-address=127.0.0.1", f"--http-port={self.http}", "--grpc-address=127.0.0.1",
                f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--allow-metrics=false",
                "--disable-auto-complete-config", "--exit-on-error=false", "--strict-readiness=false",
                "--model-control-mode=explicit", "--load-model=*"]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    # --- HTTP/REST (KServe v2) ------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else {}

    def wait_live(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"tritonserver exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self._request("GET", "/v2/health/live")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"tritonserver did not come up in {timeout}s:\n{self.log()}")

    def index(self) -> dict[str, dict]:
        status, body = self._request("POST", "/v2/repository/index", {})
        assert status == 200, body
        return {m["name"]: m for m in body}

    def infer(self, model: str, inputs: list[dict], outputs: list[str] | None = None,
              request_id: str | None = None) -> tuple[int, dict]:
        body: dict = {"inputs": inputs}
        if request_id is not None:
            body["id"] = request_id
        if outputs:
            body["outputs"] = [{"name": n} for n in outputs]
        return self._request("POST", f"/v2/models/{model}/infer", body)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
