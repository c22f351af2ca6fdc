"""Getting artifacts out of the store: `kiln export` (a release's artifacts to a directory, modes
kept, confined to it), `kiln show` (one file), and what `kiln build` says at its end."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.store.canonical import canonical_json, pretty_json
from compiler.store.local import LocalStore

QUICKSTART = Path(__file__).parents[1] / "examples" / "quickstart"


@pytest.fixture
def built(tmp_path: Path, capsys, monkeypatch):
    """The quickstart without quantization, built into a store: (spec, store, build output)."""
    monkeypatch.setenv("KILN_BUILDER_HAS", "")
    shutil.copytree(QUICKSTART, tmp_path / "spec", ignore=shutil.ignore_patterns(".kiln"))
    spec = tmp_path / "spec" / "kiln.yaml"
    text = re.sub(r"    quantization:\n(?:      .*\n)+", "", spec.read_text(encoding="utf-8"))
    spec.write_text(text, encoding="utf-8")
    store = tmp_path / "store"
    assert main(["build", str(spec), "--store", str(store), "-q", "--manifest", str(tmp_path / "m.json")]) == 0
    return spec, store, capsys.readouterr().out


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_ends_with_the_manifest_what_was_produced_and_the_next_command(built, tmp_path: Path) -> None:
    spec, store, out = built
    lines = out.splitlines()
    assert re.fullmatch(r"release sha256:[0-9a-f]{64}: \d+ executed, 0 cached", lines[0])
    assert lines[1] == f"manifest: {tmp_path / 'm.json'}"
    unit = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    produced = {m.group(1): (int(m.group(2)), int(m.group(3)), float(m.group(4)) * unit[m.group(5)]) for m in
                re.finditer(r"^  ([a-z-]+) +(\d+) +(\d+) +([\d.]+) (B|KiB|MiB|GiB)$", out, re.M)}
    assert {"host-script", "triton-repo", "model-source", "spec-snapshot"} <= set(produced)
    s = LocalStore(store)  # the figures are the trees' files and sizes, summed per kind
    manifest = json.loads((tmp_path / "m.json").read_text(encoding="utf-8"))
    for kind, (count, files, size) in produced.items():
        trees = [a["tree"] for a in manifest["artifacts"] if a["kind"] == kind]
        entries = [e for t in trees for e in s.tree(t)]
        assert (count, files) == (len(trees), len(entries)), kind
        assert abs(size - sum(e.size for e in entries)) <= 0.05 * size, kind
    assert lines[-1].startswith(f"next: kiln export {spec} --store {store} --to DIR")


def test_export_writes_every_artifact_with_its_mode_and_the_manifest(built, tmp_path: Path, capsys) -> None:
    spec, store, _ = built
    out = tmp_path / "out"
    assert main(["export", str(spec), "--store", str(store), "--to", str(out)]) == 0
    assert "exported" in capsys.readouterr().out
    script = out / "host-script" / "dev-h100" / "provision.sh"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    config = out / "triton-repo" / "dev-h100" / "tiny" / "config.pbtxt"
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    assert (out / "release.json").read_bytes() == (tmp_path / "m.json").read_bytes()
    s = LocalStore(store)
    for a in json.loads((out / "release.json").read_text(encoding="utf-8"))["artifacts"]:
        for e in s.tree(a["tree"]):
            assert _sha(out / a["id"] / e.path) == e.digest, (a["id"], e.path)
    # again, into the same directory: files are replaced, not refused
    assert main(["export", str(spec), "--store", str(store), "--to", str(out)]) == 0


def test_export_selects_by_id_or_kind_glob_and_by_release_digest(built, tmp_path: Path, capsys) -> None:
    spec, store, build_out = built
    digest = re.match(r"release (sha256:[0-9a-f]{64})", build_out).group(1)
    assert main(["export", str(spec), "--store", str(store), "--to", str(tmp_path / "a"),
                 "--only", "host-script/*", "--only", "triton-repo"]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["host-script", "release.json", "triton-repo"]
    assert main(["export", digest, "--store", str(store), "--to", str(tmp_path / "b"), "--only", "spec-snapshot"]) == 0
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["release.json", "spec-snapshot"]
    capsys.readouterr()
    assert main(["export", str(spec), "--store", str(store), "--to", str(tmp_path / "c"), "--only", "quantise/*"]) == 2
    assert "no artifact matches 'quantise/*'" in capsys.readouterr().err


def test_export_refuses_a_release_of_another_version_of_the_spec(built, tmp_path: Path, capsys) -> None:
    spec, store, _ = built
    spec.write_text(spec.read_text(encoding="utf-8").replace("max_queue_size: 16", "max_queue_size: 32"),
                    encoding="utf-8")
    assert main(["export", str(spec), "--store", str(store), "--to", str(tmp_path / "out")]) == 2
    assert "built from another version" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["export", str(spec), "--store", str(tmp_path / "nothing"), "--to", str(tmp_path / "out")]) == 2
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "nothing").exists()


def test_show_prints_one_file_or_lists_an_artifact(built, tmp_path: Path, capsys) -> None:
    spec, store, _ = built
    assert main(["export", str(spec), "--store", str(store), "--to", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["show", str(spec), "host-script/dev-h100/provision.sh", "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("#!/usr/bin/env bash\n")
    assert shown == (tmp_path / "out" / "host-script" / "dev-h100" / "provision.sh").read_text(encoding="utf-8")
    assert main(["show", str(spec), "host-script/dev-h100", "--store", str(store)]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^rwxr-xr-x +\d+ host-script/dev-h100/provision\.sh$", listing, re.M), listing
    assert main(["show", str(spec), "host-script/dev-h100/nope.sh", "--store", str(store)]) == 2
    assert "has no file 'nope.sh'" in capsys.readouterr().err


def _release_with(store: LocalStore, path: str) -> str:
    """A release whose one artifact's tree names `path` (what a tampered store could hold)."""
    blob = store.put_bytes(b"#!/bin/sh\necho pwned\n")
    tree = store.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": [
        {"path": path, "digest": blob, "size": 21, "executable": True}]}))
    manifest = pretty_json({"kind": "kiln.release/v1", "complete": True, "spec": {"name": "evil", "digest": "x"},
                            "artifacts": [{"id": "host-script/h", "kind": "host-script", "key": "sha256:" + "0" * 64,
                                                           "tree": tree}]})
    return store.add_release("evil", manifest)


@pytest.mark.parametrize("path", ["../escaped.sh", "a/../../escaped.sh", "/tmp/escaped.sh", "a//b", "./a"])
def test_export_never_writes_outside_the_target(tmp_path: Path, capsys, path: str) -> None:
    store = LocalStore(tmp_path / "store")
    digest = _release_with(store, path)
    out = tmp_path / "deep" / "out"
    assert main(["export", digest, "--store", str(store.root), "--to", str(out)]) == 1
    err = capsys.readouterr().err
    # the store refuses the tree as it reads it (records.tree_path_problem), before export sees a path
    assert repr(path) in err and ("leaves the artifact" in err or "is absolute" in err), err
    assert not list((tmp_path / "deep").rglob("*.sh")) and not (tmp_path / "escaped.sh").exists()


def test_export_does_not_follow_a_symbolic_link_in_the_target(tmp_path: Path, capsys) -> None:
    store = LocalStore(tmp_path / "store")
    digest = _release_with(store, "provision.sh")
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    out.mkdir()
    os.symlink(elsewhere, out / "host-script")
    assert main(["export", digest, "--store", str(store.root), "--to", str(out)]) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []
