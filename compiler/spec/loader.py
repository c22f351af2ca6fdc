"""YAML loader that keeps the source position of every key and value.

ruamel.yaml composes the node graph (it keeps marks on every node); this module builds plain
Python data from it itself, so that every YAML-level fault (duplicate keys, alias bombs, odd keys,
unknown tags, tabs) becomes a diagnostic instead of an exception or a silent choice.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scanner import Scanner

from compiler.diagnostics import Diagnostic, Severity, Span

from . import rules as R

MAX_BYTES = 1 << 20  # a spec is hand-written; anything larger is a mistake or an attack
MAX_NODES = 100_000  # values after alias expansion: stops "billion laughs"
MAX_DEPTH = 64


class _FlowTooDeep(Exception):
    def __init__(self, mark) -> None:
        self.mark = mark


class _DepthBoundedScanner(Scanner):
    """ruamel's scanner, stopped once flow collections alone nest twice MAX_DEPTH deep. Unstopped, it
    revisits every open flow level at each token, and thousands of nested brackets took seconds
    (quadratic) before the parser hit Python's recursion limit, whose K011 had no position. Up to the
    cut, _Builder finds the first node past MAX_DEPTH itself (block levels counted); past it, the
    position is the bracket that opened flow level MAX_DEPTH + 1 on the way there."""

    _past_limit = None

    def fetch_flow_collection_start(self, TokenClass, to_push) -> None:
        if self.flow_level == MAX_DEPTH:
            self._past_limit = self.reader.get_mark()
        elif self.flow_level >= 2 * MAX_DEPTH:
            raise _FlowTooDeep(self._past_limit)
        super().fetch_flow_collection_start(TokenClass, to_push)


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.Scanner = _DepthBoundedScanner
    return yaml


Path_ = tuple[Any, ...]  # a location in the data: keys and list indexes


@dataclass
class Document:
    """A loaded spec: plain data plus where every value and key came from."""

    file: str
    text: str
    data: Any
    value_spans: dict[Path_, Span] = field(default_factory=dict)
    key_spans: dict[Path_, Span] = field(default_factory=dict)

    def span_of(self, path: Path_, *, key: bool = False) -> Span:
        """Span of the value (or key) at `path`, else of the closest enclosing node."""
        p = tuple(path)
        while True:
            if key and p in self.key_spans:
                return self.key_spans[p]
            if p in self.value_spans:
                return self.value_spans[p]
            if p in self.key_spans:
                return self.key_spans[p]
            if not p:
                return Span.unknown()
            p = p[:-1]

    def line_text(self, line: int) -> str:
        lines = self.text.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else ""


@dataclass
class LoadResult:
    document: Document | None
    diagnostics: list[Diagnostic]


def load_file(path: str | Path, display: str | None = None) -> LoadResult:
    p = Path(path)
    shown = display or str(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:  # a regular file says how long it is: refuse it unread
            return LoadResult(None, [_diag(R.FileTooLarge, shown, Span(1, 1),
                                           f"spec file is {size} bytes; the limit is {MAX_BYTES}",
                                           help="split the fleet into several specs")])
        # At most the limit plus one byte, whatever stat said: /dev/zero or a pipe says 0 and never ends.
        with open(p, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
        return LoadResult(None, [_diag(R.FileUnreadable, shown, Span(1, 1),
                                       f"cannot read spec file: {getattr(e, 'strerror', None) or e}")])
    if len(raw) > MAX_BYTES:
        return LoadResult(None, [_diag(R.FileTooLarge, shown, Span(1, 1),
                                       f"spec file is larger than {MAX_BYTES} bytes (the limit)",
                                       help="split the fleet into several specs")])
    return load_bytes(raw, shown)


def load_bytes(raw: bytes, file: str) -> LoadResult:
    if len(raw) > MAX_BYTES:
        return LoadResult(None, [_diag(R.FileTooLarge, file, Span(1, 1),
                                       f"spec file is {len(raw)} bytes; the limit is {MAX_BYTES}",
                                       help="split the fleet into several specs")])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        col = len(raw[line_start:e.start].decode("utf-8", errors="replace")) + 1
        return LoadResult(None, [_diag(R.NotUtf8, file, Span(line, col),
                                       f"spec file is not valid UTF-8 (byte 0x{raw[e.start]:02x})",
                                       help="save the file as UTF-8")])
    return load_text(text, file)


_TAB_INDENT = re.compile(r"^( *)\t", re.M)
_SURROGATE = re.compile("[\ud800-\udfff]")


def load_text(text: str, file: str) -> LoadResult:
    if "\x00" in text:
        i = text.index("\x00")
        return LoadResult(None, [_diag(R.NotUtf8, file, _offset_span(text, i),
                                       "spec file contains a NUL byte; it is not a text file")])
    if not text.strip() or _only_comments(text):
        return LoadResult(None, [_diag(R.EmptyFile, file, Span(1, 1), "spec file is empty",
                                       help="start from `kiln init` or an example under examples/")])
    tabs = [m for m in _TAB_INDENT.finditer(text)]
    if tabs:
        diags = [_diag(R.TabIndent, file, _offset_span(text, m.end() - 1),
                       "tab character used for indentation",
                       help="YAML indentation must be spaces; replace the tab with spaces")
                 for m in tabs]
        return LoadResult(None, diags)

    version = _yaml_version_diag(text, file)
    if version is not None:
        return LoadResult(None, [version])
    yaml = _yaml()
    # ruamel reports a reused anchor as a Python warning on stderr; _Builder reports it as K015
    # with its position instead, so ruamel's own report is switched off (its documented switch,
    # not a warnings filter: any other warning still shows).
    yaml.composer.warn_double_anchors = False
    try:
        nodes = list(yaml.compose_all(text))
    except MarkedYAMLError as e:
        return LoadResult(None, [_syntax_diag(e, file)])
    except _FlowTooDeep as e:
        return LoadResult(None, [_diag(R.TooDeep, file, Span(e.mark.line + 1, e.mark.column + 1),
                                       f"YAML nesting is deeper than {MAX_DEPTH} levels")])
    except ReaderError as e:
        char = e.character if isinstance(e.character, str) else chr(e.character)
        return LoadResult(None, [_diag(R.YamlSyntax, file, _offset_span(text, e.position),
                                       f"character U+{ord(char):04X} is not allowed in YAML",
                                       help="remove it, or write it as an escape inside a double-quoted string")])
    except YAMLError as e:
        return LoadResult(None, [_diag(R.YamlSyntax, file, Span(1, 1), f"YAML error: {e}")])
    except RecursionError:
        return LoadResult(None, [_diag(R.TooDeep, file, Span(1, 1),
                                       f"YAML nesting is too deep (more than {MAX_DEPTH} levels)")])
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        return LoadResult(None, [_diag(R.EmptyFile, file, Span(1, 1), "spec file is empty")])
    if len(nodes) > 1:
        return LoadResult(None, [_diag(R.MultipleDocuments, file, _second_document(text, nodes[1]),
                                       f"spec file holds {len(nodes)} YAML documents; Kiln reads exactly one",
                                       help="put each spec in its own file")])
    root = nodes[0]
    if not isinstance(root, MappingNode):
        kind = "a list" if isinstance(root, SequenceNode) else f"a scalar ({root.value!r})"
        return LoadResult(None, [_diag(R.TopLevelNotMapping, file, _clamp(_node_span(root), text),
                                       f"the top level of a spec must be a mapping, not {kind}",
                                       help="a spec starts with `kiln: v1`")])
    builder = _Builder(file)
    data = builder.build(root, ())
    doc = Document(file, text, data, builder.value_spans, builder.key_spans)
    if builder.fatal:
        return LoadResult(None, builder.diagnostics)
    return LoadResult(doc, builder.diagnostics)


def _yaml_version_diag(text: str, file: str) -> Diagnostic | None:
    """K014 for a `%YAML` directive other than 1.2 (ruamel asserts on 1.3 and reads 1.1 by other rules)."""
    if not re.search(r"^%YAML", text, re.M):
        return None
    from ruamel.yaml.tokens import DirectiveToken

    try:  # every document's directives: a later document's would still reach the parser
        for token in _yaml().scan(text):
            if isinstance(token, DirectiveToken) and token.name == "YAML" and tuple(token.value) != (1, 2):
                major, minor = token.value
                return _diag(R.UnsupportedYamlVersion, file, Span(token.start_mark.line + 1,
                                                                  token.start_mark.column + 1),
                             f"%YAML {major}.{minor}: Kiln reads YAML 1.2 only",
                             help="remove the directive (or write %YAML 1.2)")
    except (YAMLError, _FlowTooDeep):
        return None  # a syntax error or too deep: composing reports it, with its position
    return None


class _Budget(Exception):
    pass


class _Builder:
    """Turns a composed node graph into plain data, recording spans and YAML-level faults."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.diagnostics: list[Diagnostic] = []
        self.value_spans: dict[Path_, Span] = {}
        self.key_spans: dict[Path_, Span] = {}
        self.count = 0
        self.fatal = False
        self.anchors: dict[str, Node] = {}  # anchor -> the node it names (an alias is the same node)
        self.reused: set[int] = set()  # nodes whose reused anchor was reported
        self.open: set[int] = set()  # nodes being built: an alias to one of them is a cycle

    def build(self, node: Node, path: Path_) -> Any:
        try:
            return self._node(node, path, 0)
        except _Budget:
            self.fatal = True
            return None

    def _node(self, node: Node, path: Path_, depth: int) -> Any:
        if id(node) in self.open:  # an alias inside the value its anchor names: it never ends
            self.diagnostics.append(_diag(R.AliasBomb, self.file, _node_span(node),
                                          f"alias *{getattr(node, 'anchor', None) or '?'} refers to a value "
                                          "that contains it, so it expands without end",
                                          help="an alias may only refer to a value outside itself"))
            raise _Budget
        self.count += 1
        if self.count > MAX_NODES:
            self.diagnostics.append(_diag(R.AliasBomb, self.file, _node_span(node),
                                          f"the document expands to more than {MAX_NODES} values "
                                          "(aliases multiply their anchors)",
                                          help="remove the nested aliases; a spec never needs this many values"))
            raise _Budget
        if depth > MAX_DEPTH:
            self.diagnostics.append(_diag(R.TooDeep, self.file, _node_span(node),
                                          f"YAML nesting is deeper than {MAX_DEPTH} levels"))
            raise _Budget
        self.value_spans.setdefault(path, _node_span(node))
        anchor = getattr(node, "anchor", None)
        if anchor is not None:
            first = self.anchors.setdefault(anchor, node)
            if first is not node and id(node) not in self.reused:
                self.reused.add(id(node))  # an alias of it is visited again: report it once
                f = _node_span(first)
                self.diagnostics.append(_diag(R.ReusedAnchor, self.file, _node_span(node),
                                              f"anchor &{anchor} is already defined at line {f.line}, column "
                                              f"{f.column}; aliases below refer to this one",
                                              help="give each anchor its own name"))
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        self.open.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path, depth)
            if node.tag not in ("tag:yaml.org,2002:seq",):
                self._unknown_tag(node)
            return [self._node(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _mapping(self, node: MappingNode, path: Path_, depth: int) -> dict:
        if node.tag != "tag:yaml.org,2002:map":
            self._unknown_tag(node)
        out: dict[str, Any] = {}
        merges: list[Node] = []
        seen: dict[str, Span] = {}
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":
                merges.append(vnode)
                continue
            if not isinstance(knode, ScalarNode) or knode.tag != "tag:yaml.org,2002:str":
                shown = repr(knode.value) if isinstance(knode, ScalarNode) else "(a collection)"
                self.diagnostics.append(_diag(
                    R.NonStringKey, self.file, _node_span(knode),
                    f"mapping key {shown} is not a string",
                    help=f'quote it: "{knode.value}"' if isinstance(knode, ScalarNode) else
                    "keys must be plain strings"))
                continue
            key = self._text(knode)
            kspan = _node_span(knode)
            if key in seen:
                first = seen[key]
                self.diagnostics.append(_diag(
                    R.DuplicateKey, self.file, kspan,
                    f"duplicate key {key!r} (first defined at line {first.line}, column {first.column})",
                    help="YAML keeps only one of them; remove or rename the other"))
                continue
            seen[key] = kspan
            self.key_spans.setdefault(path + (key,), kspan)
            if _is_empty(vnode):
                # An empty value's own mark is the next token, often on a later line: use the key's.
                self.value_spans.setdefault(path + (key,), kspan)
            out[key] = self._node(vnode, path + (key,), depth + 1)
        # Merged keys come after local ones, so local keys keep their own positions (and win).
        for vnode in merges:
            sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
            for src in sources:
                if not isinstance(src, MappingNode):
                    self.diagnostics.append(_diag(R.YamlSyntax, self.file, _node_span(src),
                                                  "a merge key (<<) must refer to a mapping"))
                    continue
                # through _node, so that a merged mapping counts towards the budget (merging an
                # alias of an alias doubles the work at each level, values or not) and a merge of
                # the mapping that holds it is a cycle
                for k, v in self._node(src, path, depth + 1).items():
                    out.setdefault(k, v)
        return out

    def _scalar(self, node: ScalarNode) -> Any:
        tag, text = node.tag, node.value
        try:
            if tag == "tag:yaml.org,2002:str":
                return self._text(node)
            if tag == "tag:yaml.org,2002:null":
                return None
            if tag == "tag:yaml.org,2002:bool":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                return text.lower() == "true"
            if tag == "tag:yaml.org,2002:int":
                return _yaml_int(text)
            if tag == "tag:yaml.org,2002:float":
                return _yaml_float(text)
            if tag == "tag:yaml.org,2002:timestamp":
                return text  # no field takes a date; keep the text so the type error is clear
        except ValueError:
            kind = {"bool": "a boolean (true or false)", "int": "an integer", "float": "a number"}.get(
                tag.rsplit(":", 1)[-1], tag.rsplit(":", 1)[-1])
            self.diagnostics.append(_diag(R.YamlSyntax, self.file, _node_span(node),
                                          f"cannot read {text!r} as {kind}"))
            return text
        self._unknown_tag(node)
        return text

    def _text(self, node: ScalarNode) -> str:
        """A string's text; a lone surrogate (a double-quoted "\\ud800") is reported and kept as
        its escape, so that nothing downstream meets a character UTF-8 cannot write."""
        text = node.value
        if not _SURROGATE.search(text):
            return text
        shown = _SURROGATE.search(text).group().encode("unicode_escape").decode("ascii")
        self.diagnostics.append(_diag(R.NotUtf8, self.file, _node_span(node),
                                      f"string holds a lone surrogate ({shown}), a character no UTF-8 text holds",
                                      help="write the character itself, or as \\U followed by 8 hex digits "
                                           "(a surrogate pair of \\u escapes is not one character in YAML)"))
        return _SURROGATE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)

    def _unknown_tag(self, node: Node) -> None:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        self.diagnostics.append(_diag(R.UnknownTag, self.file, _node_span(node),
                                      f"unsupported YAML tag {tag}",
                                      help="Kiln specs use plain YAML; remove the tag"))


def _is_empty(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null" and node.value == ""


def _yaml_int(text: str) -> int:
    t = text.replace("_", "")
    sign = -1 if t.startswith("-") else 1
    t = t.lstrip("+-")
    if t.startswith("0x"):
        return sign * int(t[2:], 16)
    if t.startswith("0o"):
        return sign * int(t[2:], 8)
    if t.startswith("0b"):
        return sign * int(t[2:], 2)
    return sign * int(t, 10)


def _yaml_float(text: str) -> float:
    t = text.replace("_", "").lower()
    if t in (".inf", "+.inf"):
        return math.inf
    if t == "-.inf":
        return -math.inf
    if t == ".nan":
        return math.nan
    return float(t)


def _second_document(text: str, node: Node) -> Span:
    """Where the second document starts: its `---` marker (a node's own mark can lie past the end)."""
    markers = [i for i, ln in enumerate(text.splitlines(), start=1) if ln.startswith("---")]
    first_is_marker = bool(markers) and all(not ln.strip() or ln.lstrip().startswith("#")
                                            for ln in text.splitlines()[: markers[0] - 1])
    candidates = markers[1:] if first_is_marker else markers
    return Span(candidates[0], 1) if candidates else _node_span(node)


def _only_comments(text: str) -> bool:
    return all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines())


def _clamp(span: Span, text: str) -> Span:
    lines = text.splitlines() or [""]
    if span.line <= len(lines):
        return span
    return Span(len(lines), 1)


def _node_span(node: Node) -> Span:
    s, e = node.start_mark, node.end_mark
    return Span(s.line + 1, s.column + 1, e.line + 1, e.column + 1)


def _offset_span(text: str, offset: int) -> Span:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Span(line, col)


def _syntax_diag(e: MarkedYAMLError, file: str) -> Diagnostic:
    mark = e.problem_mark or e.context_mark
    span = Span(mark.line + 1, mark.column + 1) if mark else Span(1, 1)
    problem = e.problem or "invalid YAML"
    context = f" ({e.context})" if e.context else ""
    return _diag(R.YamlSyntax, file, span, f"YAML syntax error: {problem}{context}",
                 help="check indentation, colons and quotes on this line and the one above")


def _diag(rule: type[R.Rule], file: str, span: Span, message: str, help: str | None = None) -> Diagnostic:
    return Diagnostic(rule.code, rule.severity, message, file, span, help)


__all__ = ["Document", "LoadResult", "load_file", "load_bytes", "load_text", "MAX_BYTES", "MAX_NODES",
           "MAX_DEPTH", "Severity"]
