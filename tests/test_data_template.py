"""``data.template`` is read before it renders: ``{instruction:>30000000}`` padded every record
to 30 million characters and the tokenizer took them whole (gigabytes, then an abort). The
schema refuses it with one finding, and the renderer refuses it before formatting anything."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from cfgcheck import validate
from cfgcheck.schema.template import MAX_WIDTH, template_problem
from tests.conftest import REPO

REFUSED = [
    ("{instruction:>30000000}", "pads or rounds to more than"),
    ("{score:.5000f}", "pads or rounds to more than"),
    ("{instruction:0>2000}", "pads or rounds to more than"),
    ("{instruction:{width}}", "takes its format from another field"),
    ("{instruction.__class__}", "reads a private attribute"),
    ("{instruction[__dict__]}", "reads a private attribute"),
    ("{}", "positional field"),
    ("{instruction", "is not a valid format string"),
]
ACCEPTED = [
    "{instruction}\n{input}\n{output}",
    "### Instruction:\n{instruction}\n\n### Response:\n{output}",
    "{{literal}} {text}",
    f"{{score:.2f}} {{name:>{MAX_WIDTH}}}",
    "{messages[0]} {meta.source}",
]


@pytest.mark.parametrize(("template", "reason"), REFUSED)
def test_a_template_that_cannot_render_safely_is_one_finding(
    cfg: dict[str, Any], template: str, reason: str
) -> None:
    assert template_problem(template) is not None
    cfg["data"]["template"] = template
    findings = [f for f in validate(cfg).findings if f.paths == ("data.template",)]
    assert len(findings) == 1
    assert findings[0].rule == "invalid-value"
    assert reason in findings[0].message


@pytest.mark.parametrize("template", ACCEPTED)
def test_plain_templates_pass(cfg: dict[str, Any], template: str) -> None:
    assert template_problem(template) is None
    cfg["data"]["template"] = template
    assert not [f for f in validate(cfg).findings if f.paths == ("data.template",)]


def test_the_renderer_refuses_before_formatting() -> None:
    """The renderer's own guard (a DataConfig built without validation), under a 2 GB
    address-space limit: formatting the 3-billion-character field would not fit."""
    code = textwrap.dedent(
        """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from cfgcheck.data.records import DataReadError, renderer
        from cfgcheck.schema.data import DataConfig

        data = DataConfig.model_construct(template="{instruction:>3000000000}", text_field="t")
        try:
            renderer(data)({"instruction": "x"})
        except DataReadError as e:
            print("refused:", e)
        """
    )
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: data.template field {instruction:>3000000000} pads" in done.stdout
