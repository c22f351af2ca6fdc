"""Values placed into generated shell scripts, each quoted for the shell: the host provisioning
script (compiler/targets/hosts/hostscript.py) and the image's entrypoint (image_context.py) share them."""

from __future__ import annotations

import shlex


class Shell(str):
    """A string already quoted for the shell."""


def shell_quote(value: object) -> Shell:
    if value is None:
        return Shell("''")
    if isinstance(value, bool):
        value = int(value)
    text = shlex.quote(str(value))
    if "," in text and not text.startswith("'"):
        text = f"'{text}'"  # "1965,1965" is one word, but shellcheck (SC2054) reads a list typo
    return Shell(text)


def words(argv: list[str]) -> Shell:
    """A list of words as bash array elements, each quoted."""
    return Shell(" ".join(shell_quote(w) for w in argv))
