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
    path.write_text(text, encoding="utf-8")
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
                 "data/" + "d" * 300, "a/" * 3000, "model/config.json/x", "."]

texts = st.one_of(
    st.sampled_from(_SPECIAL_TEXT),
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=24),
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


MUTATIONS = ["delete", "replace", "insert", "nest", "duplicate_models", "swap_type", "wrap", "unwrap", "input_path"]
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


def dump(data: Any, round_trip: bool) -> str:
    yaml = YAML(typ="rt" if round_trip else "safe", pure=True)
    yaml.width = 4096
    yaml.allow_unicode = True
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


@st.composite
def mutated_specs(draw) -> str:
    data = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DATA)))
    for _ in range(draw(st.integers(1, 3))):
        data = mutate(data, draw)
    return dump(data, draw(st.booleans()))


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
                                                           "&dup ", "&dup 1 "])))
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
