"""Text samples from the repository itself, in two domains.

prose: paragraphs of the markdown files, of the docstrings and comments of the Python sources, and
       of the comments in YAML files (examples, test cases).
code:  the Python sources, one sample per top-level function or class (classes split by method
       when long).

The text is read from one git commit (not the working tree) so that the samples, and the model
trained on them, do not drift as the repository is edited.
"""

from __future__ import annotations

import ast
import io
import random
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path

MIN_PROSE_CHARS = 80
MIN_CODE_CHARS = 120
MAX_SAMPLE_CHARS = 1600


@dataclass(frozen=True)
class Samples:
    prose: list[str]
    code: list[str]


class Source:
    """Files of the repository as they are at `commit` (or in the working tree when commit is None)."""

    def __init__(self, repo: Path, commit: str | None) -> None:
        self.repo, self.commit = repo, commit

    def _git(self, *args: str) -> bytes:
        return subprocess.run(["git", "-C", str(self.repo), *args], check=True, capture_output=True).stdout

    def files(self) -> list[str]:
        if self.commit is None:
            out = self._git("ls-files")
        else:
            out = self._git("ls-tree", "-r", "--name-only", self.commit)
        return sorted(p for p in out.decode("utf-8").splitlines() if p)

    def read(self, path: str) -> str:
        if self.commit is None:
            return (self.repo / path).read_text(encoding="utf-8")
        return self._git("show", f"{self.commit}:{path}").decode("utf-8")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _paragraphs(text: str) -> list[str]:
    return [_squash(p) for p in re.split(r"\n\s*\n", text) if _squash(p)]


def markdown_paragraphs(text: str) -> list[str]:
    """Prose paragraphs of a markdown file; code blocks and tables are left out."""
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    out = []
    for p in re.split(r"\n\s*\n", text):
        lines = [ln for ln in p.splitlines() if not ln.lstrip().startswith("|")]
        para = _squash(" ".join(ln.lstrip("#").strip() for ln in lines))
        if para:
            out.append(para)
    return out


def python_prose(source: str) -> list[str]:
    """Paragraphs of the docstrings, and runs of consecutive comment lines."""
    out: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                out += _paragraphs(doc)
    run: list[str] = []
    last_line = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line = tok.start[0]
            if line != last_line + 1 and run:
                out.append(_squash(" ".join(run)))
                run = []
            run.append(tok.string.lstrip("#").strip())
            last_line = line
    if run:
        out.append(_squash(" ".join(run)))
    return out


def yaml_comments(text: str) -> list[str]:
    """Runs of whole-line comments; a blank comment line ends a paragraph."""
    out: list[str] = []
    run: list[str] = []
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        body = stripped[1:].strip() if stripped.startswith("#") else None
        if body and not body.startswith("yaml-language-server"):
            run.append(body)
            continue
        if run:
            out.append(_squash(" ".join(run)))
            run = []
    return out


def _wordy(text: str) -> bool:
    """Mostly letters and spaces: leaves out rulers like '# --- section -----'."""
    return sum(c.isalpha() or c == " " for c in text) >= 0.8 * len(text)


def python_chunks(source: str) -> list[str]:
    """Top-level functions and classes as separate samples; a long class gives one per method."""
    lines = source.splitlines()
    tree = ast.parse(source)

    def segment(node: ast.AST) -> str:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "\n".join(lines[start - 1:node.end_lineno])

    out: list[str] = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        text = segment(node)
        if isinstance(node, ast.ClassDef) and len(text) > MAX_SAMPLE_CHARS:
            out += [segment(n) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        else:
            out.append(text)
    return [_dedent(c) for c in out]


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip("\n")


def _cap(text: str) -> str:
    """At most MAX_SAMPLE_CHARS, cut at a line (code) or word (prose) boundary."""
    if len(text) <= MAX_SAMPLE_CHARS:
        return text
    cut = text[:MAX_SAMPLE_CHARS]
    for sep in ("\n", " "):
        i = cut.rfind(sep)
        if i > MAX_SAMPLE_CHARS // 2:
            return cut[:i]
    return cut


def collect(src: Source) -> Samples:
    prose: list[str] = []
    code: list[str] = []
    for path in src.files():
        if path.endswith(".md"):
            prose += markdown_paragraphs(src.read(path))
        elif path.endswith((".yaml", ".yml")):
            prose += yaml_comments(src.read(path))
        elif path.endswith(".py"):
            text = src.read(path)
            prose += python_prose(text)
            code += python_chunks(text)
    return Samples(_unique([_cap(p) for p in prose if len(p) >= MIN_PROSE_CHARS and _wordy(p)]),
                   _unique([_cap(c) for c in code if len(c) >= MIN_CODE_CHARS]))


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for it in items:
        if it not in seen:
            seen.add(it)
            out.append(it)
    return out


@dataclass(frozen=True)
class Split:
    train: list[str]
    calibration: list[str]
    eval: list[str]


def split(samples: list[str], *, seed: int, n_eval: int, n_calibration: int) -> Split:
    """Held-out eval samples; calibration samples drawn from the rest (which is also the training
    text: post-training calibration normally uses in-domain text the model has seen)."""
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    eval_idx = sorted(order[:n_eval])
    rest = sorted(order[n_eval:])
    cal_idx = sorted(random.Random(seed + 1).sample(rest, min(n_calibration, len(rest))))
    return Split([samples[i] for i in rest], [samples[i] for i in cal_idx], [samples[i] for i in eval_idx])
