"""The wheel ships what the package reads at run time (templates, data files), and nothing else.

Built offline (`pip wheel --no-deps --no-build-isolation`) from a copy of the source, so the
checkout gets no build/ or egg-info. scripts/wheel_smoke.sh installs such a wheel and runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compiler import resources

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "compiler"
DATA_DIRS = ("templates", "catalog/data", "actions/data", "capacity/data", "runtimes/data")


def _shipped(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix != ".pyc"


def _source_files(under: Path) -> dict[str, bytes]:
    return {p.relative_to(ROOT).as_posix(): p.read_bytes()
            for p in sorted(under.rglob("*")) if p.is_file() and _shipped(p.relative_to(ROOT))}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(PACKAGE, src / "compiler", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, src / name)
    # What pip's byte-compilation, or a test importing a Triton model file, leaves behind.
    stray = src / "compiler" / "templates" / "triton" / "engine" / "__pycache__"
    stray.mkdir()
    (stray / "bls.cpython-311.pyc").write_bytes(b"not shipped")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True, text=True)
    (built,) = (tmp / "dist").glob("kiln_compiler-*.whl")
    with zipfile.ZipFile(built) as zf:
        yield zf


def test_wheel_ships_every_template_and_data_file(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for rel in DATA_DIRS:
        files = _source_files(PACKAGE / rel)
        assert files, f"compiler/{rel} is empty"
        missing = sorted(set(files) - names)
        assert not missing, f"not in the wheel: {missing}"
        for name, data in files.items():
            assert wheel.read(name) == data, name
    # The Triton model files are data: shipped as the .py sources they are copied from.
    assert "compiler/templates/triton/llmapi/model.py" in names


def test_wheel_ships_the_package_and_nothing_else(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    package = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert package == set(_source_files(PACKAGE))  # scripts/ (the quickstart model's trainer), tests/: not shipped
    assert "compiler/resources.py" in package and not [n for n in package if n.startswith("compiler/quickstart/")]


def test_resources_find_the_packaged_files() -> None:
    for name in resources.TEMPLATE_SETS:
        assert resources.template_dir(name) == PACKAGE / "templates" / name
        assert resources.template_dir(name).is_dir()
    assert sorted(p.name for p in (PACKAGE / "templates").iterdir()) == sorted(resources.TEMPLATE_SETS)
    assert resources.read_data("actions", "data", "trtllm_cli.json").lstrip().startswith("{")
    with pytest.raises(resources.ResourceError):
        resources.template_dir("nope")
    with pytest.raises(resources.ResourceError):
        resources.read_data("catalog", "data", "missing.json")
