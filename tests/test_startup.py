"""Start-up (issue 36): `kiln validate` and `kiln plan` import what they use and no more. A plan at
load took 2.6 s, of which 0.02-0.25 s was the plan: the rest was start-up and imports of modules a
plan never calls (jinja2 for templates it does not render, urllib/http/ssl for a registry it does not
ask). The time is benchmarks/bench_startup.py's to print; this checks the modules, in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart" / "kiln.yaml"
# Modules a validate or a plan has no use for: template rendering, the registry client and its
# transport, and what only actions that run load (torch and the quantization stack).
HEAVY = ["jinja2", "urllib.request", "http.client", "ssl", "email.parser", "compiler.gitops.oci",
         "compiler.gitops.publish", "torch", "transformers", "modelopt", "numpy", "safetensors", "hypothesis"]
PROBE = """
import contextlib, io, json, sys
from compiler.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": int(code), "modules": sorted(sys.modules)}))
"""


def _modules(*argv: str) -> tuple[int, set[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    return doc["code"], set(doc["modules"])


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_validate_and_plan_import_no_heavy_module(tmp_path: Path, command: str) -> None:
    argv = [command, str(QUICKSTART)] + (["--store", str(tmp_path / "store")] if command == "plan" else [])
    code, modules = _modules(*argv)
    assert code == 0
    assert sorted(m for m in HEAVY if m in modules) == []
    assert "compiler.spec.models" in modules  # the probe saw a real run (the spec was parsed)


def test_validate_reaches_no_target_build_and_a_hosts_plan_no_kubernetes_simulator(tmp_path: Path) -> None:
    """`kiln validate` asks the targets' objects (compiler.deploy) and imports nothing a target builds
    (compiler.targets); `kiln plan` of a spec with hosts only (`deploy: host`, the default) lowers through the kind
    registry, which holds the Kubernetes kinds, but never imports the Kubernetes change simulator
    (compiler/targets/kubernetes/sim/, whose package runs every controller's port)."""
    code, modules = _modules("validate", str(QUICKSTART))
    assert code == 0 and "compiler.deploy.hosts" in modules
    assert sorted(m for m in modules if m == "compiler.targets" or m.startswith("compiler.targets.")) == []
    code, modules = _modules("plan", str(QUICKSTART), "--store", str(tmp_path / "store"))
    assert code == 0 and "compiler.targets.kubernetes.plan" in modules  # the registry's kinds were imported
    assert sorted(m for m in modules if m.startswith("compiler.targets.kubernetes.sim")) == []
