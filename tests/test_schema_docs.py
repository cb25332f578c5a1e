"""docs/schema.md, the key reference, is `cfgcheck schema --markdown` (generated from the Pydantic
models), lists every key of every section with a description, and stays equal to the output."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from cfgcheck.schema.run import RunConfig
from cfgcheck.schema_docs import render_markdown
from tests.conftest import REPO, run_cfgcheck


def _keys(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in model.model_fields.items():
        out[prefix + key] = field
        for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out.update(_keys(arg, f"{prefix}{key}."))
    return out


def test_docs_schema_md_is_the_generated_reference() -> None:
    proc = run_cfgcheck("schema", "--markdown")
    assert proc.returncode == 0, proc.stderr
    on_disk = (REPO / "docs" / "schema.md").read_text(encoding="utf-8")
    assert on_disk == proc.stdout, (
        "docs/schema.md is stale: cfgcheck schema --markdown > docs/schema.md"
    )


def test_every_key_is_listed_with_a_description() -> None:
    text = render_markdown()
    rows = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| `")}
    for path, field in _keys(RunConfig).items():
        sections = (
            "model",
            "tokenizer",
            "data",
            "trainer",
            "trainer.lora",
            "trainer.rl",
            "trainer.offload",
        )
        if path in sections:
            continue  # a section: its keys have a table of their own
        assert path in rows, path
        assert field.description, f"{path} has no description in cfgcheck/schema/"
    assert "| `data.max_seq_length` | int (> 0, <= 134217728) | *required* |" in text
    assert '| `trainer.lora.targets` | list of str | `["q_proj", "v_proj"]` |' in text
    assert "| `trainer.gpu.name` | str or null | `null` |" in text
