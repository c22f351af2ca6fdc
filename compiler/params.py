"""The base of every typed parameter model (an action kind's, a serving unit's): immutable, strict
about unknown keys. A leaf module, so that what describes a runtime's unit needs no graph."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Base of every kind's typed parameters: immutable, strict about unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
