"""Property test: whatever is in a store's files, `kiln store verify`, `verify --repair`, `store gc`,
`export` and `plan` answer with a report or a clear error (exit 0, 1, 2 or 4), never a crash (exit 3,
an exception) or a hang, and never touch anything outside the store.

Each input is a built store (the quickstart example, built once per module) with one to three store
files mutated: action records, refs, the release history, the digest cache, tree and release
manifests (repointed so that they are read), objects and logs; as random bytes, deep JSON, huge
integers, JSON of another type, trees with hostile paths, or replaced by a link (to a directory
with files outside the store, to a file there, to /dev/zero), a FIFO or a directory.
benchmarks/fuzz_store.py runs the same strategies for as many inputs as asked."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import stat
import tempfile
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
HANG_S = 60  # a command that takes this long on a 2 MB store is hung (a FIFO read)

TARGETS = ["record", "ref", "history", "digest-cache", "tree", "manifest", "object", "log", "folder", "shard",
           "lock"]
REPLACEMENTS = ["link-dir", "link-file", "dev-zero", "fifo", "directory"]
FOLDERS = ["objects", "objects/sha256", "actions", "refs", "releases", "logs", "tmp"]


@st.composite
def hostile_json(draw) -> bytes:
    """JSON (or not quite) of the kinds that crashed readers: deep, huge numbers, other types."""
    kind = draw(st.sampled_from(["deep", "deep-object", "huge-int", "huge-float", "nan", "list", "string", "null",
                                 "number", "object", "bytes", "text"]))
    depth = draw(st.integers(1, 200_000))
    if kind == "deep":
        return b"[" * depth + b"]" * draw(st.integers(0, depth))
    if kind == "deep-object":
        return b'{"a":' * depth + b"1" + b"}" * draw(st.integers(0, depth))
    if kind == "huge-int":
        return b"-" * draw(st.integers(0, 1)) + b"9" * draw(st.integers(1, 100_000))
    if kind == "huge-float":
        return b"1e" + b"9" * draw(st.integers(1, 400))
    if kind == "nan":
        return draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b'{"duration_s": NaN}']))
    if kind == "list":
        return json.dumps(draw(st.lists(st.integers(), max_size=5))).encode()
    if kind == "string":
        return json.dumps(draw(st.text(max_size=40))).encode()
    if kind == "null":
        return b"null"
    if kind == "number":
        return draw(st.sampled_from([b"0", b"-1", b"1.5", b"1e308", b"true"]))
    if kind == "object":
        value = draw(st.dictionaries(st.sampled_from(["key", "params", "tree", "kind", "files", "artifacts", "path",
                                                      "digest", "size", "spec", "log", "duration_s", "action_id"]),
                                     st.one_of(st.none(), st.integers(), st.text(max_size=20), st.booleans(),
                                               st.lists(st.integers(), max_size=3), st.just({}),
                                               st.just("sha256:" + "a" * 64)), max_size=6))
        return json.dumps(value).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")


@st.composite
def hostile_tree(draw) -> bytes:
    """A tree manifest of the right kind whose entries break a rule: paths, sizes, digests, flags."""
    path = draw(st.one_of(
        st.sampled_from(["../x", "/etc/x", "a/../../x", "./a", "a//b", "", "a\x00b", "a" * 300, "d/" + "b" * 256,
                         "é" * 200, "a/" * 3000 + "x", "ok", "ok/inner", "\\x", "a\nb", "a\ud800b"]),
        st.text(max_size=60)))
    entry = {"path": path, "digest": draw(st.sampled_from(["sha256:" + "0" * 64, "sha256:zz", "", None, 5])),
             "size": draw(st.sampled_from([0, 2, -1, 10 ** 30, "2", None, True])),
             "executable": draw(st.sampled_from([True, False, None, "yes", 1]))}
    files = [entry] + draw(st.lists(st.just({"path": "ok", "digest": "sha256:" + "0" * 64, "size": 0,
                                             "executable": False}), max_size=2))
    return json.dumps({"kind": "kiln.tree/v1", "files": files}).encode("utf-8", "surrogatepass")


@st.composite
def hostile_manifest(draw) -> bytes:
    """A release manifest of the right kind with a hostile artifact id, kind, key or tree."""
    art = {"id": draw(st.one_of(st.sampled_from(["../x", "/abs", "a" * 300, "a\ud800", "ok/../..", "", "x/y"]),
                                st.text(max_size=30))),
           "kind": draw(st.sampled_from(["host-script", 5, None])),
           "key": draw(st.sampled_from(["sha256:" + "1" * 64, "k", None])),
           "tree": draw(st.sampled_from([None, "sha256:" + "2" * 64, "sha256:zz", 7]))}
    if draw(st.booleans()):
        art["pending"] = draw(st.sampled_from(["why", 5, None]))
    spec = draw(st.sampled_from([{"name": "quickstart", "digest": "x"}, {"name": 5}, None, "s"]))
    return json.dumps({"kind": "kiln.release/v1", "complete": True, "spec": spec,
                       "artifacts": [art]}).encode("utf-8", "surrogatepass")


@st.composite
def mutation(draw) -> tuple[str, str, object]:
    """(target, how, payload): how is 'content' (payload: bytes), 'replace' (payload: a replacement
    kind), 'append' (history: payload bytes added as a line) or 'structured' (a tree or release manifest
    of the right kind with hostile entries)."""
    target = draw(st.sampled_from(TARGETS))
    if target in ("folder", "shard", "lock"):
        return target, "replace", draw(st.sampled_from(REPLACEMENTS))
    how = draw(st.sampled_from(["content", "content", "replace", "append"] if target == "history"
                               else ["content", "content", "replace"]
                               + (["structured"] if target in ("tree", "manifest") else [])))
    if how == "replace":
        return target, how, draw(st.sampled_from(REPLACEMENTS))
    if how == "structured":
        return target, how, draw(hostile_tree() if target == "tree" else hostile_manifest())
    return target, how, draw(hostile_json())


mutations = st.lists(mutation(), min_size=1, max_size=3)


# --- applying a mutation to a store ---------------------------------------------------------------
def _regular_files(folder: Path, pattern: str) -> list[Path]:
    out = []
    for top, dirs, files in os.walk(folder):  # never into a link
        for name in files:
            p = Path(top) / name
            if not p.is_symlink() and p.is_file() and p.match(pattern):
                out.append(p)
    return sorted(out)


def _replace(path: Path, kind: str, outside: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-dir":
        os.symlink(outside, path)
    elif kind == "link-file":
        os.symlink(outside / "keep.txt", path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
        (path / "inside.txt").write_text("x\n")


def _write(path: Path, data: bytes) -> None:
    if path.is_symlink() or not path.is_file():
        return
    os.chmod(path, 0o644)
    path.write_bytes(data)


def apply(store: Path, target: str, how: str, payload, outside: Path, pick: int) -> None:
    """Mutate one store file (the `pick`-th of its kind) as the input says."""
    from compiler.store.local import LocalStore, sha256_bytes

    def nth(items: list[Path]) -> Path | None:
        return items[pick % len(items)] if items else None

    if target == "folder":
        folder = store / FOLDERS[pick % len(FOLDERS)]
        if folder.is_dir() and not folder.is_symlink():
            shutil.move(folder, outside / f"moved-{pick}")  # the store's own files, now behind a link
        _replace(folder, payload, outside)
        return
    if target == "lock":
        _replace(store / ("store.lock" if pick % 2 else "releases.lock"), payload, outside)
        return
    if target == "shard":
        base = store / ("objects/sha256" if pick % 2 else "actions")
        if Path(os.path.realpath(base)).is_relative_to(os.path.realpath(store)):
            _replace(base / f"{pick % 256:02x}", payload, outside)
        return
    path = {
        "record": lambda: nth(_regular_files(store / "actions", "*.json")),
        "ref": lambda: nth(_regular_files(store / "refs", "*")),
        "history": lambda: store / "releases" / "quickstart.jsonl",
        "digest-cache": lambda: store / "digest-cache.json",
        "object": lambda: nth(_regular_files(store / "objects", "*")),
        "log": lambda: nth(_regular_files(store / "logs", "*.log")),
        "tree": lambda: nth(_regular_files(store / "actions", "*.json")),
        "manifest": lambda: store / "releases" / "quickstart.jsonl",
    }[target]()
    if path is None or not Path(os.path.realpath(path.parent)).is_relative_to(os.path.realpath(store)):
        return  # a folder on the way was replaced by a link: the input does not write outside the store
    if how == "replace":
        _replace(path, payload, outside)
    elif how == "append":
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                with open(path, "ab") as f:
                    f.write(payload + b"\n")
    elif target == "tree":  # store the payload as an object and point a record at it, so it is read
        with contextlib.suppress(Exception):
            digest = LocalStore(store, create=False).put_bytes(payload)
            record = json.loads(path.read_bytes())
            record["tree"] = digest
            _write(path, json.dumps(record).encode())
    elif target == "manifest":  # a release manifest of this content, named by the history
        if path.is_symlink() or not path.is_file():  # (a FIFO put there by an earlier mutation would block)
            return
        with contextlib.suppress(Exception):
            digest = LocalStore(store, create=False).put_bytes(payload)
            with open(path, "ab") as f:
                f.write(json.dumps(digest).encode() + b"\n")
            assert sha256_bytes(payload) == digest
    else:
        _write(path, payload)


# --- running the commands -------------------------------------------------------------------------
COMMANDS = [["store", "verify"], ["plan", "{spec}"], ["export", "{spec}", "--to", "{out}"],
            ["store", "gc", "--keep", "2"], ["store", "verify", "--repair"], ["export", "{release}", "--to", "{out}"],
            ["store", "verify"]]


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung(f"no answer in {HANG_S}s")


@dataclass
class Outcome:
    crashes: list[tuple[list[str], str]]  # (argv, problem)
    codes: dict[int, int]
    outside_changed: bool


def snapshot(d: Path) -> dict[str, bytes]:
    out = {}
    for top, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(top) / name
            kind = os.lstat(p).st_mode
            out[str(p.relative_to(d))] = p.read_bytes() if stat.S_ISREG(kind) else str(kind).encode()
    return out


def make_outside(d: Path) -> Path:
    (d / "sub").mkdir(parents=True, exist_ok=True)
    (d / "keep.txt").write_text("precious\n")
    (d / "sub" / "deep.txt").write_text("also precious\n")
    return d


def run_commands(spec: Path, release: str, store: Path, out: Path) -> tuple[list[tuple[list[str], str]], dict[int, int]]:
    """Every command on the store: (crashes, exit code counts). A crash is an exit 3, an exception
    (KILN_DEBUG lets it through), a warning or a hang."""
    from compiler.cli import main

    crashes, codes = [], {}
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for command in COMMANDS:
            argv = [a.format(spec=spec, out=out, release=release) for a in command] + ["--store", str(store)]
            problem = None
            sink = io.StringIO()
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(sink), \
                    contextlib.redirect_stderr(sink):
                warnings.simplefilter("always")
                signal.alarm(HANG_S)
                try:
                    code = int(main(argv))
                except BaseException:  # noqa: BLE001 - what escapes is what the fuzzer looks for
                    code, problem = 3, traceback.format_exc()
                finally:
                    signal.alarm(0)
            codes[code] = codes.get(code, 0) + 1
            if problem is None and code == 3:
                problem = sink.getvalue()[-2000:]
            if problem is None and caught:
                problem = f"warning: {caught[0].category.__name__}: {caught[0].message}"
            if problem is not None:
                crashes.append((command, problem))
    finally:
        signal.signal(signal.SIGALRM, old)
    return crashes, codes


class Template:
    """The quickstart built once; each input works on a copy of its store."""

    def __init__(self) -> None:
        from compiler.build import build_spec
        from compiler.store.local import LocalStore

        self.dir = tempfile.TemporaryDirectory(prefix="kiln-fuzz-store-")
        root = Path(self.dir.name)
        shutil.copytree(ROOT / "examples" / "quickstart", root / "spec")
        self.spec = root / "spec" / "kiln.yaml"
        self.store = root / "template-store"
        old = os.environ.get("KILN_BUILDER_HAS")
        os.environ["KILN_BUILDER_HAS"] = ""
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                outcome = build_spec(self.spec, LocalStore(self.store))
        finally:
            if old is None:
                os.environ.pop("KILN_BUILDER_HAS", None)
            else:
                os.environ["KILN_BUILDER_HAS"] = old
        assert not outcome.failed and outcome.manifest_digest
        self.release = outcome.manifest_digest

    def one(self, muts: list[tuple[str, str, object]], pick: int) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="kiln-fuzz-input-", dir=self.dir.name) as tmp:
            work = Path(tmp)
            store = work / "store"
            shutil.copytree(self.store, store, symlinks=True)
            outside = make_outside(work / "outside")
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(HANG_S)  # the harness itself must not block on what an earlier mutation made
            try:
                for i, (target, how, payload) in enumerate(muts):
                    with contextlib.suppress(OSError, Hung):  # a mutation a former one made impossible
                        apply(store, target, how, payload, outside, pick + i)
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
            before = snapshot(outside)
            crashes, codes = run_commands(self.spec, self.release, store, work / "out")
            return Outcome(crashes, codes, snapshot(outside) != before)


_TEMPLATE: Template | None = None


def template() -> Template:
    global _TEMPLATE
    if _TEMPLATE is None:
        _TEMPLATE = Template()
    return _TEMPLATE


def teardown_module() -> None:
    if _TEMPLATE is not None:
        _TEMPLATE.dir.cleanup()


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutations, st.integers(0, 10_000))
def test_no_store_content_crashes_maintenance_export_or_plan_or_reaches_outside(muts, pick) -> None:
    os.environ["KILN_DEBUG"] = "1"  # an exception escapes main() and is seen here with its traceback
    try:
        outcome = template().one(muts, pick)
    finally:
        os.environ.pop("KILN_DEBUG", None)
    assert not outcome.crashes, outcome.crashes[0]
    assert not outcome.outside_changed
