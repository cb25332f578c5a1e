"""JSON Schemas of the run config and of each section, from the pydantic models."""

from __future__ import annotations

from typing import Any

from cfgcheck.schema.run import SECTIONS, RunConfig

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _with_header(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, "$id": f"cfgcheck/{name}.schema.json", **schema}


def json_schemas() -> dict[str, dict[str, Any]]:
    """``{"run": ..., "model": ..., "tokenizer": ..., "data": ..., "trainer": ...}``."""
    out = {"run": _with_header(RunConfig.model_json_schema(), "run")}
    for name, model in SECTIONS.items():
        out[name] = _with_header(model.model_json_schema(), name)
    return out
