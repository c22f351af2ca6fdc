"""The host target's action kinds, in lowering order (registered in compiler/targets/registry.py)."""

from __future__ import annotations

from . import hostplan, hostscript

KINDS = (hostplan.KIND, hostscript.KIND)
