"""Property tests: whatever the input, the front end (and the whole pipeline) answers with a spec or
with positioned diagnostics; it never raises, and no library warning escapes (they are errors here).
`kiln plan` runs on a bounded number of mutated specs too (lowering, the store, the renderers);
benchmarks/fuzz_specs.py runs the same strategies through every command for as long as asked.

Two sources of inputs: structured mutations of the example specs (as Python data, dumped back to
YAML), and raw edits of the example files' text and bytes. The number of examples comes from the
hypothesis profile (tests/conftest.py: KILN_HYPOTHESIS_PROFILE=dev|ci)."""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib.util
import io
import json
import re
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from compiler.diagnostics import Diagnostic
from compiler.diagnostics.render import render_text
from compiler.spec.loader import load_bytes, load_text
from compiler.spec.parse import parse_document

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = sorted(ROOT.glob("examples/*/kiln.yaml"))
EXAMPLE_TEXTS = [p.read_text(encoding="utf-8") for p in EXAMPLE_FILES]
EXAMPLE_DATA = [YAML(typ="safe", pure=True).load(t) for t in EXAMPLE_TEXTS]
CODE = re.compile(r"K\d{3}")

HAVE_SEMANTIC = importlib.util.find_spec("compiler.semantic") is not None
# One scratch directory for the whole module (hypothesis does not mix with function-scoped fixtures),
# holding the examples' data files so that mutated specs still find what they name.
_SCRATCH = tempfile.TemporaryDirectory(prefix="kiln-fuzz-")
for _example in EXAMPLE_FILES:
    shutil.copytree(_example.parent, _SCRATCH.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.yaml"))


def teardown_module() -> None:
    _SCRATCH.cleanup()


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    """A library warning would reach the user's stderr: here it fails the input that caused it.
    What earlier tests of this process left for the garbage collector (a socket a Docker client held)
    is collected first, so that its ResourceWarning is not blamed on this input."""
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# --- checking one input -----------------------------------------------------------------------

def _check_diagnostics(diags: list[Diagnostic]) -> None:
    for d in diags:
        assert CODE.fullmatch(d.code), d
        assert d.span.line >= 1 and d.span.column >= 1, d
        assert isinstance(d.message, str) and d.message, d
    # what a terminal gets: every character printable (control sequences, surrogates shown escaped)
    text = render_text(diags, {})
    assert all(c.isprintable() for line in text.split("\n") for c in line), text


def check_front_end(text: str) -> str | None:
    """Checks load + parse; returns a key of the data when the front end found nothing, else None."""
    loaded = load_text(text, "kiln.yaml")
    diags = list(loaded.diagnostics)
    spec = None
    if loaded.document is not None:
        parsed = parse_document(loaded.document)
        diags += parsed.diagnostics
        spec = parsed.spec
    else:
        assert diags, "a file the loader refuses must say why"
    _check_diagnostics(diags)
    if not diags:
        assert spec is not None, "no diagnostics but no spec either"
    if spec is None:
        assert any(d.is_error for d in diags)
    if diags or loaded.document is None:
        return None
    return json.dumps(loaded.document.data, sort_keys=True, default=repr)


# Data of front-end-clean inputs already taken through the pipeline: an edit that changes only a
# comment or the layout gives the same data and the same (deterministic) result, so it is run once.
_SEEN_CLEAN: set[str] = set()


def check_pipeline(text: str, key: str | None) -> None:
    """Runs validate_path on `text`; `key` is check_front_end's answer for the same text."""
    if not HAVE_SEMANTIC:
        return
    from compiler.pipeline import validate_path

    # With front-end diagnostics the pipeline stops after load + parse, which check_front_end has
    # just run on the same text; only a clean front end reaches the semantic stage.
    if key is None or key in _SEEN_CLEAN:
        return
    if len(_SEEN_CLEAN) < 10_000:
        _SEEN_CLEAN.add(key)
    spec_dir = Path(_SCRATCH.name)
    path = spec_dir / "kiln.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = validate_path(path, display="kiln.yaml")
    _check_diagnostics(result.diagnostics)
    assert result.spec is not None, "the front end was clean on this text"


def check_bytes(raw: bytes) -> None:
    loaded = load_bytes(raw, "kiln.yaml")
    diags = list(loaded.diagnostics)
    if loaded.document is None:
        assert diags
    else:
        parsed = parse_document(loaded.document)
        diags += parsed.diagnostics
        if not diags:
            assert parsed.spec is not None
    _check_diagnostics(diags)


# --- values -----------------------------------------------------------------------------------

# Characters that break naive handling: RTL override and marks, zero-width, emoji, a combining mark,
# line and paragraph separators, escape and bell (control characters other than NUL).
_SPECIAL_TEXT = ["\u202eevil", "\u200f", "\u200b", "\U0001F680", "e\u0301", "a\u2028b", "\x1b[31m", "\x07",
                 "\x85", "'", '"', ": ", "- ", "#", "&a", "*a", "!tag", "{", "[", "%", "@", "`", "|", ">",
                 "yes", "no", "on", "off", "null", "~", "0x1F", "1e400", ".inf", "v1", "llama-3.1-70b",
                 "3g.40gb", "H100-SXM5-80GB", "chat;rm -rf /", "$(reboot)", "", " ", "a" * 300,
                 # paths that leave the spec's repository, or that no filesystem takes (issue 17)
                 "/etc/passwd", "../../../../../../etc/passwd", "/dev/zero", "/usr/share/doc", "model/../../..",
                 "data/" + "d" * 300, "a/" * 3000, "model/config.json/x", ".",
                 # what surrogateescape makes of undecodable bytes, a YAML "\ud800" escape, and terminal
                 # control sequences: a title change, clear screen, a forged line (issue 25)
                 "\udc80", "t\ud800iny", "\udfff", "\x1b]0;pwned\x07", "\x1b[2J\nforged: error", "a\rb",
                 "\u2066x\u2069", "\x9b2J"]

texts = st.one_of(
    st.sampled_from(_SPECIAL_TEXT),
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=24),
    st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=6),  # lone surrogates too
)
ints = st.one_of(st.integers(min_value=-(10**30), max_value=10**30),
                 st.sampled_from([0, -1, 1, 7, 8, 63, 64, 65535, 65536, 2**31, 2**63, 10**30, -(10**30)]))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 100.0, float("inf"), float("-inf"), float("nan")]))
scalars = st.one_of(ints, floats, texts, st.booleans(), st.none())
keys = st.one_of(texts, st.integers(min_value=-5, max_value=100), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


# --- structured mutations ---------------------------------------------------------------------

def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, prefix + (i,)))
    return out


def _get(node: Any, path: tuple) -> Any:
    for step in path:
        node = node[step]
    return node


def _nested(depth: int, leaf: Any, use_lists: bool) -> Any:
    for i in range(depth):
        leaf = [leaf] if use_lists and i % 2 else {"x": leaf}
    return leaf


MUTATIONS = ["delete", "replace", "insert", "nest", "duplicate_models", "swap_type", "wrap", "unwrap", "input_path",
             "node_pool", "runtime", "hostile_name"]
# Names a terminal would obey or UTF-8 cannot hold (issue 25): shown escaped, refused with a position.
HOSTILE_NAMES = ["t\ud800iny", "q\udc80", "dev\x1b]0;pwned\x07\x1b[2J\nforged: error", "a\u202eb", "x\u200by",
                 "n\x00ul", "\x1b[31mred\x1b[0m", "ok-name", "UPPER", "a" * 64]
RUNTIMES = ["triton", "trtllm-serve", "dynamo", "", "Triton", None, 1, "triton\n"]
# Spec fields that name files, and what a hostile or unlucky spec puts there (issue 17)
PATH_KEYS = ("path", "data", "eval", "config")
HOSTILE_PATHS = ["/etc/passwd", "../../../../../../etc/passwd", "/dev/zero", "/usr/share/doc", "/proc/self/mem",
                 "model/../../..", "data/" + "d" * 300, "a/" * 3000, "model/config.json/x", ".", "..", "/",
                 "data/../model", "model/", "./data/calib-prose.jsonl", "data\\calib.jsonl", "~/x", "$HOME/x"]


def mutate(data: Any, draw) -> Any:
    kind = draw(st.sampled_from(MUTATIONS))
    paths = _paths(data)
    path = draw(st.sampled_from(paths))
    if kind == "duplicate_models":
        if isinstance(data, dict) and isinstance(data.get("models"), dict):
            name = draw(st.sampled_from(["copy", "models-copy", "Copy", "copy;ls", "x" * 70]))
            models = data["models"]
            if draw(st.booleans()):  # the whole map as one more "model"
                models[name] = copy.deepcopy(models)
            else:  # every model again, under new names
                for old in list(models):
                    models[f"{name}-{old}" if isinstance(old, str) else name] = copy.deepcopy(models[old])
        return data
    if kind == "input_path":  # a file the spec names, pointed somewhere it must not read
        named = [p for p in paths if p and p[-1] in PATH_KEYS and isinstance(_get(data, p), str)]
        if named:
            target = draw(st.sampled_from(named))
            _get(data, target[:-1])[target[-1]] = draw(st.sampled_from(HOSTILE_PATHS))
        return data
    if kind in ("node_pool", "runtime", "hostile_name"):
        return _mutate_named(data, kind, draw)
    if not path:  # the root itself
        if kind in ("replace", "swap_type"):
            return draw(values)
        if kind == "nest":
            return _nested(draw(st.integers(1, 100)), data, draw(st.booleans()))
        return data
    parent, last = _get(data, path[:-1]), path[-1]
    if kind == "delete":
        del parent[last]
    elif kind in ("replace", "swap_type"):
        parent[last] = draw(values if kind == "replace" else scalars)
    elif kind == "insert":
        target = parent[last]
        if isinstance(target, dict):
            target[draw(keys)] = draw(values)
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(values))
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
    elif kind == "nest":
        parent[last] = _nested(draw(st.integers(1, 100)), parent[last], draw(st.booleans()))
    elif kind == "wrap":  # a value the schema may take as a one-element list (`index: [0]`)
        parent[last] = [parent[last]] * draw(st.integers(1, 3))
    elif kind == "unwrap" and isinstance(parent[last], list) and parent[last]:  # a list cut to its head
        parent[last] = parent[last][:1] if draw(st.booleans()) else parent[last][0]
    return data


def _entries(data: Any, section: str) -> dict | None:
    entries = data.get(section) if isinstance(data, dict) else None
    return entries if isinstance(entries, dict) and entries else None


def _mutate_named(data: Any, kind: str, draw) -> Any:
    """Kubernetes node pools on a host, a serving runtime on a model, or a hostile name for a host,
    a model or the spec."""
    if kind == "node_pool" and (hosts := _entries(data, "hosts")):
        host = hosts[draw(st.sampled_from(sorted(hosts, key=repr)))]
        if isinstance(host, dict):
            if draw(st.integers(0, 3)):
                host["deploy"] = "kubernetes"
            pool: dict[Any, Any] = {}
            if draw(st.booleans()):
                pool["nodes"] = draw(st.one_of(st.sampled_from([1, 2, 4, 10000, 10001, 0, -1]), ints, texts))
            if draw(st.booleans()):
                pool["selector"] = draw(st.one_of(
                    st.dictionaries(st.one_of(st.sampled_from(["kiln.io/pool", "a/b/c", "x" * 70]), texts),
                                    st.one_of(texts, ints, st.none()), max_size=3),
                    values))
            if draw(st.booleans()):
                pool["gpu_product"] = draw(st.one_of(st.sampled_from(["NVIDIA-H100-80GB-HBM3", "-x-", "a" * 64]),
                                                     texts))
            host["node_pool"] = pool if draw(st.integers(0, 5)) else draw(values)
    elif kind == "runtime" and (models := _entries(data, "models")):
        model = models[draw(st.sampled_from(sorted(models, key=repr)))]
        if isinstance(model, dict):
            serving = model.setdefault("serving", {})
            if isinstance(serving, dict):
                serving["runtime"] = draw(st.one_of(st.sampled_from(RUNTIMES), texts))
                if draw(st.booleans()):  # a Triton-only setting beside trtllm-serve (K812), or a port clash
                    serving[draw(st.sampled_from(["max_queue_delay_us", "ports", "streaming"]))] = draw(values)
    elif kind == "hostile_name":
        name = draw(st.one_of(st.sampled_from(HOSTILE_NAMES), texts))
        section = draw(st.sampled_from(["models", "hosts", "name"]))
        entries = _entries(data, section) if section != "name" else None
        if entries:
            old = draw(st.sampled_from(sorted(entries, key=repr)))
            entries[name] = entries.pop(old)
        elif isinstance(data, dict):
            data["name"] = name
    return data


def dump(data: Any, round_trip: bool) -> str:
    yaml = YAML(typ="rt" if round_trip else "safe", pure=True)
    yaml.width = 4096
    yaml.allow_unicode = True
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


@st.composite
def pool_specs(draw) -> str:
    """An example spec given node pools, serving runtimes or hostile names (and maybe more edits)."""
    data = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DATA)))
    for _ in range(draw(st.integers(1, 3))):
        data = _mutate_named(data, draw(st.sampled_from(["node_pool", "runtime", "hostile_name"])), draw)
    if draw(st.booleans()):
        data = mutate(data, draw)
    return dump(data, draw(st.booleans()))


@st.composite
def mutated_specs(draw) -> str:
    data = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DATA)))
    for _ in range(draw(st.integers(1, 3))):
        data = mutate(data, draw)
    return dump(data, draw(st.booleans()))


def _example(name: str) -> str:
    return EXAMPLE_TEXTS[[p.parent.name for p in EXAMPLE_FILES].index(name)]


# Inputs of issue 25's hostile review, each a crash (exit 3) or an unbounded run before it was fixed.
MERGE_BOMB = "kiln: v1\na0: &a0 {}\n" + "".join(f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}]}}\n" for i in range(1, 41))
SURROGATE_NAME = _example("quickstart").replace("name: quickstart", 'name: "q\\udc80"')
SURROGATE_MODEL = _example("quickstart").replace("  tiny:\n", '  "t\\ud800iny":\n', 1)
CONTROL_HOST = _example("quickstart").replace("  dev-h100:", '  "dev\\x1b]0;pwned\\x07\\x1b[2J\\nforged: error":')


def test_examples_round_trip_through_the_dumper() -> None:
    for data in EXAMPLE_DATA:
        for rt in (False, True):
            text = dump(copy.deepcopy(data), rt)
            loaded = load_text(text, "kiln.yaml")
            assert loaded.diagnostics == []
            assert parse_document(loaded.document).spec is not None


@given(mutated_specs())
@example(dump({"kiln": "v1", "name": None}, False))
@example(dump({"kiln": "v1", "models": {1: {}}, True: None, None: 1}, False))
@example(dump(_nested(100, {"kiln": "v1"}, True), False))
def test_mutated_specs_never_crash(text: str) -> None:
    check_pipeline(text, check_front_end(text))


# Node pools, serving runtimes and hostile names on every example (mutated_specs draws them too,
# among the other mutations); bounded: most of these specs are valid and go through the pipeline.
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(pool_specs())
@example(SURROGATE_NAME)
@example(CONTROL_HOST)
def test_specs_with_node_pools_and_runtimes_never_crash(text: str) -> None:
    check_pipeline(text, check_front_end(text))


# --- raw text and bytes -----------------------------------------------------------------------

DIRECTIVES = ["%YAML 1.3\n---\n", "%YAML 1.1\n---\n", "%YAML 2.0\n---\n", "%YAML 1.2\n---\n", "%YAML 9.9\n",
              "%TAG ! tag:x,2000:\n---\n", "%TAG !! tag:x,2000:\n---\n", "%FOO bar\n---\n", "%YAML 1.1\n%YAML 1.1\n---\n"]


@st.composite
def edited_texts(draw) -> str:
    text = draw(st.sampled_from(EXAMPLE_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "swap_lines", "dup_line", "replace_char", "directive",
                                     "anchor"]))
        if kind == "directive":  # a YAML directive ahead of the document
            text = draw(st.sampled_from(DIRECTIVES)) + text
            continue
        if kind == "anchor":  # the same anchor on two values (ruamel warns), and maybe an alias of it
            spots = [m.end() for m in re.finditer(r": (?=[^\s{\[#&*|>'\"])", text)]
            if len(spots) >= 2:
                a, b = sorted(draw(st.lists(st.sampled_from(spots), min_size=2, max_size=2, unique=True)))
                text = text[:a] + "&dup " + text[a:b] + "&dup " + text[b:]
            continue
        n = len(text)
        if kind == "delete" and n:
            i = draw(st.integers(0, n - 1))
            text = text[:i] + text[i + draw(st.integers(1, 40)):]
        elif kind == "insert":
            i = draw(st.integers(0, n))
            piece = draw(st.one_of(texts, st.sampled_from(["\t", "\n", ":", "---\n", "- ", "  ", "&x ", "*x", "<<: *x\n",
                                                           "!!python/object:os.system ", "\ufeff", "\r\n",
                                                           "%YAML 1.3\n---\n", "%YAML 1.1\n---\n", "%TAG !! x:\n---\n",
                                                           "&dup ", "&dup 1 ",
                                                           # issue 25: recursive merge keys, alias cycles
                                                           "x: &x {<<: *x}\n", "&r {<<: [*r, *r]}", "&c [*c]",
                                                           "<<: [*x, *x]\n", '"\\ud800"', '"\\udc80x"',
                                                           '"\\x1b[2J\\nforged: error"', '"\\u202e"'])))
            text = text[:i] + piece + text[i:]
        elif kind in ("swap_lines", "dup_line"):
            lines = text.split("\n")
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if kind == "swap_lines":
                lines[a], lines[b] = lines[b], lines[a]
            else:
                lines.insert(b, lines[a])
            text = "\n".join(lines)
        elif kind == "replace_char" and n:
            i = draw(st.integers(0, n - 1))
            text = text[:i] + draw(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))) + text[i + 1:]
    return text


@given(edited_texts())
@example("kiln: v1\nx: &x {<<: *x}\n")
@example("kiln: v1\nx: &x {<<: [*x, *x]}\n")
@example("kiln: v1\nx: &x [*x]\n")
@example(MERGE_BOMB)
@example(SURROGATE_NAME)
@example(SURROGATE_MODEL)
@example(CONTROL_HOST)
@example("kiln: v1\nname:")
@example(EXAMPLE_TEXTS[0].replace("count: 8", "count: 8\n\tcount: 9"))
def test_edited_texts_never_crash(text: str) -> None:
    # the same edits through the whole pipeline too, when the semantic stage is there
    check_pipeline(text, check_front_end(text))


@st.composite
def edited_bytes(draw) -> bytes:
    raw = bytearray(draw(st.sampled_from(EXAMPLE_TEXTS)).encode("utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(raw)))
        kind = draw(st.sampled_from(["insert", "overwrite", "truncate"]))
        if kind == "insert":
            raw[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "overwrite" and i < len(raw):
            raw[i] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del raw[i:]
    return bytes(raw)


@given(edited_bytes())
@example(b"\xef\xbb\xbf" + EXAMPLE_TEXTS[0].encode())
@example(EXAMPLE_TEXTS[0].encode()[:-7] + b"\xc3")
def test_edited_bytes_never_crash(raw: bytes) -> None:
    check_bytes(raw)


# --- plans ------------------------------------------------------------------------------------
_PLAN_STORE = Path(_SCRATCH.name) / ".store"


def check_plan(text: str) -> None:
    """`kiln plan` (JSON, so every field of the plan is rendered) on `text`: an exit code that is
    not a crash, and a plan or diagnostics."""
    from compiler.cli import main

    spec = Path(_SCRATCH.name) / "kiln.yaml"
    spec.write_text(text, encoding="utf-8", errors="surrogatepass")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", str(spec), "--store", str(_PLAN_STORE), "--format", "json"])
    assert code in (0, 1), err.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["actions"] is not None or doc["diagnostics"], doc


# Bounded (a plan lowers the spec and reads the store): a few seconds in any profile.
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(mutated_specs(), edited_texts()))
@example(EXAMPLE_TEXTS[0])
@example("%YAML 1.3\n---\n" + EXAMPLE_TEXTS[0])
def test_plans_of_mutated_specs_never_crash(text: str) -> None:
    check_plan(text)


# --- lock files and tune records (issue 25) -----------------------------------------------------
# Each lands beside a spec that reads it: the lock file beside each example with MIG placements (its
# own lock, then mutated), a tune record under the quickstart's tune/ (the kept grid run's record,
# then mutated), or in place of either a link out of the repository, a device, a FIFO or a directory.
_INPUTS = Path(_SCRATCH.name) / "inputs"
SPECIAL_FILES = [("link", "/etc/passwd"), ("link", "/dev/zero"), ("link", "../outside"), ("link", "missing"),
                 ("fifo", ""), ("dir", "")]


def _hostile_json(good: str) -> list[str]:
    """The hostile review's JSON: NaN and Infinity, 100,000 levels, a 5,000-digit integer, 1e999,
    and documents of another shape."""
    return ['{"a": Infinity}', good.replace(": 0", ": NaN", 1), good.replace(": 1", ": -Infinity", 1),
            "[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000, good.replace(": 1", ": " + "9" * 5000, 1),
            good.replace(": 1", ": 1e999", 1), "[1]", "null", '"x"', "", "{", "\ufeff" + good, good.replace('"', "'"),
            good.replace("{", '{"\\ud800": 1, ', 1), good.replace("{", '{"\\u001b]0;pwned\\u0007": 1, ', 1)]


def _place(path: Path, item: tuple[str, Any]) -> None:
    """Put `item` at `path`: ("bytes", data), ("link", target), ("fifo", _) or ("dir", _)."""
    if path.is_symlink() or path.is_file() or path.is_fifo():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    kind, payload = item
    if kind == "bytes":
        path.write_bytes(payload)
    elif kind == "link":
        path.symlink_to(payload)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def _json_item(draw, good: str) -> tuple[str, Any]:
    how = draw(st.sampled_from(["mutated", "mutated", "edited", "hostile", "special"]))
    if how == "mutated":  # structured: the spec mutations on the document's data
        doc = json.loads(good)
        for _ in range(draw(st.integers(1, 3))):
            doc = mutate(doc, draw)
        text = json.dumps(doc, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
        return "bytes", text.encode("utf-8", "surrogatepass")
    if how == "edited":  # raw bytes
        raw = bytearray(good.encode("utf-8"))
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(raw)))
            op = draw(st.sampled_from(["insert", "overwrite", "truncate"]))
            if op == "insert":
                raw[i:i] = draw(st.one_of(st.binary(min_size=1, max_size=8),
                                          st.sampled_from([b"[", b"{", b"NaN", b"Infinity", b"1e999", b"9" * 5000,
                                                           b'"\\ud800"', b"\\u001b", b"-", b"0", b"null"])))
            elif op == "overwrite" and i < len(raw):
                raw[i] = draw(st.integers(0, 255))
            elif op == "truncate":
                del raw[i:]
        return "bytes", bytes(raw)
    if how == "hostile":
        return "bytes", draw(st.sampled_from(_hostile_json(good))).encode("utf-8", "surrogatepass")
    return draw(st.sampled_from(SPECIAL_FILES))


def _lock_specs() -> list[tuple[Path, str]]:
    """(spec, its own lock file's text) for each example whose hosts place MIG instances."""
    from compiler.ir.lockfile import lock_entries, render_lock
    from compiler.pipeline import validate_path

    out = []
    for example in EXAMPLE_FILES:
        where = _INPUTS / "locks" / example.parent.name
        shutil.copytree(example.parent, where, dirs_exist_ok=True)
        (where / ".git").mkdir(exist_ok=True)  # the repository the lock is confined to
        (where.parent / "outside").write_text("{}", encoding="utf-8")
        result = validate_path(where / "kiln.yaml")
        entries = lock_entries(result.resolved) if result.resolved is not None else {}
        if entries:
            out.append((where / "kiln.yaml", render_lock(result.spec.name, entries).decode("utf-8")))
    return out


_LOCK_SPECS: list[tuple[Path, str]] = []


def lock_specs() -> list[tuple[Path, str]]:
    if not _LOCK_SPECS:
        _LOCK_SPECS.extend(_lock_specs())
    return _LOCK_SPECS


@st.composite
def lock_files(draw) -> tuple[int, tuple[str, Any]]:
    """(which example spec, what its kiln.lock is)."""
    which = draw(st.integers(0, len(lock_specs()) - 1))
    return which, _json_item(draw, lock_specs()[which][1])


def _tune_spec() -> tuple[Path, str]:
    """The quickstart with `tiny`'s limit measured by the kept grid run's record, and that record."""
    from compiler.ir.measured import parse_record, record_name, render_record
    from compiler.pipeline import validate_path
    from compiler.staleness import what_was_measured
    from compiler.tune.specedit import with_measured_limit
    from tests.quickstart import with_tuning

    where = _INPUTS / "tune" / "repo"
    shutil.copytree(ROOT / "examples" / "quickstart", where, dirs_exist_ok=True)
    (where / ".git").mkdir(exist_ok=True)
    (where.parent / "outside").write_text("{}", encoding="utf-8")
    spec = where / "kiln.yaml"
    spec.write_text(with_tuning(spec.read_text(encoding="utf-8")), encoding="utf-8")
    before = validate_path(spec)
    unit = "dev-h100/gpu0/mig0"
    record = parse_record((ROOT / "tests" / "data" / "tune" / "grid" / "record.json").read_text(encoding="utf-8"))
    record = record.model_copy(update=what_was_measured(before.resolved, unit))
    (where / "tune").mkdir(exist_ok=True)
    spec.write_text(with_measured_limit(before.document, "tiny", "tune/" + record_name(unit)), encoding="utf-8")
    return spec, render_record(record).decode("utf-8")


_TUNE_SPEC: list[tuple[Path, str]] = []


def tune_spec() -> tuple[Path, str]:
    if not _TUNE_SPEC:
        _TUNE_SPEC.append(_tune_spec())
    return _TUNE_SPEC[0]


def tune_record_path() -> Path:
    return tune_spec()[0].parent / "tune" / "dev-h100.gpu0.mig0.json"


@st.composite
def tune_records(draw) -> tuple[str, Any]:
    return _json_item(draw, tune_spec()[1])


def check_input_file(spec: Path, codes: set[str]) -> None:
    """validate_path on `spec` after its lock file or record was replaced: a result, diagnostics
    that render, and any error about the file one of `codes`."""
    from compiler.pipeline import validate_path

    result = validate_path(spec, display="kiln.yaml")
    _check_diagnostics(result.diagnostics)
    about = [d for d in result.diagnostics if d.file != "kiln.yaml" or d.code in codes]
    assert all(d.code in codes | {"K914"} for d in about), about


def test_the_inputs_fuzzed_are_valid_as_written() -> None:
    from compiler.pipeline import validate_path

    assert len(lock_specs()) >= 2
    for spec, lock in lock_specs():
        _place(spec.with_suffix(".lock"), ("bytes", lock.encode("utf-8")))
        assert validate_path(spec).ok
    spec, record = tune_spec()
    _place(tune_record_path(), ("bytes", record.encode("utf-8")))
    result = validate_path(spec)
    assert result.ok and result.resolved.models["tiny"].measured is not None, result.diagnostics


# Bounded like the plans (each example validates a whole spec); benchmarks/fuzz_specs.py --kind
# locks|records runs thousands.
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(lock_files())
@example((0, ("bytes", b'{"kind": "kiln.lock/v1", "placements": {"h": {"0": [{"profile": "x", "serves": "y", '
                       b'"start": Infinity}]}}}')))
@example((0, ("bytes", b"[" * 100_000)))
@example((0, ("bytes", b'{"kind": "kiln.lock/v1", "placements": {}, "n": ' + b"9" * 5000 + b"}")))
@example((0, ("link", "/etc/passwd")))
@example((0, ("link", "/dev/zero")))
@example((0, ("fifo", "")))
def test_lock_files_never_crash(item: tuple[int, tuple[str, Any]]) -> None:
    which, what = item
    spec = lock_specs()[which][0]
    _place(spec.with_suffix(".lock"), what)
    check_input_file(spec, {"K912", "K915", "K916"} | MIG_CODES)


# A lock whose placements no longer fit is the placement checks' business (K2xx), not a crash.
MIG_CODES = {f"K2{n:02d}" for n in range(100)}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(tune_records())
@example(("bytes", b"[" * 100_000))
@example(("bytes", b'{"kind": "kiln.tune/v1", "result": {"concurrency": ' + b"9" * 5000 + b"}}"))
@example(("bytes", b'{"kind": "kiln.tune/v1", "result": {"concurrency": Infinity}}'))
@example(("link", "/dev/zero"))
@example(("fifo", ""))
def test_tune_records_never_crash(what: tuple[str, Any]) -> None:
    _place(tune_record_path(), what)
    check_input_file(tune_spec()[0], {"K913", "K915", "K916", "K905"})
