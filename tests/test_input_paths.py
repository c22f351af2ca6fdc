"""A spec reads only files of its own repository (or of $KILN_MODELS), never the build machine
(issue 17, item 2), and an input it cannot read is a positioned diagnostic (item 7), not a crash.

The data-driven case tests/cases/hardware/refs/input-outside-repository.yaml pins the diagnostics;
these tests run plan and build on real repositories and check that a refused path is never read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.store.digests import DigestCache
from compiler.pipeline import Options, validate_path
from tests.gitrepo import GitRepo
from tests.test_gitops_registry import light_spec

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"


def _run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _codes(text: str) -> list[str]:
    return re.findall(r"\[(K\d{3})\]", text)


def test_a_spec_cannot_publish_the_build_machines_files(tmp_path: Path, capsys) -> None:
    """The issue's two examples: /etc/passwd as calibration data (its content would land in the
    calibration-set artifact), /usr/share/doc as a model source (plan would hash a system tree)."""
    spec = QUICKSTART / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    repo = GitRepo(tmp_path / "repo")
    shutil.copytree(QUICKSTART, repo.root / "deploy")
    hostile = repo.root / "deploy" / "kiln.yaml"
    hostile.write_text(text.replace("calibration: {data: data/calib-prose.jsonl", "calibration: {data: /etc/passwd", 1)
                       .replace("source: {path: model}", "source: {path: /usr/share/doc}", 1), encoding="utf-8")
    store = tmp_path / "store"
    for command in ("validate", "plan", "build"):
        argv = [command, str(hostile)] + (["--store", str(store)] if command != "validate" else [])
        code, out = _run(capsys, *argv)
        assert code == 1, out
        assert _codes(out).count("K915") == 2 and "K903" not in _codes(out), out
        assert "'/etc/passwd' is outside the spec's repository" in out
    # nothing outside the repository was hashed (the digest cache lists every file Kiln read)
    cache = store / "digest-cache.json"
    read = json.loads(cache.read_text()) if cache.exists() else {}
    assert not [p for p in read if not p.startswith(str(repo.root))], read
    assert not list((store / "actions").glob("*/*.json"))


def test_inside_the_repository_is_fine_and_a_link_out_of_it_is_not(tmp_path: Path, capsys) -> None:
    repo = GitRepo(tmp_path / "repo")
    shutil.copytree(QUICKSTART / "data", repo.root / "shared-data")  # beside the spec's directory
    spec = light_spec(repo.root / "deploy")
    shutil.rmtree(repo.root / "deploy" / "data")
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("source: {path: model}", "source: {path: model}\n    quantization:\n"
                                 "      weights: fp8\n      calibration: {data: ../shared-data/calib-prose.jsonl}", 1),
                    encoding="utf-8")
    assert validate_path(spec).ok  # ../ that stays in the repository
    outside = tmp_path / "secret.jsonl"
    outside.write_text('{"text": "a secret"}\n')
    (repo.root / "shared-data" / "calib-prose.jsonl").unlink()
    (repo.root / "shared-data" / "calib-prose.jsonl").symlink_to(outside)
    result = validate_path(spec)
    assert [d.code for d in result.diagnostics if d.is_error] == ["K915"]
    d = next(d for d in result.diagnostics if d.code == "K915")
    assert d.span.line == spec.read_text().splitlines().index(
        "      calibration: {data: ../shared-data/calib-prose.jsonl}") + 1
    assert "resolves to" in d.message and str(outside) in d.message
    # a model directory linked out of the repository (both models name it): refused before its
    # config.json is read (no K903, K905)
    shutil.move(repo.root / "deploy" / "model", tmp_path / "model-outside")
    (repo.root / "deploy" / "model").symlink_to(tmp_path / "model-outside")
    codes = sorted(d.code for d in validate_path(spec).diagnostics if d.is_error)
    assert codes == ["K915", "K915", "K915"], codes


def test_a_spec_outside_git_is_confined_to_its_directory(tmp_path: Path) -> None:
    spec = light_spec(tmp_path / "spec")
    text = spec.read_text(encoding="utf-8")
    shutil.move(tmp_path / "spec" / "model", tmp_path / "model")
    spec.write_text(text.replace("source: {path: model}", "source: {path: ../model}"), encoding="utf-8")
    assert [d.code for d in validate_path(spec).diagnostics if d.is_error] == ["K915", "K915"]


def test_kiln_models_is_one_more_root_and_only_when_set(tmp_path: Path, monkeypatch) -> None:
    models = tmp_path / "models"
    shutil.copytree(QUICKSTART / "model", models / "tiny")
    spec = light_spec(tmp_path / "spec")
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("source: {path: model}", f"source: {{path: {models / 'tiny'}}}"), encoding="utf-8")
    monkeypatch.delenv("KILN_MODELS", raising=False)
    assert {d.code for d in validate_path(spec).diagnostics if d.is_error} == {"K915"}
    monkeypatch.setenv("KILN_MODELS", str(models))
    assert validate_path(spec).ok
    assert validate_path(spec, Options(models_root=None)).ok is False  # an explicit option wins


def test_an_input_that_vanishes_after_validation_is_a_diagnostic_at_lowering(tmp_path: Path) -> None:
    from compiler.lower import lower_or_report

    spec = light_spec(tmp_path / "spec")
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("source: {path: model}", "source: {path: model}\n    quantization:\n"
                                 "      weights: fp8\n      calibration: {data: data/calib-prose.jsonl}", 1),
                    encoding="utf-8")
    result = validate_path(spec)
    assert result.ok
    (tmp_path / "spec" / "data" / "calib-prose.jsonl").unlink()
    assert lower_or_report(result, DigestCache(None)) is None
    assert [d.code for d in result.diagnostics] == ["K916"]
    assert "calib-prose.jsonl" in result.diagnostics[0].message and result.diagnostics[0].span.line > 1


# Run Kiln as a user that file modes stop. Root reads any file whatever its mode, so as root the
# process imports what the commands need, then drops to nobody before it runs one (its Python
# installation may not be readable by nobody, so it cannot start as nobody).
_AS_NOBODY = """
import os, sys
import compiler.build, compiler.capacity.render, compiler.cli, compiler.graph.plan, compiler.pipeline
import compiler.gitops.oci, compiler.store.maintenance, compiler.cli.output
import encodings.utf_8_sig, encodings.ascii, encodings.latin_1
from compiler.cli import main
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
sys.exit(main(sys.argv[1:]))
"""


def test_an_input_that_exists_but_cannot_be_read_is_a_positioned_diagnostic() -> None:
    work = Path(tempfile.mkdtemp(prefix="kiln-unreadable-"))
    try:
        os.chmod(work, 0o777)
        spec = light_spec(work / "spec")
        text = spec.read_text(encoding="utf-8")
        spec.write_text(text.replace("source: {path: model}", "source: {path: model}\n    quantization:\n"
                                     "      weights: fp8\n      calibration: {data: data/calib-prose.jsonl}", 1),
                        encoding="utf-8")
        for p in [work, *work.rglob("*")]:
            os.chmod(p, 0o777 if p.is_dir() else 0o644)
        os.chmod(work / "spec" / "data" / "calib-prose.jsonl", 0o000)
        os.chmod(work / "spec" / "model" / "tokenizer.json", 0o000)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KILN_BUILDER_HAS": "", "HOME": str(work)}
        for command in ("validate", "plan"):
            argv = [sys.executable, "-c", _AS_NOBODY, command, str(spec)]
            if command == "plan":
                argv += ["--store", str(work / "store")]
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=120)
            out = proc.stdout + proc.stderr
            assert proc.returncode == 1, out
            # the calibration file, and the model directory with an unreadable file (both models)
            assert _codes(out).count("K916") == 3 and "Traceback" not in out and "internal error" not in out, out
            assert "Permission denied" in out
    finally:
        shutil.rmtree(work, ignore_errors=True)
