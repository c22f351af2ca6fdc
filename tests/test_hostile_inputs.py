"""Hostile user-written inputs (issue 25): YAML aliases that never end, the lock file and tune records
as deep JSON, huge numbers, NaN and links out of the repository or to a device or FIFO, strings
holding lone surrogates or terminal control sequences. Each is answered with a positioned diagnostic
and exit 1, never a crash (exit 3), an unbounded read or a raw control character on the terminal."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.boundedjson import BoundedJSONError, loads_bounded
from compiler.cli import main
from compiler.diagnostics import Diagnostic, Severity, Span
from compiler.diagnostics.render import render_json, render_sarif, render_text, shown
from compiler.ir.lockfile import LockError, parse_lock
from compiler.ir.measured import RecordError, parse_record
from compiler.pipeline import validate_path
from compiler.spec.loader import MAX_NODES, load_text

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
DATA = Path(__file__).parent / "data" / "tune"


def _kiln(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return int(code), out.getvalue(), err.getvalue()


def _repo(tmp_path: Path) -> Path:
    """The quickstart in a git work tree of its own (the lock file's confinement root)."""
    for name in ("model", "data"):
        shutil.copytree(QUICKSTART / name, tmp_path / name)
    shutil.copy(QUICKSTART / "kiln.yaml", tmp_path / "kiln.yaml")
    (tmp_path / ".git").mkdir()
    return tmp_path / "kiln.yaml"


# --- YAML: aliases and merge keys ----------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "kiln: v1\nx: &x {<<: *x}\n",  # the hostile review's RecursionError
    "kiln: v1\nx: &x {<<: [*x, *x]}\n",
    "kiln: v1\nx: &x [*x]\n",
    "kiln: v1\nx: &x {a: *x}\n",
    "kiln: v1\nx: &x {a: [{b: {<<: *x}}]}\n",
])
def test_an_alias_inside_its_own_anchor_is_k003_at_the_anchor(text: str) -> None:
    loaded = load_text(text, "kiln.yaml")
    assert loaded.document is None
    assert [(d.code, d.span.line, d.span.column) for d in loaded.diagnostics] == [("K003", 2, 4)]
    assert "expands without end" in loaded.diagnostics[0].message


def test_merge_keys_count_towards_the_value_budget() -> None:
    # each level merges the one above twice: 2**40 merges of an empty mapping, no values at all
    text = "kiln: v1\na0: &a0 {}\n" + "".join(f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}]}}\n" for i in range(1, 41))
    loaded = load_text(text, "kiln.yaml")
    assert [d.code for d in loaded.diagnostics] == ["K003"]
    assert f"more than {MAX_NODES} values" in loaded.diagnostics[0].message


def test_a_merge_of_a_mapping_keeps_working() -> None:
    loaded = load_text("kiln: v1\nbase: &b {x: 1, y: 2}\nuse: {<<: *b, y: 3}\n", "kiln.yaml")
    assert loaded.diagnostics == [] and loaded.document.data["use"] == {"y": 3, "x": 1}


# --- strings no UTF-8 text can hold, and control characters --------------------------------------
@pytest.mark.parametrize("where, edit", [
    ("name", ("name: quickstart", 'name: "q\\udc80"')),
    ("model key", ("  tiny:\n", '  "t\\ud800iny":\n')),
    ("host key", ("  dev-h100:", '  "dev\\udfff":')),
    ("serves", ("serves: tiny}", 'serves: "tiny\\ud800"}')),
])
def test_a_lone_surrogate_is_k009_where_it_is_written(tmp_path: Path, where: str, edit: tuple[str, str]) -> None:
    spec = _repo(tmp_path)
    text = spec.read_text(encoding="utf-8")
    assert edit[0] in text, where
    spec.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    line = next(i for i, ln in enumerate(spec.read_text(encoding="utf-8").splitlines(), 1) if "\\ud" in ln)
    for fmt in ("text", "json", "sarif"):
        code, out, err = _kiln(["validate", "--format", fmt, str(spec)])
        assert code == 1, err
        if fmt == "text":
            assert f"kiln.yaml:{line}:" in out and "lone surrogate" in out and "[K009]" in out
        else:
            json.loads(out)  # valid JSON


def test_control_characters_in_a_name_are_shown_escaped(tmp_path: Path) -> None:
    spec = _repo(tmp_path)
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("  dev-h100:", '  "dev\\x1b]0;pwned\\x07\\x1b[2J\\nforged: error\\u202e":', 1),
                    encoding="utf-8")
    code, out, _ = _kiln(["validate", str(spec)])
    assert code == 1 and "[K106]" in out
    assert not any(c in out for c in "\x1b\x07\u202e"), out
    assert "dev\\x1b]0;pwned\\x07\\x1b[2J\\nforged: error\\u202e" in out
    assert not any(line.startswith("forged") for line in out.splitlines())
    code, out, _ = _kiln(["validate", "--format", "json", str(spec)])
    message = json.loads(out)["diagnostics"][0]["message"]  # faithful: the name as written
    assert "dev\x1b]0;pwned\x07\x1b[2J\nforged: error\u202e" in message and "\x1b" not in out


def test_every_rendering_survives_any_character() -> None:
    nasty = "a\x1b[2J\x07\n\r\t\u202e\u2066\u200b\u2028\x85\udc80\ud800\U000e0041b"
    d = Diagnostic("K106", Severity.ERROR, nasty, "f" + nasty + ".yaml", Span(1, 4, 1, 7), nasty, (nasty,))
    text = render_text([d], {d.file: "x: " + nasty + "\n"})
    text.encode("utf-8")  # no surrogate left
    assert all(c.isprintable() or c == "\n" for c in text)
    assert len(text.splitlines()) == 5  # head, source line, caret, note, help: nothing forged
    assert shown("\x1b") == "\\x1b" and shown("\u202e") == "\\u202e" and shown("\udc80") == "\\udc80"
    assert shown("Ünïcödé 名前 🚀") == "Ünïcödé 名前 🚀"  # printable text of any script is left alone
    caret = text.splitlines()[2]
    # the caret under the escaped value: after "x: ", as wide as "a\x1b[" is shown
    assert caret.index("^") - caret.index("|") - 2 == len("x: ") and caret.count("^") == len("a\\x1b[")
    for out in (render_json([d]), render_sarif([d], "0")):
        # valid for a strict reader too: no lone surrogate, even escaped; control characters as JSON escapes
        json.dumps(json.loads(out), ensure_ascii=False).encode("utf-8")
        doc = json.loads(out)
        message = doc["runs"][0]["results"][0]["message"]["text"] if "runs" in doc else doc["diagnostics"][0]["message"]
        assert message.startswith("a\x1b[2J\x07\n\r\t\u202e") and "\\udc80" in message  # faithful but surrogates


def test_a_path_from_the_command_line_with_undecodable_bytes_does_not_crash(tmp_path: Path) -> None:
    name = os.fsdecode(b"\xff\x1b[2J.yaml")
    spec = _repo(tmp_path)
    spec.rename(tmp_path / name)
    proc = subprocess.run([sys.executable, "-m", "compiler", "validate", str(tmp_path / name)], capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stdout and b"\\x1b[2J.yaml: no problems found" in proc.stdout


# --- bounded JSON -----------------------------------------------------------------------------
@pytest.mark.parametrize("text, says, line, column", [
    ('{"a":\n  Infinity}', "Infinity is not JSON", 2, 3),
    ('[1, -Infinity]', "-Infinity is not JSON", 1, 5),
    ('{"a": NaN}', "NaN is not JSON", 1, 7),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels", 1, 65),
    ('{"x": ' + "9" * 5000 + "}", "a number of 5000 characters", 1, 7),
    ("[1e999]", "too large", 1, 2),
    ('{"a": tru}', "not JSON", 1, 7),
])
def test_bounded_json_refuses_with_a_position(text: str, says: str, line: int, column: int) -> None:
    with pytest.raises(BoundedJSONError) as e:
        loads_bounded(text)
    assert says in e.value.message and (e.value.line, e.value.column) == (line, column)
    assert isinstance(e.value, ValueError)


def test_bounded_json_reads_json_and_leaves_strings_alone() -> None:
    assert loads_bounded('{"s": "NaN [[[ 1e999 \\" {", "n": [1.5e3, -2]}') == {"s": 'NaN [[[ 1e999 " {',
                                                                             "n": [1500.0, -2]}
    with pytest.raises(BoundedJSONError, match="longer than 4"):
        loads_bounded("[1, 2]", max_chars=4)


# --- the lock file ------------------------------------------------------------------------------
GOOD_LOCK = {"kind": "kiln.lock/v1", "spec": "quickstart", "placements": {"dev-h100": {"0": [
    {"profile": "1g.10gb", "serves": "tiny", "start": 0}, {"profile": "1g.10gb", "serves": "tiny-awq", "start": 1}]}}}


@pytest.mark.parametrize("text, says", [
    (json.dumps(GOOD_LOCK).replace('"start": 0', '"start": Infinity'), "Infinity is not JSON"),
    (json.dumps(GOOD_LOCK).replace('"start": 0', '"start": NaN'), "NaN is not JSON"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    (json.dumps(GOOD_LOCK).replace('"start": 0', '"start": ' + "9" * 5000), "a number of 5000"),
    (json.dumps(GOOD_LOCK).replace('"start": 0', '"start": 1e999'), "too large"),
    (json.dumps(GOOD_LOCK).replace('"start": 0', '"start": 99999'), "start (a slot number)"),
    (json.dumps(GOOD_LOCK).replace('"start": 0', '"start": true'), "start (a slot number)"),
    (json.dumps(GOOD_LOCK).replace('"profile": "1g.10gb"', '"profile": 7', 1), "profile and serves"),
    (json.dumps(GOOD_LOCK).replace('"0": [', '"\\u00b2": ['), "expected a GPU index"),
    ('[1]', "not a Kiln lock file"), ('"x"', "not a Kiln lock file"), ("null", "not a Kiln lock file"),
    ('{"kind": "kiln.lock/v1", "placements": {"h": []}}', "placements.h is not an object"),
    ('{"kind": "kiln.lock/v1", "placements": {"h": {"0": [1, "x"]}}}', "each instance needs"),
    ('{"kind": "kiln.lock/v1", "placements": {"h": {"0": {}}}}', "expected a GPU index"),
])
def test_a_lock_file_that_is_not_one_is_k912(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(LockError, match=None) as e:
        parse_lock(text)
    assert says in e.value.message
    spec = _repo(tmp_path)
    (tmp_path / "kiln.lock").write_text(text, encoding="utf-8")
    code, out, err = _kiln(["validate", str(spec)])
    assert code == 1 and not err, err
    assert f"kiln.lock:{e.value.line}:{e.value.column}: error: not a valid lock file" in out and "[K912]" in out


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero", "../outside.lock"])
def test_a_lock_file_linked_out_of_the_repository_is_k915_and_never_read(tmp_path: Path, target: str) -> None:
    spec = _repo(tmp_path / "repo")
    (tmp_path / "outside.lock").write_text(json.dumps(GOOD_LOCK), encoding="utf-8")
    (tmp_path / "repo" / "kiln.lock").symlink_to(target)
    code, out, _ = _kiln(["validate", str(spec)])
    assert code == 1 and "kiln.lock:1:1: error: lock file" in out and "outside the spec's repository" in out
    assert "[K915]" in out
    code, _, err = _kiln(["lock", str(spec)])  # not overwritten through the link either
    assert code == 1 and "[K915]" in err
    assert os.path.islink(tmp_path / "repo" / "kiln.lock")


def test_a_fifo_or_directory_as_the_lock_file_is_k912_without_blocking(tmp_path: Path) -> None:
    spec = _repo(tmp_path)
    os.mkfifo(tmp_path / "kiln.lock")  # nothing ever writes to it: reading it would wait forever
    proc = subprocess.run([sys.executable, "-m", "compiler", "validate", str(spec)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 1 and "kiln.lock:1:1: error: cannot read the lock file: not a regular file" in proc.stdout
    os.unlink(tmp_path / "kiln.lock")
    (tmp_path / "kiln.lock").mkdir()
    code, out, _ = _kiln(["validate", str(spec)])
    assert code == 1 and "not a regular file [K912]" in out


def test_kiln_lock_replaces_an_unusable_lock_and_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    spec = _repo(tmp_path / "repo")
    lock = tmp_path / "repo" / "kiln.lock"
    lock.write_text("[" * 1000, encoding="utf-8")
    victim = tmp_path / "victim"
    (tmp_path / "repo" / "kiln.lock.tmp").symlink_to(victim)  # the name a naive writer uses
    code, out, err = _kiln(["lock", str(spec)])
    assert code == 0, err
    assert not victim.exists()
    assert json.loads(lock.read_text(encoding="utf-8"))["kind"] == "kiln.lock/v1"
    assert _kiln(["lock", "--check", str(spec)])[0] == 0
    assert [p.name for p in lock.parent.iterdir() if p.name.startswith(".kiln.lock")] == []


# --- tune records ---------------------------------------------------------------------------------
def _tuned(tmp_path: Path) -> tuple[Path, Path]:
    from tests.test_tune_records import _quickstart

    spec = _quickstart(tmp_path, "grid")
    (tmp_path / ".git").mkdir()
    return spec, tmp_path / "tune" / "dev-h100.gpu0.mig0.json"


@pytest.mark.parametrize("edit, says", [
    (lambda t: "[" * 100_000 + "]" * 100_000, "nested deeper than 16 levels"),
    (lambda t: t.replace('"concurrency": 1,', '"concurrency": ' + "9" * 5000 + ",", 1), "a number of 5000"),
    (lambda t: t.replace('"concurrency": 1,', '"concurrency": Infinity,', 1), "Infinity is not JSON"),
    (lambda t: t.replace('"threshold": 40.0', '"threshold": NaN', 1), "NaN is not JSON"),
    (lambda t: "[]", "not a measurement record"),
    (lambda t: t.replace('"kind": "kiln.tune/v2"', '"kind": "kiln.tune/v2", "\\udc80": 1', 1), "valid string"),
])
def test_a_tune_record_that_is_not_one_is_k913_with_its_position(tmp_path: Path, edit, says: str) -> None:
    spec, record = _tuned(tmp_path)
    record.write_text(edit(record.read_text(encoding="utf-8")), encoding="utf-8", errors="surrogatepass")
    code, out, err = _kiln(["validate", str(spec)])
    assert code == 1 and not err, err
    assert "[K913]" in out and says in out, out
    out.encode("utf-8")


def test_a_record_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    spec, record = _tuned(tmp_path)
    record.unlink()
    os.mkfifo(record)
    proc = subprocess.run([sys.executable, "-m", "compiler", "validate", str(spec)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 1 and "[K9" in proc.stdout, proc.stdout + proc.stderr


def test_a_huge_measured_concurrency_gives_at_most_the_largest_batch_limit(tmp_path: Path) -> None:
    """The largest concurrency a record may hold is capped at the largest batch limit; past the
    record's own bound it is K913 at the field."""
    from compiler.ir.measured import MAX_CONCURRENCY
    from tests.quickstart import on_engine_target

    spec, record = _tuned(tmp_path)
    spec.write_text(on_engine_target(spec.read_text(encoding="utf-8")), encoding="utf-8")
    doc = json.loads(record.read_text(encoding="utf-8"))
    doc["result"]["concurrency"] = MAX_CONCURRENCY
    record.write_text(json.dumps(doc), encoding="utf-8")
    rm = validate_path(spec).resolved.models["tiny"]
    assert MAX_CONCURRENCY > 65536
    assert rm.measured.limit == 65536 and "capped at 65536" in rm.measured.derivation
    doc["result"]["concurrency"] = 10 ** 30
    record.write_text(json.dumps(doc), encoding="utf-8")
    result = validate_path(spec)
    assert [d.code for d in result.diagnostics if d.is_error] == ["K913"]
    assert "result.concurrency" in result.diagnostics[0].message


def test_parse_record_refuses_deep_and_huge_json_as_record_errors() -> None:
    text = (DATA / "grid" / "record.json").read_text(encoding="utf-8")
    for bad in ("[" * 5000, text.replace('"seed": ', '"seed": 1' + "0" * 4999 + ", \"x\": ", 1)):
        with pytest.raises(RecordError):
            parse_record(bad)


def test_a_models_config_json_that_is_a_fifo_is_k903_without_blocking(tmp_path: Path) -> None:
    spec = _repo(tmp_path)
    (tmp_path / "model" / "config.json").unlink()
    os.mkfifo(tmp_path / "model" / "config.json")
    proc = subprocess.run([sys.executable, "-m", "compiler", "validate", str(spec)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 1 and "config.json: not a regular file [K903]" in proc.stdout, proc.stdout + proc.stderr
