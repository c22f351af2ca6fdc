"""Where `kiln` finds its store without --store: `.kiln/store` at the root of the git work tree that
holds the spec (beside the spec outside git), from whatever directory a command runs; every command
resolves it the same way and names it where its output depends on it. Real `kiln` subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.gitrepo import GitRepo

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "tests" / "golden" / "plan" / "calibration-and-mig" / "spec"  # builds in a moment, needs nothing


def kiln(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "KILN_STORE"}
    base["PYTHONPATH"] = str(ROOT) + os.pathsep + base.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "compiler", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=300)


def test_every_command_finds_the_store_at_the_repository_root_from_any_directory(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    shutil.copytree(SPEC, repo.root / "deploy")
    (repo.root / "docs" / "notes").mkdir(parents=True)
    repo.commit("spec")
    store = repo.root / ".kiln" / "store"
    spec_from_docs = "../../deploy/kiln.yaml"

    plan = kiln(repo.root / "docs" / "notes", "plan", spec_from_docs)
    assert plan.returncode == 0, plan.stderr
    assert f"Store: {store} (none there yet)" in plan.stdout and "never built in this store" in plan.stdout
    assert not store.exists()  # planning creates no store

    build = kiln(repo.root / "deploy", "build", "kiln.yaml", "--allow-partial")
    assert build.returncode == 0, build.stderr
    assert f"store: {store}\n" in build.stdout
    assert (store / "objects").is_dir() and not (repo.root / "deploy" / ".kiln").exists()

    plan = kiln(repo.root / "docs" / "notes", "plan", spec_from_docs)
    assert f"Store: {store}\nActions: 8 to run, 10 cached" in plan.stdout  # only the deferred ones left
    root_plan = kiln(repo.root, "plan", "deploy/kiln.yaml")  # from the root: the same store, named as before
    assert "Store: .kiln/store\nActions: 8 to run, 10 cached" in root_plan.stdout

    export = kiln(repo.root / "docs", "export", "../deploy/kiln.yaml", "--to", str(tmp_path / "out"),
                  "--allow-partial")  # the deferred actions are pending: without it, exit 4
    assert export.returncode == 0, export.stderr
    assert (tmp_path / "out" / "release.json").is_file()
    show = kiln(repo.root / "docs", "show", "../deploy/kiln.yaml", "spec-snapshot")
    assert show.returncode == 0 and " spec-snapshot/" in show.stdout, show.stderr

    verify = kiln(repo.root / "docs" / "notes", "store", "verify")  # no spec: the current directory's work tree
    assert verify.returncode == 0 and f"{store}: ok" in verify.stdout, verify.stdout + verify.stderr
    gc = kiln(repo.root / "deploy", "store", "gc")
    assert gc.returncode == 0 and gc.stdout.startswith(f"{store}: kept 1 release(s)"), gc.stdout + gc.stderr


def test_outside_git_the_store_is_beside_the_spec_and_store_options_override(tmp_path: Path) -> None:
    shutil.copytree(SPEC, tmp_path / "deploy")
    (tmp_path / "elsewhere").mkdir()
    build = kiln(tmp_path / "elsewhere", "build", "../deploy/kiln.yaml", "--allow-partial", "-q")
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "deploy" / ".kiln" / "store" / "objects").is_dir()
    assert not (tmp_path / "elsewhere" / ".kiln").exists()

    # --store and $KILN_STORE still win, for every command
    own = tmp_path / "own-store"
    plan = kiln(tmp_path / "elsewhere", "plan", "../deploy/kiln.yaml", "--store", str(own))
    assert f"Store: {own} (none there yet)" in plan.stdout and "never built in this store" in plan.stdout
    plan = kiln(tmp_path / "elsewhere", "plan", "../deploy/kiln.yaml", env={"KILN_STORE": str(own)})
    assert f"Store: {own} (none there yet)" in plan.stdout
    beside = tmp_path / "deploy" / ".kiln" / "store"
    verify = kiln(tmp_path, "store", "verify", env={"KILN_STORE": str(beside)})
    assert verify.returncode == 0 and f"{beside}: ok" in verify.stdout
    missing = kiln(tmp_path / "elsewhere", "export", "../deploy/kiln.yaml", "--to", str(tmp_path / "o"),
                   "--store", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and f"no store at {tmp_path / 'nothing'}" in missing.stderr


def test_a_store_left_in_the_current_directory_is_pointed_out_not_used(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    shutil.copytree(SPEC, repo.root / "deploy")
    repo.commit("spec")
    old = kiln(repo.root / "deploy", "build", "kiln.yaml", "--allow-partial", "-q", "--store", ".kiln/store")
    assert old.returncode == 0, old.stderr  # where a build from this directory used to put it
    plan = kiln(repo.root / "deploy", "plan", "kiln.yaml")
    assert f"Store: {repo.root / '.kiln' / 'store'} (none there yet)" in plan.stdout
    assert "kiln: note: using the store at" in plan.stderr and "pass --store .kiln/store" in plan.stderr
    again = kiln(repo.root / "deploy", "plan", "kiln.yaml", "--store", ".kiln/store")
    assert "note" not in again.stderr and "Store: .kiln/store\nActions: 8 to run, 10 cached" in again.stdout
