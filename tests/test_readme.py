"""Every `kiln` command and flag the README names exists: its command lines parse with kiln's own
parser, the flags in a command's row of the command table are that command's, and any other flag
it names belongs to some kiln command (or to one of the few other tools it documents)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from compiler.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Flags of the other programs the README documents, each with the file that defines it.
PROVISION = "compiler/templates/host/provision.sh.j2"
RUNTIMES = "compiler/runtimes/base.py"
DISAGG_FACTS = "compiler/catalog/data/disaggregated.json"
OTHER_TOOLS = {"--dry-run": PROVISION, "--ready-timeout": PROVISION, "--boot": PROVISION, "--force": PROVISION,
               "--check": PROVISION, "--image": PROVISION, "--gpus": PROVISION, "--restart": PROVISION,
               # docker run options and the image entrypoint's, from the serving runtimes' data
               "--shm-size": RUNTIMES, "--ulimit": RUNTIMES, "--cpuset-cpus": PROVISION, "--probe": "compiler/runtimes/base.py",
               "--dev": "scripts/install.sh",
               # disaggregated serving's worker flag and shared namespaces, from its facts file
               "--publish-events-and-metrics": DISAGG_FACTS, "--ipc": DISAGG_FACTS, "--pid": DISAGG_FACTS,
               "--no-quantize": "scripts/install.sh", "--update-expectations": "tests/conftest.py",
               "--offline": "tests/test_ci_lint.py", "--persona": "tests/test_ci_lint.py",
               # tritonserver's flag a pool's pod loads its own model with, from the runtime's data
               "--load-model": "compiler/runtimes/data/triton.json"}


def _commands() -> dict[str, argparse.ArgumentParser]:
    """'validate' -> its parser, 'store verify' -> the nested one, ... ('' -> the top-level parser)."""
    out = {"": _parser()}
    for name, parser in _subparsers(out[""]).items():
        out[name] = parser
        for sub, nested in _subparsers(parser).items():
            out[f"{name} {sub}"] = nested
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


COMMANDS = _commands()


def _flags(text: str) -> list[str]:
    return [f.split("=")[0] for f in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text)]


def _kiln_lines() -> list[str]:
    """`kiln ...` in code spans and in code blocks (indented or fenced), whitespace normalised."""
    spans = [" ".join(m.split()) for m in re.findall(r"(?<!`)`([^`]+)`(?!`)", README)]
    lines = [line.strip() for line in README.splitlines() if line.startswith("    ")]
    found = []
    for text in spans + lines:
        for part in re.split(r"&&|;|\|\|", text):
            part = part.strip()
            if part.startswith("kiln "):
                found.append(part)
    return found


def _command_of(words: list[str]) -> str:
    name = words[1]
    if f"{name} {words[2] if len(words) > 2 else ''}" in COMMANDS:
        return f"{name} {words[2]}"
    return name


def test_every_kiln_command_line_names_a_command_and_its_flags() -> None:
    lines = _kiln_lines()
    named = set()
    for line in lines:
        words = shlex.split(line.split("#")[0])
        command = _command_of(words)
        assert command in COMMANDS, f"README names `kiln {command}`, which does not exist: {line!r}"
        named.add(command)
        options = COMMANDS[command]._option_string_actions
        for flag in _flags(" ".join(words[2:])):
            assert flag in options, f"README: `kiln {command}` has no option {flag} ({line!r})"
    # the check sees the README's commands (a parser change that empties this would hide everything)
    assert {"validate", "plan", "build", "export", "show", "publish", "init", "store verify", "store gc",
            "explain", "catalog", "schema"} <= named, named


def test_the_flags_in_a_commands_table_row_are_that_commands() -> None:
    rows = [line for line in README.splitlines() if line.startswith("| `kiln ")]
    assert len(rows) >= 10
    for row in rows:
        heads = re.findall(r"`kiln ([a-z]+(?: [a-z]+)?)", row.split("|")[1])
        commands = [_command_of(["kiln", *h.split()]) for h in heads]
        cell = row.split("|")[2]
        # flags shown inside another command line in the cell (`kiln build --cache ...`) are checked above
        own = re.sub(r"`kiln [^`]*`", "", cell)
        for flag in [f for f in _flags(" ".join(re.findall(r"`([^`]*)`", own))) if f.startswith("--")]:
            assert any(flag in COMMANDS[c]._option_string_actions for c in commands), (row[:40], flag)


def test_every_other_flag_the_readme_names_exists_somewhere() -> None:
    every = {flag for parser in COMMANDS.values() for flag in parser._option_string_actions}
    spans = [" ".join(m.split()) for m in re.findall(r"(?<!`)`([^`]+)`(?!`)", README)]
    for span in spans:
        if not span.startswith("--"):
            continue  # command lines are checked above; other programs' lines are theirs
        for flag in _flags(span.split()[0]):
            if flag in OTHER_TOOLS:
                assert flag in (ROOT / OTHER_TOOLS[flag]).read_text(encoding="utf-8"), flag
            else:
                assert flag in every, f"README names {flag}, which no kiln command has"


def test_the_check_catches_a_command_or_flag_that_does_not_exist() -> None:
    assert "deploy" not in COMMANDS
    assert "--frobnicate" not in COMMANDS["build"]._option_string_actions
    assert _flags("kiln build x --only a --cache=r -q") == ["--only", "--cache", "-q"]


def test_install_lines_name_this_distribution() -> None:
    """`pip install 'kiln[...]'` installs somebody else's project (the HTML-templating `kiln` on
    PyPI): every extra the README or Kiln's own messages name is this distribution's."""
    from compiler import DISTRIBUTION

    texts = {"README.md": README}
    texts.update({str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "compiler").rglob("*.py")})
    wrong = [(name, m.group(0)) for name, text in texts.items()
             for m in re.finditer(r"""(?:install\s+|['"])([A-Za-z][\w.-]*)\[(tune|quantize|test|gpu)\]""", text)
             if m.group(1) != DISTRIBUTION]
    assert wrong == []
