"""Rules that explain themselves: every finding id has an explanation (what it checks, the real
failure, the fix), `cfgcheck rules` / `cfgcheck explain` print it, docs/rules.md is generated
from the same table and kept fresh, and every finding's JSON links to it. That every emitted id
has an entry is tests/test_rule_catalogue.py."""

from __future__ import annotations

import json

import pytest

from cfgcheck.rules import explanations
from tests.conftest import REPO, run_cfgcheck


def test_docs_rules_md_is_generated_from_the_table() -> None:
    on_disk = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    assert on_disk == explanations.render_markdown(), (
        "docs/rules.md is stale: run `cfgcheck rules --format markdown > docs/rules.md`"
    )


def test_rules_lists_every_id_with_severity() -> None:
    proc = run_cfgcheck("rules")
    assert proc.returncode == 0
    for rule_id in explanations.emitted_ids():
        assert rule_id in proc.stdout
    assert "gpu-memory" in proc.stdout and "error / warning / info" in proc.stdout
    rows = json.loads(run_cfgcheck("rules", "--format", "json").stdout)
    assert {r["rule"] for r in rows} == set(explanations.emitted_ids())


def test_explain_prints_the_check_the_failure_and_the_fix() -> None:
    proc = run_cfgcheck("explain", "seq-len-over-block-size")
    assert proc.returncode == 0
    assert "Cannot attend to 3063, block size is only 2048" in proc.stdout
    assert "checks:" in proc.stdout and "fix:" in proc.stdout
    assert "docs/rules.md#seq-len-over-block-size" in proc.stdout
    unknown = run_cfgcheck("explain", "seq-len")
    assert unknown.returncode == 2 and "did you mean seq-len-over-block-size?" in unknown.stderr


def test_a_missing_explanation_does_not_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(explanations.EXPLANATIONS, "gpu-name")
    assert explanations.missing_ids() == ["gpu-name"]
    assert "no explanation yet" in (explanations.explain_text("gpu-name") or "")
    assert "no explanation yet" in explanations.render_markdown()


def test_every_finding_links_to_its_doc() -> None:
    proc = run_cfgcheck("check", "--format", "json", "data.max_seq_length=3063")
    [finding] = json.loads(proc.stdout)["findings"]
    assert finding["doc"] == "docs/rules.md#seq-len-over-block-size"
    anchor = finding["doc"].split("#")[1]
    assert f"\n### {anchor}\n" in (REPO / "docs" / "rules.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["check", "data", "memory", "hook"])
def test_help_names_exit_codes_overrides_rules_and_gpus(command: str) -> None:
    proc = run_cfgcheck(command, "--help")
    assert proc.returncode == 0
    text = proc.stdout
    assert "exit status:" in text and "2  the config could not be read" in text
    assert "cfgcheck rules" in text and "cfgcheck explain RULE" in text
    if command != "hook":
        assert "trainer.lora.rank=16" in text and "group=option" in text
        assert "MI300X" in text and "A100-40GB" in text and "ambiguous" in text
