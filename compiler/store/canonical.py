"""Canonical JSON: the one byte form used for keys, trees, records and manifests."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8, and no floats that print differently."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def pretty_json(value: Any) -> bytes:
    """Sorted and indented, for files people read (the release manifest); still deterministic."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
