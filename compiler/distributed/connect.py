"""The engine an --executor address names."""

from __future__ import annotations

from .engine import Engine, EngineError


def connect(address: str) -> Engine:
    """The engine an --executor address names: ray://HOST:PORT (a Ray cluster's GCS address)."""
    scheme, sep, rest = address.partition("://")
    if not sep or not rest:
        raise EngineError(f"--executor {address!r}: give an engine address, e.g. ray://HOST:PORT")
    if scheme == "ray":
        from .ray import RayEngine

        return RayEngine(rest)
    raise EngineError(f"--executor {address!r}: no engine {scheme!r} (Kiln runs on: ray)")
