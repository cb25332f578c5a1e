"""The base every section model derives from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

# No size, count or step of a training run comes near this (int64, what torch and the
# frameworks store); a larger int is a typo or hostile input, and the estimates' float
# arithmetic would overflow on it.
MAX_INT = 2**63 - 1


def _too_large(value: Any) -> bool:
    """Whether ``value`` (or an int inside a list or tuple of it) is past :data:`MAX_INT`.
    Mappings are left to the section model that validates them (they are nested sections)."""
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, int) and not isinstance(current, bool):
            if abs(current) > MAX_INT:
                return True
        elif isinstance(current, list | tuple):
            stack.extend(current)
    return False


# Exact types that are no int and hold none (a bool is no int here either).
_NO_INTS = frozenset({str, float, bool, type(None), dict})


class Section(BaseModel):
    """A config section: unknown keys are errors, values are not coerced across types.

    ``strict=True`` refuses ``"2048"`` for an int and ``1`` for a bool; ints are still
    accepted where a float is expected (pydantic's strict mode allows that widening).
    Every number is finite and sane, for every field of every section, here once:
    ``allow_inf_nan=False`` refuses ``inf`` / ``nan`` floats, and ints beyond int64 are
    refused (a 310-digit ``block_size`` would overflow the memory estimate's floats).
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, validate_default=True, allow_inf_nan=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _sane_ints(cls, value: Any) -> Any:
        # runs for every field of every validation: the values that hold no int leave first
        if type(value) in _NO_INTS:
            return value
        if _too_large(value):
            raise ValueError(f"integers beyond {MAX_INT} (int64) are not sane values here")
        return value
