"""The OpenAPI document: FastAPI's, plus the request body of POST /v1/validate (read by hand,
so FastAPI cannot describe it) with the run-config schema from the pydantic models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cfgcheck.service.settings import JSON_TYPES, YAML_TYPES

if TYPE_CHECKING:
    from fastapi import FastAPI

_BODY_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/RunConfig"},
        {"$ref": "#/components/schemas/ComposeRequest"},
        {"$ref": "#/components/schemas/NativeRequest"},
    ]
}

VALIDATE_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "description": "A composed run config (the sections model, tokenizer, data, trainer), or "
    "a compose request against the server's config directory, or a native framework config "
    "({format, config, overrides}). JSON or YAML by Content-Type.",
    "content": {mime: {"schema": _BODY_SCHEMA} for mime in (*JSON_TYPES, *YAML_TYPES)},
}


def component_schemas() -> dict[str, Any]:
    """JSON Schemas of RunConfig (and its sections) and ComposeRequest, as OpenAPI components."""
    from pydantic.json_schema import models_json_schema

    from cfgcheck.schema.run import RunConfig
    from cfgcheck.service.models import ComposeRequest, NativeRequest

    _, top = models_json_schema(
        [(RunConfig, "validation"), (ComposeRequest, "validation"), (NativeRequest, "validation")],
        ref_template="#/components/schemas/{model}",
    )
    defs: dict[str, Any] = top.get("$defs", {})
    return defs


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI document with the request-body components added (built once)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        doc = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in component_schemas().items():
            schemas.setdefault(name, schema)
        app.openapi_schema = doc
    return app.openapi_schema
