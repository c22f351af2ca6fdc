"""The store restored from a shared disk or a CI cache, with anything in it (issue 25).

Each test reproduces a defect a hostile review found: links in the store's folders made `kiln store
gc` and `verify --repair` delete files outside the store; a FIFO or a link to /dev/zero in place of
a store file hung a build or read 24 GB; deep JSON, huge integers, a directory where a file belongs
and over-long tree names crashed build, verify, gc and export (exit 3); a log that could not be
written crashed the build; and concurrent builds of one spec lost a release from its history. They
run the real command line, in process or as processes (where a hang or the memory is the defect),
on real stores built from the quickstart example.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.build import build_spec
from compiler.cli import main
from compiler.store.canonical import canonical_json, pretty_json
from compiler.store.local import LocalStore, StoreError

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
RELEASE_LINE = re.compile(r"^release (sha256:[0-9a-f]{64}):", re.M)


@pytest.fixture(autouse=True)
def _bare_builder(monkeypatch):
    """Build as a builder without torch, a GPU or the network (model actions are deferred)."""
    monkeypatch.setenv("KILN_BUILDER_HAS", "")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return int(code), out.out, out.err


def kiln(*argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """The command line as a process, with 2 GiB of memory: a hang or an unbounded read fails the test."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-m", "compiler", *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KILN_BUILDER_HAS": ""}, preexec_fn=limit)


def quickstart(root: Path, queue: int = 16) -> Path:
    """A copy of the quickstart spec; `queue` makes another revision of it (another release)."""
    shutil.copytree(QUICKSTART, root, dirs_exist_ok=True)
    spec = root / "kiln.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("max_queue_size: 16,", f"max_queue_size: {queue},", 1), encoding="utf-8")
    return spec


@pytest.fixture
def built(tmp_path: Path):
    """(spec, store, outcome) of the quickstart built once."""
    spec = quickstart(tmp_path / "spec")
    store = LocalStore(tmp_path / "store")
    outcome = build_spec(spec, store)
    assert not outcome.failed and outcome.manifest_digest is not None
    return spec, store, outcome


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the store with files in it: nothing Kiln does to a store may touch it."""
    d = tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (d / "keep.txt").write_text("precious\n")
    (d / "sub" / "deep.txt").write_text("also precious\n")
    (d / "0123.json").write_text("{}\n")
    return d


def snapshot(d: Path) -> dict[str, bytes]:
    out = {}
    for top, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(top) / name
            out[str(p.relative_to(d))] = b"<dir>" if p.is_dir() else p.read_bytes()
    return out


def links_in(root: Path) -> list[Path]:
    return [Path(top) / n for top, dirs, files in os.walk(root) for n in dirs + files if (Path(top) / n).is_symlink()]


def record_paths(store: LocalStore) -> list[Path]:
    """The action records (not what a planted link leads to)."""
    shards = [d for d in (store.root / "actions").iterdir() if d.is_dir() and not d.is_symlink()]
    return sorted(p for d in shards for p in d.glob("*.json") if not p.is_symlink())


def unused_shard(folder: Path) -> str:
    return next(f"{i:02x}" for i in range(256) if not (folder / f"{i:02x}").exists())


# --- 1: links never lead maintenance out of the store ---------------------------------------------
def plant_links(store: LocalStore, outside: Path) -> list[Path]:
    """A link to `outside` (or a file in it) in every store folder, with Kiln's names and others, and
    links in place of store files (an action record, the digest cache)."""
    root = store.root
    planted = []

    def link(path: Path, target: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
        planted.append(path)

    for folder in ("objects", "objects/sha256", "actions", "refs", "releases", "logs", "tmp"):
        link(root / folder / "kiln-link", outside)
    blob_shard = sorted(d for d in (root / "objects" / "sha256").iterdir() if not d.is_symlink())[0]
    link(blob_shard / (blob_shard.name + "f" * 62), outside / "keep.txt")  # named as an object
    link(root / "objects" / "sha256" / unused_shard(root / "objects" / "sha256"), outside)
    rec_shard = record_paths(store)[0].parent
    link(rec_shard / "kiln-link", outside)
    link(rec_shard / (rec_shard.name + "e" * 62 + ".json"), outside / "0123.json")  # named as a record
    link(root / "actions" / unused_shard(root / "actions"), outside)
    link(root / "refs" / "quickstart" / "kiln-link", outside)
    link(root / "refs" / "evil", outside)
    link(root / "releases" / "evil.jsonl", outside / "keep.txt")
    link(root / "logs" / ("d" * 64 + ".log"), outside)
    link(root / "tmp" / "work-kiln", outside)
    # in place of store files: a record (its content, valid, moved outside) and the digest cache
    record = record_paths(store)[-1]
    shutil.copyfile(record, outside / "moved-record.json")
    record.unlink()
    link(record, outside / "moved-record.json")
    (root / "digest-cache.json").unlink()
    link(root / "digest-cache.json", outside / "keep.txt")
    return planted


@pytest.mark.parametrize("order", [("gc", "repair", "gc"), ("repair", "gc")], ids=["gc-first", "repair-first"])
def test_links_in_every_store_folder_are_reported_and_nothing_outside_is_touched(built, outside, capsys,
                                                                                  order) -> None:
    spec, store, _ = built
    planted = plant_links(store, outside)
    before = snapshot(outside)
    said = ""
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1, out + err
    for i, step in enumerate(order):
        argv = ["store", "gc", "--keep", "1"] if step == "gc" else ["store", "verify", "--repair"]
        rc, out, err = cli(capsys, *argv, "--store", str(store.root))
        assert rc == 1 if i == 0 else rc in (0, 1), out + err  # the first finds entries Kiln did not write
        if step == "gc" and "repair" not in order[:i]:  # a history that is a link stops gc (issue 36)
            assert "releases/evil.jsonl" in err and "nothing was removed" in err, err
            continue
        assert not err, err
        said += out
    assert snapshot(outside) == before
    for path in planted:
        assert str(path) in said, f"{path} was not reported:\n{said}"
    assert links_in(store.root) == []
    assert "its target was not touched" in said
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 0, out + err
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 0, out + err
    assert snapshot(outside) == before


@pytest.mark.parametrize("folder", ["objects", "objects/sha256", "actions", "refs", "releases", "logs", "tmp"])
def test_a_store_folder_that_is_a_link_stops_gc_and_repair_replaces_the_link_only(built, outside, capsys,
                                                                                 folder: str) -> None:
    spec, store, _ = built
    moved = store.root / folder
    shutil.move(moved, outside / "moved")  # the store's own content now lives outside, behind a link
    os.symlink(outside / "moved", moved)
    before = snapshot(outside)
    rc, out, err = cli(capsys, "store", "gc", "--store", str(store.root), "--keep", "1")
    assert rc == 1 and str(moved) in err and "nothing was removed" in err, out + err
    assert snapshot(outside) == before
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc in (0, 1) and "Traceback" not in err, out + err  # fails naming the folder if it must use it
    assert rc == 0 or str(moved) in err, err
    assert snapshot(outside) == before  # the build wrote nothing through the link, and read nothing there
    rc, out, err = cli(capsys, "store", "verify", "--repair", "--store", str(store.root))
    assert rc == 1 and str(moved) in out, out + err
    assert snapshot(outside) == before and not moved.is_symlink() and moved.is_dir()
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 0, out + err
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 0, out + err


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_release_history_that_is_not_a_file_stops_gc_before_it_removes_anything(built, outside, capsys,
                                                                                 kind: str) -> None:
    """Issue 36: gc dropped such a history as "not written by Kiln" and removed the spec's actions and
    objects in the same run; the release could not be exported any more."""
    spec, store, outcome = built
    history = store.root / "releases" / "quickstart.jsonl"
    if kind == "symlink":
        shutil.move(history, outside / "quickstart.jsonl")
        os.symlink(outside / "quickstart.jsonl", history)
    else:
        history.unlink()
        os.mkfifo(history)
    before = snapshot(store.root / "objects"), snapshot(store.root / "actions")
    rc, out, err = cli(capsys, "store", "gc", "--store", str(store.root), "--keep", "1")
    assert rc == 1 and str(history) in err and "nothing was removed" in err and "Traceback" not in err, out + err
    assert (snapshot(store.root / "objects"), snapshot(store.root / "actions")) == before
    rc, out, err = cli(capsys, "export", outcome.manifest_digest, "--store", str(store.root),
                       "--to", str(outside / "export"), "--allow-partial")
    assert rc == 0, out + err


# --- 2: special files are reported, never read (no hang, no unbounded read) -----------------------
def _targets(store: LocalStore, outcome) -> list[Path]:
    """Store files of every kind a build or maintenance reads."""
    record = record_paths(store)[0]
    tree = store.blob_path(outcome.results["host-plan/dev-h100"].tree)
    return [record, next((store.root / "refs" / "quickstart").iterdir()), store.root / "releases" / "quickstart.jsonl",
            store.root / "digest-cache.json", store.blob_path(outcome.manifest_digest), tree,
            next((store.root / "logs").iterdir())]


def _replace(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
        (path / "inside").write_text("x")


COMMANDS = [("build", "-q", "--allow-partial"), ("export",), ("store", "verify"),
            ("store", "gc", "--keep", "2"), ("store", "verify", "--repair"), ("build", "-q", "--allow-partial")]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_store_file_that_is_not_a_regular_file_is_reported_never_read(built, tmp_path: Path, kind: str) -> None:
    spec, store, outcome = built
    targets = _targets(store, outcome)
    for path in targets:
        _replace(path, kind)
    said = ""
    for command in COMMANDS:
        argv = list(command)
        if command[0] in ("build", "plan", "export"):
            argv.insert(1, str(spec))
        if command[0] == "export":
            argv += ["--to", str(tmp_path / "out")]
        done = kiln(*argv, "--store", str(store.root))  # a FIFO read would hang: the timeout fails it
        assert done.returncode in (0, 1, 4), f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        said += done.stdout + done.stderr
    assert str(targets[2]) in said and "not a regular file" in said, said  # the history (the build heals others)
    if kind != "directory":  # links and FIFOs are removed by --repair; the last build restored the rest
        done = kiln("store", "verify", "--store", str(store.root))
        assert done.returncode == 0, done.stdout + done.stderr
    else:  # a directory is not Kiln's to remove: it is reported, and left
        assert "left for you to remove" in said, said
        assert all(p.is_dir() for p in targets)


# --- 3: deep JSON, huge integers, over-long names -------------------------------------------------
DEEP = b"[" * 100_000
HUGE = b"1" * 5_000


@pytest.mark.parametrize("content", [DEEP, HUGE, b'{"a": ' + b"[" * 900 + b"]" * 900 + b"}", b"NaN"],
                         ids=["deep", "huge-int", "nested-900", "nan"])
def test_deep_json_and_huge_numbers_in_store_files_are_clear_errors(built, tmp_path: Path, capsys,
                                                                     content: bytes) -> None:
    spec, store, outcome = built
    history = store.root / "releases" / "quickstart.jsonl"
    history.write_bytes(history.read_bytes() + content + b"\n")
    record_paths(store)[0].write_bytes(content)
    next((store.root / "refs" / "quickstart").iterdir()).write_bytes(content)
    (store.root / "digest-cache.json").write_bytes(content)
    # a tree object that is valid by its digest but not a tree, named by a record and a release
    bad_tree = store.put_bytes(content)
    victim = record_paths(store)[1]
    victim.write_bytes(victim.read_bytes().replace(b'"tree":"', b'"tree":"' + bad_tree.encode() + b'","x":"'))
    for argv in (["build", str(spec), "-q", "--allow-partial"], ["plan", str(spec)], ["store", "verify"],
                 ["export", str(spec), "--to", str(tmp_path / "out")], ["store", "gc", "--keep", "3"],
                 ["store", "verify", "--repair"], ["build", str(spec), "-q", "--allow-partial"]):
        rc, out, err = cli(capsys, *argv, "--store", str(store.root))
        assert rc in (0, 1, 4), f"{argv}: {rc}\n{out}\n{err}"
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 0, out + err  # --repair dropped the bad line and files; the build rebuilt what they held
    assert store.releases("quickstart")[-1] == outcome.manifest_digest


def test_a_release_history_line_of_deep_json_is_dropped_by_repair(built, capsys) -> None:
    spec, store, outcome = built
    history = store.root / "releases" / "quickstart.jsonl"
    history.write_bytes(history.read_bytes() + DEEP + b"\n" + HUGE + b"\n")
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 1 and "line 2 is not a release digest" in out and str(history) in out, out + err
    rc, out, err = cli(capsys, "store", "verify", "--repair", "--store", str(store.root))
    assert rc == 1, out + err
    assert history.read_text() == f'"{outcome.manifest_digest}"\n'


def _release_with_tree(store: LocalStore, path: str) -> str:
    blob = store.put_bytes(b"x\n")
    tree = store.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": [
        {"path": path, "digest": blob, "size": 2, "executable": False}]}))
    manifest = pretty_json({"kind": "kiln.release/v1", "complete": True, "spec": {"name": "cached", "digest": "x"},
                            "artifacts": [{"id": "host-script/h", "kind": "host-script", "key": "sha256:" + "1" * 64,
                                           "tree": tree}]})
    return store.add_release("cached", manifest)


@pytest.mark.parametrize("path", ["a" * 300, "dir/" + "b" * 256, "é" * 128 + "/x"])
def test_a_tree_name_longer_than_a_filesystem_allows_is_refused_and_export_says_so(tmp_path: Path, capsys,
                                                                                   path: str) -> None:
    store = LocalStore(tmp_path / "store")
    digest = _release_with_tree(store, path)  # as fetched from a cache: Kiln never writes such a tree
    rc, out, err = cli(capsys, "export", digest, "--store", str(store.root), "--to", str(tmp_path / "out"))
    assert rc == 1 and "longer than 255 bytes" in err, out + err
    with pytest.raises(StoreError, match="longer than 255 bytes"):
        store.tree(store.put_bytes(canonical_json({"kind": "kiln.tree/v1", "files": [
            {"path": path, "digest": "sha256:" + "2" * 64, "size": 0, "executable": False}]})))


def test_export_to_a_place_that_cannot_be_written_is_a_clear_error(built, tmp_path: Path, capsys) -> None:
    spec, store, _ = built
    (tmp_path / "file").write_text("x")
    rc, out, err = cli(capsys, "export", str(spec), "--store", str(store.root), "--to", str(tmp_path / "file" / "out"))
    assert rc == 1 and str(tmp_path / "file") in err and "Traceback" not in err, out + err


# --- 3: a log that cannot be written ----------------------------------------------------------------
def test_a_log_that_cannot_be_written_fails_its_action_clearly_and_leaves_no_record(built, capsys) -> None:
    spec, store, outcome = built
    aid = "host-plan/dev-h100"
    key = outcome.results[aid].key
    store.drop_action(key)
    log = store.log_path(key)
    log.unlink()
    log.mkdir()  # os.replace onto it fails as a full disk would: an OSError while the log is copied
    (log / "x").write_text("x")
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 1 and aid in err + out and str(log) in err + out, out + err
    assert "Traceback" not in err and "internal error" not in err
    assert store.get_action(key) is None  # no record without its log: the next build runs it again
    shutil.rmtree(log)
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(store.root), "-q", "--allow-partial")
    assert rc == 0, out + err
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store.root))
    assert rc == 0, out + err


# --- issue 36: a reader that goes away ---------------------------------------------------------------
def kiln_unread(*argv: str) -> int:
    """The command line as a process whose stdout and stderr readers are gone before it writes."""
    proc = subprocess.Popen([sys.executable, "-m", "compiler", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT), "KILN_BUILDER_HAS": ""})
    proc.stdout.close()
    proc.stderr.close()
    return proc.wait(timeout=120)


def test_a_build_whose_reader_went_away_finishes_and_records_its_release(tmp_path: Path) -> None:
    """`kiln build | head` stopped at its first progress line, recorded no release, and exited 0."""
    spec = quickstart(tmp_path / "spec")
    store = LocalStore(tmp_path / "store")
    assert kiln_unread("build", str(spec), "--store", str(store.root), "--allow-partial") == 0
    assert len(store.releases("quickstart")) == 1


def test_a_failed_build_whose_reader_went_away_exits_1(built) -> None:
    """The first failure line met the closed pipe and the build exited 0."""
    spec, store, outcome = built
    key = outcome.results["host-plan/dev-h100"].key
    store.drop_action(key)
    log = store.log_path(key)
    log.unlink()
    log.mkdir()  # the action fails (its log cannot be written)
    (log / "x").write_text("x")
    assert kiln_unread("build", str(spec), "--store", str(store.root), "--allow-partial") == 1


# --- 4: concurrent writers of one release history ---------------------------------------------------
ADD_RELEASES = """
import sys
from compiler.store.local import LocalStore
store = LocalStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    store.add_release("race", b'{"writer": %s, "n": %d}' % (sys.argv[2].encode(), i))
"""


def test_concurrent_writers_of_one_history_lose_no_release(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    writers, each = 6, 40
    procs = [subprocess.Popen([sys.executable, "-c", ADD_RELEASES, str(store.root), str(w), str(each)],
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for w in range(writers)]
    assert [p.wait(timeout=120) for p in procs] == [0] * writers
    history = store.releases("race")
    assert len(history) == len(set(history)) == writers * each


def test_concurrent_builds_of_one_spec_keep_every_release_through_gc(tmp_path: Path, capsys) -> None:
    store = tmp_path / "store"
    specs = [quickstart(tmp_path / f"rev{i}", queue=16 + i) for i in range(4)]
    procs = [subprocess.Popen([sys.executable, "-m", "compiler", "build", str(s), "--store", str(store), "-q",
                               "--allow-partial"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "KILN_BUILDER_HAS": ""}) for s in specs]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(specs), "".join(e for _, e in outputs)
    releases = [RELEASE_LINE.search(out).group(1) for out, _ in outputs]
    assert len(set(releases)) == len(specs)
    assert set(LocalStore(store).releases("quickstart")) == set(releases)
    rc, out, err = cli(capsys, "store", "gc", "--store", str(store), "--keep", str(len(specs)))
    assert rc == 0, out + err
    rc, out, err = cli(capsys, "store", "verify", "--store", str(store))
    assert rc == 0, out + err
    for i, digest in enumerate(releases):  # every release's objects survived gc
        rc, out, err = cli(capsys, "export", digest, "--store", str(store), "--to", str(tmp_path / f"out{i}"),
                           "--allow-partial")  # model actions are deferred here: their artifacts are pending
        assert rc == 0, out + err


# --- issue 36: a folder swapped in while verify --repair runs ----------------------------------------
def test_an_entry_that_became_a_folder_is_left_for_the_next_verify_not_a_crash(tmp_path: Path) -> None:
    """`store verify --repair` listed a bad record, another process put a folder in its place, and
    the removal raised IsADirectoryError (exit 3). The folder is left (verify reports it next)."""
    from compiler.store import safeio

    (tmp_path / "actions" / "ab" / "record.json").mkdir(parents=True)
    (tmp_path / "actions" / "ab" / "record.json" / "inside").write_text("x")
    safeio.remove_entry(tmp_path, "actions/ab/record.json")
    assert (tmp_path / "actions" / "ab" / "record.json" / "inside").is_file()
    safeio.remove_tree(tmp_path, "actions/ab/record.json")
    assert not (tmp_path / "actions" / "ab" / "record.json").exists()


def test_export_to_a_full_disk_blames_the_destination_not_the_store(built, tmp_path: Path) -> None:
    """Issue 36: a write that failed (ENOSPC; here EFBIG, files capped at 4 KiB) was reported as a
    store object that cannot be read, with `kiln store verify --repair` as the fix."""
    spec, store, outcome = built

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    done = subprocess.run([sys.executable, "-m", "compiler", "export", outcome.manifest_digest, "--store",
                           str(store.root), "--to", str(tmp_path / "out"), "--only", "tokenizer/*"],
                          capture_output=True, text=True,
                          timeout=90, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=small_files)
    assert done.returncode == 1 and f"cannot write {tmp_path / 'out'}" in done.stderr, done.stderr
    assert "File too large" in done.stderr and "repair" not in done.stderr and "cannot be read" not in done.stderr
    assert "Traceback" not in done.stderr


# --- issue 36: a partial release says so ---------------------------------------------------------------
def test_a_partial_release_is_not_promised_whole_and_its_export_exits_4(tmp_path: Path, capsys) -> None:
    """The next-step line after a partial build promised every artifact; export exited 0 with
    artifacts pending."""
    spec = quickstart(tmp_path / "spec")
    rc, out, err = cli(capsys, "build", str(spec), "--store", str(tmp_path / "store"), "--allow-partial")
    assert rc == 0 and "deferred" in out, out
    nxt = next(line for line in out.splitlines() if line.startswith("next: "))
    assert "every artifact" not in nxt and "pending artifact(s)" in nxt and "--allow-partial" in nxt, nxt
    rc, out, err = cli(capsys, "export", str(spec), "--store", str(tmp_path / "store"), "--to", str(tmp_path / "a"))
    assert rc == 4 and "pending: quantize/tiny" in err and "pending, not exported" in out, out + err
    rc, out, err = cli(capsys, "export", str(spec), "--store", str(tmp_path / "store"), "--to", str(tmp_path / "b"),
                       "--allow-partial")
    assert rc == 0 and (tmp_path / "b" / "release.json").is_file(), out + err
