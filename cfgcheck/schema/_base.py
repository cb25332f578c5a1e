"""The base every section model derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, values are not coerced across types.

    ``strict=True`` refuses ``"2048"`` for an int and ``1`` for a bool; ints are still
    accepted where a float is expected (pydantic's strict mode allows that widening).
    """

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)
