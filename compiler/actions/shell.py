"""Values placed into generated shell scripts, each quoted for the shell: the host provisioning
script (compiler/targets/hosts/hostscript.py), the image's entrypoint (image_context.py) and the
Kubernetes node layer's scripts (compiler/targets/kubernetes/nodelayer.py) share them."""

from __future__ import annotations

import shlex


class Shell(str):
    """A string already quoted for the shell."""


def shell_word(value: object) -> Shell:
    """`value` as one shell word: None the empty word, a bool 1 or 0."""
    if value is None:
        return Shell("''")
    if isinstance(value, bool):
        value = int(value)
    return Shell(shlex.quote(str(value)))


def shell_quote(value: object) -> Shell:
    """`shell_word`, and a word with a comma quoted even where the shell needs no quotes: the host
    scripts and the entrypoint put words into bash arrays. (The node layer's scripts keep
    `1755,1755` bare: their bytes name the ConfigMaps and the Job, so quoting it would roll them.)"""
    text = shell_word(value)
    if "," in text and not text.startswith("'"):
        text = f"'{text}'"  # "1965,1965" is one word, but shellcheck (SC2054) reads a list typo
    return Shell(text)


def words(argv: list[str]) -> Shell:
    """A list of words as bash array elements, each quoted."""
    return Shell(" ".join(shell_quote(w) for w in argv))
