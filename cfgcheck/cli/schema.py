"""``cfgcheck schema``: write JSON Schemas for editors into ``schemas/``.

One file per section (``model.schema.json`` ...), one for the whole composed run config
(``run.schema.json``) and one for primary and ``# @package _global_`` experiment configs
(``config.schema.json``: the run config with a Hydra ``defaults`` list and a ``hydra`` key
allowed, every key optional since the groups supply the sections). A YAML file opts in with
a yaml-language-server modeline, e.g.
``# yaml-language-server: $schema=../../schemas/model.schema.json``. ``--markdown`` prints the
key reference, ``docs/schema.md`` (:mod:`cfgcheck.schema_docs`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

DEFAULT_OUT = "schemas"

_DEFAULTS_LIST = {
    "description": "Hydra defaults list: group choices (`- model: llama-3-8b`) and `_self_`.",
    "type": "array",
    "items": {"anyOf": [{"type": "string"}, {"type": "object"}]},
}
_HYDRA = {"description": "Hydra's own settings (run dir, sweeper...).", "type": "object"}


def _optional_everywhere(schema: Any) -> Any:
    """A copy of ``schema`` with every ``required`` list removed (a partial config)."""
    if isinstance(schema, dict):
        return {k: _optional_everywhere(v) for k, v in schema.items() if k != "required"}
    if isinstance(schema, list):
        return [_optional_everywhere(v) for v in schema]
    return schema


def primary_config_schema(run: dict[str, Any]) -> dict[str, Any]:
    """The schema of a primary (or ``_global_``) config file, derived from the run schema."""
    schema: dict[str, Any] = _optional_everywhere(copy.deepcopy(run))
    schema["$id"] = "cfgcheck/config.schema.json"
    schema["title"] = "Primary config"
    schema["properties"] = {"defaults": _DEFAULTS_LIST, **schema["properties"], "hydra": _HYDRA}
    return schema


def schema_files(schema: type[RunConfig] | None = None) -> dict[str, str]:
    """``{file name: JSON text}`` of every schema ``cfgcheck schema`` writes (of a team's
    :class:`~cfgcheck.RunConfig` subclass when given)."""
    from cfgcheck.jsonschema import json_schemas

    schemas = json_schemas() if schema is None else json_schemas(schema)
    schemas["config"] = primary_config_schema(schemas["run"])
    return {
        f"{name}.schema.json": json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        for name, schema in sorted(schemas.items())
    }


def stale_files(out: Path, schema: type[RunConfig] | None = None) -> list[str]:
    """Files under ``out`` that differ from the generated schemas, are missing or extra."""
    from cfgcheck.safeio import read_text

    expected = schema_files(schema)
    present = {p.name for p in out.glob("*.schema.json")} if out.is_dir() else set()
    stale = [  # read bounded: a FIFO or device under the name is an error, never a hang
        name
        for name, text in expected.items()
        if name not in present or read_text(out / name) != text
    ]
    return sorted(stale + sorted(present - set(expected)))


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "schema",
        help="write JSON Schemas for editor completion (--markdown: the key reference)",
    )
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help=f"output directory (default: ./{DEFAULT_OUT})"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the files in --out are stale",
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="write nothing; print every key with its type, default and description as "
        "Markdown (docs/schema.md)",
    )
    parser.add_argument(
        "--schema",
        metavar="PKG.MOD:CLASS",
        help="a team's cfgcheck.RunConfig subclass (default: schema of [tool.cfgcheck], else "
        "the built-in run config); imports that module",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_LOAD, EXIT_OK
    from cfgcheck.project.context import resolve_schema
    from cfgcheck.project.settings import find_settings

    if args.markdown:
        from cfgcheck.schema_docs import render_markdown

        sys.stdout.write(render_markdown())
        return EXIT_OK
    schema = resolve_schema(args.schema, find_settings())
    out = Path(args.out)
    if args.check:
        stale = stale_files(out, schema)
        for name in stale:
            print(f"{out / name}: stale; run `cfgcheck schema --out {out}`")
        return EXIT_FINDINGS if stale else EXIT_OK
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in schema_files(schema).items():
            (out / name).write_text(text, encoding="utf-8")
            print(out / name)
    except OSError as e:
        print(f"cfgcheck: error: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return EXIT_LOAD
    return EXIT_OK
