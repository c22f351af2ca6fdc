"""Edits of examples/quickstart/kiln.yaml that several test modules make."""

from __future__ import annotations

import re


def only_tiny(text: str) -> str:
    """The quickstart with its second model (`tiny-awq`) and its MIG slice removed: one serving unit."""
    text, n = re.subn(r"\n  tiny-awq:\n(?:    .*\n|              .*\n)+", "\n", text)
    text = text.replace("          - {profile: 1g.10gb, serves: tiny-awq}\n", "")
    assert n == 1 and "tiny-awq" not in text, text
    return text


def on_engine_target(text: str) -> str:
    """The spec on `target: engine`, without quality gates (K807: the engine target cannot enforce one)."""
    text = re.sub(r"\n +quality_gate: \{[^}]*\}", "", text)
    return text.replace("kiln: v1\n", "kiln: v1\ntarget: engine\n", 1)
