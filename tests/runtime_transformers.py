"""The transformers version a pinned TensorRT-LLM reads checkpoints with, in a venv of its own.

TensorRT-LLM's PyTorch backend builds a checkpoint's model config with transformers'
AutoConfig, which needs no torch: a venv with only `transformers==<pinned>` (and what it pulls in)
reads a config.json exactly as the runtime's transformers does. The venv is created once per
version and Python under the system's temporary directory and reused by later sessions; one
process at a time builds it (a lock file beside it), in place, and marks it complete last, so a
half-built one is never used.

Without PyPI the venv cannot be made: the caller skips, naming that reason. Any other pip failure
is an error.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import venvs

RUNTIME = "1.2.1"  # the examples' toolchain.tensorrt_llm, whose transformers pin the venv holds


def runtime_version() -> str:
    """The transformers version that RUNTIME reads checkpoints with (compiler/catalog/data/checkpoint_config.json)."""
    from compiler.catalog.checkpoint_config import load_checkpoint_config

    return load_checkpoint_config().runtime(RUNTIME).transformers

# pip's own words when the index cannot be reached (no network, DNS, proxy, TLS interception)
_OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
            "Network is unreachable", "ConnectionError", "ProxyError", "ConnectTimeoutError", "ReadTimeoutError",
            "Could not fetch URL", "SSLError")

READER = r"""
import json, sys
from transformers import AutoConfig
out = {}
for d in sys.argv[1:]:
    c = AutoConfig.from_pretrained(d)
    dtype = c.__dict__.get("dtype", c.__dict__.get("torch_dtype"))
    full = c.to_dict()
    full.pop("_name_or_path", None)
    full.pop("transformers_version", None)
    out[d] = {"rope_theta": getattr(c, "rope_theta", None), "rope_scaling": getattr(c, "rope_scaling", None),
              "dtype": None if dtype is None else str(dtype).replace("torch.", ""),
              "max_position_embeddings": getattr(c, "max_position_embeddings", None), "config": full}
print(json.dumps(out, default=str))
"""


class PypiUnreachable(Exception):
    pass


class RuntimeTransformers:
    """A Python with exactly one transformers version (and no torch)."""

    def __init__(self, version: str, root: Path | None = None) -> None:
        self.version = version
        tag = f"transformers-{version}-numpy1-py{sys.version_info.major}{sys.version_info.minor}"
        self.dir = (root or Path(tempfile.gettempdir()) / "kiln-test-venvs") / tag
        self.python = self.dir / "bin" / "python"

    def ensure(self) -> "RuntimeTransformers":
        if (self.dir / ".complete").is_file():
            venvs.keep_bytecode(self.dir)  # a venv cached before it was made so
            return self
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        # one installer at a time: the test workers that need it start at about the same time
        with open(self.dir.parent / f".{self.dir.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (self.dir / ".complete").is_file():
                self._make()
        return self

    def _make(self) -> None:
        # Made in place, under the lock: a venv's scripts name its absolute path (bin/activate, which
        # Triton's Python backend sources for an execution environment), so it cannot be moved.
        shutil.rmtree(self.dir, ignore_errors=True)  # a half-made venv of an interrupted run
        try:
            venvs.make(self.dir)
            # --no-cache-dir: the shared pip cache may belong to another user; the venv is cached instead
            # numpy below 2: the Python backend stub of the tests' Triton (nvidia-pytriton) exchanges
            # tensors with numpy 1 (pyproject.toml's test extra), and tokenizing models run here
            done = venvs.install(self.dir, f"transformers=={self.version}", "numpy<2", timeout=900,
                                 pip_args=("--no-cache-dir",))
            if done.returncode != 0:
                text = done.stdout + done.stderr
                if any(s in text for s in _OFFLINE):
                    line = next((ln for ln in text.splitlines() if any(s in ln for s in _OFFLINE)), "").strip()
                    raise PypiUnreachable(f"PyPI is unreachable: cannot install transformers=={self.version} into "
                                          f"the test's venv ({line[:200]})")
                raise RuntimeError(f"pip install transformers=={self.version} failed:\n{text[-4000:]}")
            (self.dir / ".complete").write_text(self.version + "\n")
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def installed_version(self) -> str:
        return subprocess.run([str(self.python), "-c", "import transformers; print(transformers.__version__)"],
                              check=True, capture_output=True, text=True, timeout=120).stdout.strip()

    def read_configs(self, *dirs: Path) -> dict[Path, dict]:
        """What AutoConfig of this transformers reads from each directory's config.json."""
        done = subprocess.run([str(self.python), "-c", READER, *map(str, dirs)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        if done.returncode != 0:
            raise RuntimeError(f"transformers {self.version} could not read the configs:\n{done.stderr[-4000:]}")
        raw = json.loads(done.stdout.strip().splitlines()[-1])
        return {Path(d): raw[str(d)] for d in map(str, dirs)}
