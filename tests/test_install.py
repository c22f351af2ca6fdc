"""scripts/install.sh on Debian's own python3, which refuses installs into itself (PEP 668,
`EXTERNALLY-MANAGED`): Kiln goes into the project's .venv, runs from there, and the system
interpreter's packages are left exactly as they were. Runs against a scratch copy of the source
tree (never the checkout the tests run from) with `--no-quantize`, so no torch is downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_PYTHON = Path("/usr/bin/python3")


def _stdlib(python: Path) -> Path | None:
    try:
        out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                             capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 else None


def _site_listing(python: Path) -> dict[str, list[str]]:
    code = "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))"
    dirs = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return {d: sorted(os.listdir(d)) if os.path.isdir(d) else [] for d in dirs}


@pytest.fixture(scope="module")
def debian_python() -> Path:
    stdlib = _stdlib(DEBIAN_PYTHON)
    if stdlib is None or not (stdlib / "EXTERNALLY-MANAGED").is_file():
        pytest.skip("Debian's python3 (externally managed, /usr/bin/python3) is not installed here; "
                    "scripts/services.sh installs python3 and python3-venv on Debian")
    return DEBIAN_PYTHON


def test_install_sh_on_debians_python_installs_into_the_project_venv(debian_python: Path, tmp_path: Path) -> None:
    clone = tmp_path / "kiln"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, clone / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".kiln")
    for name in ("compiler", "scripts"):
        shutil.copytree(ROOT / name, clone / name, ignore=ignore)
    shutil.copytree(ROOT / "examples" / "quickstart", clone / "examples" / "quickstart", ignore=ignore)
    # What the old install.sh did, `python3 -m pip install` into this interpreter, is refused here.
    refused = subprocess.run([str(debian_python), "-m", "pip", "install", "--dry-run", "--no-index", "kiln-compiler"],
                             capture_output=True, text=True)
    assert refused.returncode != 0
    before = _site_listing(debian_python)

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "KILN_VENV")}
    env.update(PYTHON=str(debian_python), PATH=f"/usr/bin:/bin:{env.get('PATH', '')}")
    # The first run installs with uv (fetched into the venv); the second, a no-op that still
    # succeeds, goes through pip, the installer where uv cannot be had (KILN_INSTALLER=pip).
    for attempt, installer in (("first", "uv"), ("again", "pip")):
        proc = subprocess.run(["bash", "scripts/install.sh", "--no-quantize"], cwd=clone,
                              env={**env, "KILN_INSTALLER": installer}, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{attempt}: {proc.stdout}\n{proc.stderr}"
        if attempt == "first":
            uv = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "uv", "--version"],
                                capture_output=True, text=True, env=env)
            assert uv.returncode == 0 and uv.stdout.startswith("uv "), uv
    assert "run .venv/bin/kiln, or `source .venv/bin/activate`" in proc.stderr

    kiln = clone / ".venv" / "bin" / "kiln"
    version = subprocess.run([str(kiln), "--version"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout.strip() == "kiln 0.1.0", version
    where = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c",
                            "import compiler, sys; print(compiler.__file__); print(sys.base_prefix)"],
                           cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stdout.split()
    assert where[0] == str(clone / "compiler" / "__init__.py")  # the editable install of this copy
    assert where[1] == "/usr"  # made from Debian's interpreter
    validate = subprocess.run([str(kiln), "validate", "examples/quickstart/kiln.yaml"], cwd=clone,
                              capture_output=True, text=True, env=env)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert _site_listing(debian_python) == before  # nothing went into the system interpreter
