"""The store against racing maintenance, corrupt files and hostile trees (issue 17, items 1, 4, 5, 6).

Each test reproduces a defect of an earlier Kiln: a tree naming '../' written outside the store,
`kiln store gc` removing a running build's artifacts, corrupt store files crashing build, verify and
gc (exit 3) or leaving the store stuck, and a corrupt object of the right size surviving a rebuild.
They run the real command line, in process or as processes, on real stores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compiler.build import build_spec, plan_spec
from compiler.cli import main
from compiler.store.canonical import canonical_json
from compiler.store.local import ActionRecord, LocalStore, StoreError, sha256_bytes
from compiler.store.maintenance import verify
from tests.test_store import RELEASE_LINE, build_cmd, built, cli, file_blob, flip_a_byte, generate_fleet, records, \
    run_env  # noqa: F401  (`built` is a fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _bare_builder(monkeypatch):
    """Build as a builder without torch, a GPU or the network (model actions are deferred)."""
    monkeypatch.setenv("KILN_BUILDER_HAS", "")


def _executed(out: str) -> int:
    m = RELEASE_LINE.search(out)
    assert m, out
    return int(m.group(2))


# --- item 1: a tree is never written outside its root ---------------------------------------------
def _hostile_tree(store: LocalStore, path: str) -> str:
    blob = store.put_bytes(b"written where it must not be\n")
    return store.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": [
        {"path": "ok.txt", "digest": blob, "size": 29, "executable": False},
        {"path": path, "digest": blob, "size": 29, "executable": True}]}))


@pytest.mark.parametrize("bad", ["../../escaped.txt", "/tmp/kiln-absolute-escape.txt", "a/../../escaped.txt",
                                 "./x", "a//b", ""])
def test_a_tree_naming_a_path_outside_is_refused_and_nothing_is_written(tmp_path: Path, bad: str) -> None:
    store = LocalStore(tmp_path / "store")
    tree = _hostile_tree(store, bad)
    dest = tmp_path / "a" / "b" / "dest"
    with pytest.raises(StoreError, match="tree manifest"):
        store.materialize(tree, dest)
    assert not (tmp_path / "a" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/kiln-absolute-escape.txt").exists()
    assert not dest.exists() or not any(dest.iterdir())


def test_a_tree_with_a_file_where_a_directory_must_be_is_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    blob = store.put_bytes(b"x")
    tree = store.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": [
        {"path": "a", "digest": blob, "size": 1, "executable": False},
        {"path": "a/b", "digest": blob, "size": 1, "executable": False}]}))
    with pytest.raises(StoreError, match="is a file and a directory"):
        store.tree(tree)


def test_materialize_never_follows_a_symbolic_link_out_of_its_destination(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "f.txt").write_text("inside")
    tree = store.put_tree(tmp_path / "src")
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside)  # planted before the write (a raced or leftover link)
    with pytest.raises(StoreError, match="not a directory"):
        store.materialize(tree, dest)
    assert list(outside.iterdir()) == []


def test_verify_reports_a_record_whose_tree_escapes_and_a_build_replaces_it(built, capsys) -> None:
    spec, store, outcome = built
    aid = "host-plan/b200-a"
    key = outcome.results[aid].key
    record = store.get_action(key)
    store.put_action(ActionRecord(key, record.kind, aid, _hostile_tree(store, "../../../escaped.txt"), 0.0, None))
    rc, out, _ = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1 and "leaves the artifact" in out, out
    # the next build does not trust it: it rebuilds the action (whose dependents materialize it)
    again = build_spec(spec, store)
    assert [r.id for r in again.executed] == [aid]
    assert verify(store) == []
    assert not (store.root.parent / "escaped.txt").exists()


# --- item 4: gc never removes what a running build may still reference -----------------------------
def test_gc_during_a_build_waits_until_its_release_is_recorded(tmp_path: Path, capsys) -> None:
    spec = generate_fleet(tmp_path / "spec", models=8)
    store = tmp_path / "store"
    build = subprocess.Popen(build_cmd(spec, store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=run_env())
    deadline = time.monotonic() + 60
    while build.poll() is None and time.monotonic() < deadline and not (store.is_dir() and records(store) >= 1):
        time.sleep(0.005)
    assert build.poll() is None, "the build finished before gc could start; make the fleet larger"
    gc = subprocess.run([sys.executable, "-m", "compiler", "store", "gc", "--store", str(store), "--keep", "1"],
                        capture_output=True, text=True, env=run_env(), timeout=120)
    out, err = build.communicate(timeout=120)
    assert build.returncode == 0, err
    assert gc.returncode == 0, gc.stderr
    rc, vout, _ = cli(capsys, "store", "verify", "--store", str(store))
    assert rc == 0, vout
    rc, again, err = cli(capsys, "build", str(spec), "--store", str(store), "-q", "--allow-partial")
    assert rc == 0 and _executed(again) == 0, again + err


def test_gc_in_a_loop_during_builds_then_verify_and_a_no_op_rebuild(tmp_path: Path, capsys) -> None:
    """The race of the acceptance: `kiln store gc` runs back to back while builds of three revisions
    of a spec (and two concurrent builds of the last one) run; the store verifies afterwards and
    the last revision rebuilds nothing."""
    spec = generate_fleet(tmp_path / "spec", models=6)
    store = tmp_path / "store"
    stop = threading.Event()
    gcs: list[subprocess.CompletedProcess] = []

    def gc_loop() -> None:
        while not stop.is_set():
            gcs.append(subprocess.run([sys.executable, "-m", "compiler", "store", "gc", "--store", str(store),
                                       "--keep", "1"], capture_output=True, text=True, env=run_env()))

    (store / "objects").mkdir(parents=True)  # gc needs a store to exist; the builds fill it
    LocalStore(store)
    looper = threading.Thread(target=gc_loop)
    looper.start()
    try:
        for size in (8, 16, 32):
            text = spec.read_text(encoding="utf-8")
            spec.write_text(re.sub(r"max_batch_size: \d+", f"max_batch_size: {size}", text), encoding="utf-8")
            proc = subprocess.run(build_cmd(spec, store), capture_output=True, text=True, env=run_env(), timeout=300)
            assert proc.returncode == 0, proc.stderr
        pair = [subprocess.Popen(build_cmd(spec, store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=run_env()) for _ in range(2)]
        for p in pair:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    finally:
        stop.set()
        looper.join()
    assert len(gcs) >= 3 and all(g.returncode == 0 for g in gcs), [g.stderr for g in gcs if g.returncode]
    rc, out, _ = cli(capsys, "store", "verify", "--store", str(store))
    assert rc == 0, out
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store), "-q", "--allow-partial")
    assert rc == 0 and _executed(out) == 0, out + err


# --- item 5: corrupt store files are reported, skipped or rebuilt, and repaired -------------------
def _key_of(outcome, aid: str) -> str:
    return outcome.results[aid].key


@pytest.mark.parametrize("content", [b"[]", b'{"key": 1}', b"null", b'"text"', b"{}", b"\xff\xfe"])
def test_an_action_record_of_the_wrong_shape_is_rebuilt_reported_and_repaired(built, capsys, content: bytes) -> None:
    spec, store, outcome = built
    aid = "host-plan/b200-a"
    store._action_path(_key_of(outcome, aid)).write_bytes(content)
    rc, out, err = cli(capsys, "plan", str(spec), "--store", str(store.root))
    assert rc == 0, err
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1 and "action record" in out, out + err
    rc, out, err = cli(capsys, "store", "gc", "--store", str(store.root), "--keep", "5")
    assert rc == 0, err
    again = build_spec(spec, store)
    assert [r.id for r in again.executed] == [aid] and again.manifest == outcome.manifest
    assert verify(store) == []


def test_a_release_history_cut_mid_line_does_not_stop_build_verify_or_gc(built, capsys) -> None:
    spec, store, outcome = built
    history = store.root / "releases" / "chat-prod.jsonl"
    good = history.read_text(encoding="utf-8")
    history.write_text(good + good[: len(good) // 2], encoding="utf-8")  # a second line, torn
    rc, out, _ = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1 and "line 2 is not a release digest" in out, out
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 0 and _executed(out) == 0, err
    assert history.read_text(encoding="utf-8") == good  # the build rewrote it without the torn line
    history.write_text(good + "{not json\n", encoding="utf-8")
    rc, out, err = cli(capsys, "store", "gc", "--store", str(store.root), "--keep", "1")
    assert rc == 0, err
    assert cli(capsys, "store", "verify", "--store", str(store.root))[0] == 0


@pytest.mark.parametrize("content", [b"[1, 2]", b'{"/x": 5}', b"\x00garbage", b'{"/x": [1, 2, "sha256:zz"]}'])
def test_a_digest_cache_of_the_wrong_type_is_ignored_reported_and_repaired(built, capsys, content: bytes) -> None:
    spec, store, outcome = built
    cache = store.root / "digest-cache.json"
    cache.write_bytes(content)
    rc, out, err = cli(capsys, "plan", str(spec), "--store", str(store.root))
    assert rc == 0, err
    cache.write_bytes(content)
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 0 and _executed(out) == 0, err
    cache.write_bytes(content)
    rc, out, _ = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1 and "digest cache" in out, out
    assert cli(capsys, "store", "verify", "--store", str(store.root), "--repair")[0] == 1
    assert cli(capsys, "store", "verify", "--store", str(store.root))[0] == 0


@pytest.mark.parametrize("content", [b"[]", b'{"key": "sha256:x", "params": []}', b'{"key": 3}', b"\xff"])
def test_a_ref_of_the_wrong_shape_does_not_break_plan_or_build(built, capsys, content: bytes) -> None:
    spec, store, outcome = built
    aid = "host-plan/b200-a"
    store._ref_path("chat-prod", aid).write_bytes(content)
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("graphics_mhz: 1965", "graphics_mhz: 1900", 1), encoding="utf-8")
    rc, out, err = cli(capsys, "plan", str(spec), "--store", str(store.root))
    assert rc == 0 and "host-plan/b200-a" in out, err
    rc, out, _ = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1 and "ref chat-prod/" in out, out
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 0, err
    assert cli(capsys, "store", "verify", "--store", str(store.root))[0] == 0  # the build wrote a good ref


def test_a_release_whose_manifest_is_gone_stops_gc_until_verify_repairs_it(built, capsys) -> None:
    spec, store, outcome = built
    store.blob_path(outcome.manifest_digest).unlink()
    rc, out, err = cli(capsys, "store", "gc", "--store", str(store.root), "--keep", "1")
    assert rc == 1 and "store verify --repair" in err and "Traceback" not in err, err
    assert _objects(store)  # nothing was removed
    rc, out, _ = cli(capsys, "store", "verify", "--store", str(store.root), "--repair")
    assert rc == 1 and "missing" in out
    assert cli(capsys, "store", "gc", "--store", str(store.root), "--keep", "1")[0] == 0
    assert cli(capsys, "store", "verify", "--store", str(store.root))[0] == 0


def _objects(store: LocalStore) -> set[str]:
    return {p.name for p in (store.root / "objects" / "sha256").glob("*/*")}


# --- item 6: an existing object is verified before it is trusted on write --------------------------
def test_a_corrupt_object_of_the_right_size_does_not_survive_a_rebuild(built) -> None:
    spec, store, outcome = built
    aid = "calibration-set/coder"
    digest = file_blob(store, outcome, aid)
    size = store.blob_path(digest).stat().st_size
    flip_a_byte(store.blob_path(digest))
    assert store.blob_path(digest).stat().st_size == size
    store.drop_action(_key_of(outcome, aid))  # the action runs again and writes the same object
    again = build_spec(spec, store)
    assert aid in [r.id for r in again.executed]
    assert verify(store) == []
    assert sha256_bytes(store.blob_path(digest).read_bytes()) == digest


def test_put_bytes_rewrites_a_corrupt_object(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    digest = store.put_bytes(b"payload")
    os.chmod(store.blob_path(digest), 0o644)
    store.blob_path(digest).write_bytes(b"PAYLOAD")
    assert store.put_bytes(b"payload") == digest
    assert store.read_bytes(digest) == b"payload"


# --- item 7: the store commands refuse what is not a store ----------------------------------------
def test_store_commands_refuse_a_missing_store_or_a_file(tmp_path: Path, capsys) -> None:
    typo = tmp_path / "no-such-store"
    for command in (["store", "verify"], ["store", "gc"]):
        rc, out, err = cli(capsys, *command, "--store", str(typo))
        assert rc == 2 and "no Kiln store" in err, out + err
        assert not typo.exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    spec = ROOT / "examples" / "quickstart" / "kiln.yaml"
    for argv in (["store", "verify", "--store", str(a_file)], ["plan", str(spec), "--store", str(a_file)],
                 ["build", str(spec), "--store", str(a_file)]):
        rc, out, err = cli(capsys, *argv)
        assert rc == 2 and "is not a directory" in err, (argv, out, err)


def test_build_refuses_a_manifest_path_that_is_a_directory_before_building(built, tmp_path: Path, capsys) -> None:
    spec, store, _ = built
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "--manifest", str(tmp_path))
    assert rc == 2 and "--manifest" in err and "is a directory" in err, out + err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "--manifest", str(a_file / "m.json"))
    assert rc == 2 and "is not a directory" in err, out + err


def test_add_release_keeps_the_good_lines_and_drops_a_torn_one(tmp_path: Path) -> None:
    """add_release rewrites the history; lines it cannot read are dropped, good ones kept in order."""
    store = LocalStore(tmp_path / "store")
    a, b = store.add_release("s", b"{}"), store.add_release("s", b'{"x": 1}')
    assert store.releases("s") == [a, b]
    assert store.add_release("s", b'{"x": 1}') == b and store.releases("s") == [a, b]
    path = store.root / "releases" / "s.jsonl"
    path.write_text(path.read_text() + '"sha256:12', encoding="utf-8")
    assert store.releases("s") == [a, b] and store.release_history("s")[1] == [3]
    json.loads(path.read_text().splitlines()[0])
