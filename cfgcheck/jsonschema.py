"""JSON Schemas of the run config and of each section, from the pydantic models."""

from __future__ import annotations

from typing import Any

from cfgcheck.schema.run import SECTIONS, RunConfig

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _with_header(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, "$id": f"cfgcheck/{name}.schema.json", **schema}


def json_schemas(schema: type[RunConfig] = RunConfig) -> dict[str, dict[str, Any]]:
    """``{"run": ..., "model": ..., "tokenizer": ..., "data": ..., "trainer": ...}``; for a
    team's :class:`RunConfig` subclass, its own sections too."""
    from cfgcheck.validate import sections_of

    out = {"run": _with_header(schema.model_json_schema(), "run")}
    sections = SECTIONS if schema is RunConfig else sections_of(schema)
    for name, model in sections.items():
        out[name] = _with_header(model.model_json_schema(), name)
    return out
