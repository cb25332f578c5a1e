"""lora-target-unknown on the shipped conf/ tree: verdicts, hints and fixes that pass on the
command line; LitGPT's switches. (Real PEFT: tests/crash/test_crash_lora_targets.py.)"""

from __future__ import annotations

import pytest

from cfgcheck import check
from cfgcheck.findings import Finding
from tests.conftest import CONF


def lora_findings(*overrides: str) -> list[Finding]:
    return [
        f
        for f in check(CONF, "config", list(overrides)).findings
        if f.rule == "lora-target-unknown"
    ]


def assert_fix_passes(f: Finding, *overrides: str) -> None:
    """Every fix, pasted on the same command line, removes the finding and adds no error."""
    assert f.fixes
    before = {x.rule for x in check(CONF, "config", list(overrides)).errors}
    for fix in f.fixes:
        result = check(CONF, "config", [*overrides, *fix.overrides])
        assert not [x for x in result.findings if x.rule == "lora-target-unknown"], fix
        assert {x.rule for x in result.errors} <= before - {"lora-target-unknown"}, fix


@pytest.mark.parametrize(
    ("overrides", "severity", "fix"),
    [
        (("model=phi-3-mini-4k", "tokenizer=phi-3"), "error", "trainer.lora.targets=[qkv_proj]"),
        (
            ("model=phi-2", "trainer.lora.targets=[q_proj,o_proj]"),
            "warning",
            "trainer.lora.targets=[q_proj,dense]",
        ),
        (
            ("model=qwen3-0.6b", "tokenizer=qwen3", "trainer.lora.targets=[q,v]"),
            "error",
            "trainer.lora.targets=[q_proj,v_proj]",
        ),
        (
            ("trainer.lora.targets=[all-linear,q_proj]",),
            "warning",
            "trainer.lora.targets=[all-linear]",
        ),
        (
            ("model=gemma-2-2b", "tokenizer=gemma", "trainer.lora.targets=[mlp]"),
            "error",
            "trainer.lora.targets=[gate_proj,up_proj,down_proj]",
        ),
        (
            ("model=phi-3-mini-4k", "tokenizer=phi-3", "trainer=qlora"),
            "warning",  # o_proj and down_proj exist; q/k/v/gate/up are fused
            "trainer.lora.targets=[qkv_proj,o_proj,gate_up_proj,down_proj]",
        ),
    ],
)
def test_finding_hint_and_fix(overrides: tuple[str, ...], severity: str, fix: str) -> None:
    (f,) = lora_findings(*overrides)
    assert f.severity == severity
    assert [x.overrides for x in f.fixes] == [(fix,)]
    assert "all-linear" in f.hint and "trainer.lora.targets" in f.paths
    assert_fix_passes(f, *overrides)


def test_not_found_message_quotes_peft() -> None:
    (f,) = lora_findings("model=phi-3-mini-4k", "tokenizer=phi-3")
    assert "Target modules {'q_proj', 'v_proj'} not found in the base model" in f.message
    assert "embed_tokens, qkv_proj, o_proj, gate_up_proj, down_proj, lm_head" in f.hint


@pytest.mark.parametrize(
    "overrides",
    [
        (),  # tinyllama with [q_proj, v_proj]
        ("trainer=qlora",),
        ("trainer.lora.targets=[all-linear]",),
        ("trainer.lora.targets=[ALL-LINEAR]",),  # PEFT lower-cases the shorthand
        ("trainer.lora.targets=[self_attn.q_proj,layers.0.mlp.down_proj]",),  # suffixes
        ("trainer.lora.targets=[embed_tokens,lm_head]",),
        ("model=phi-2", "trainer.lora.targets=[q_proj,dense,fc1,fc2]"),
        ("model=phi-3-mini-4k", "tokenizer=phi-3", "trainer.lora.targets=[qkv_proj]"),
        ("trainer=full", "+trainer.lora.targets=[nothing]"),  # no adapters at all
    ],
)
def test_valid_targets_pass(overrides: tuple[str, ...]) -> None:
    assert lora_findings(*overrides) == []


def test_a_module_path_prefix_is_not_a_name() -> None:
    """PEFT matches whole dotted components: ``proj`` is not a suffix of ``q_proj``."""
    (f,) = lora_findings("trainer.lora.targets=[proj]")
    assert f.severity == "error"


def test_litgpt_switches() -> None:
    litgpt = "+trainer.framework=litgpt"
    assert lora_findings(litgpt, "trainer.lora.targets=[query,value,lora_mlp,head]") == []
    assert lora_findings(litgpt, "trainer.lora.targets=[q_proj,v_proj]") == []
    (f,) = lora_findings(litgpt, "trainer.lora.targets=[query,attn_qkv]")
    assert f.severity == "error" and "attn_qkv" in f.message
    assert [x.overrides for x in f.fixes] == [("trainer.lora.targets=[query]",)]
    (g,) = lora_findings(litgpt, "trainer.lora.targets=[wq]")
    assert [x.overrides for x in g.fixes] == [("trainer.lora.targets=[query,value]",)]


def test_a_hostile_target_list_gives_one_bounded_finding() -> None:
    targets = ",".join(f"x{i}" for i in range(600))  # under the 4096-character override cap
    (f,) = lora_findings("model=llama-2-13b", f"trainer.lora.targets=[{targets}]")
    assert f.severity == "error" and "and 592 more" in f.message
    assert len(f.message) + len(f.hint) < 2000
    assert [x.overrides for x in f.fixes] == [("trainer.lora.targets=[q_proj,v_proj]",)]
