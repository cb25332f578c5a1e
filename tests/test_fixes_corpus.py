"""Every fix of every finding works: over a corpus of failing configs (overrides on the shipped
``conf/``), each error and warning finding carries fixes, and each fix's overrides, appended
to the same command line exactly as written (plain ``key=value``, no ``+``), compose with Hydra,
remove that finding (no finding of the same rule on the same paths is left) and introduce no
new error. Generic over findings and fixes: rules added later are checked the same way."""

from __future__ import annotations

from functools import cache

import pytest

from cfgcheck.compose_cache import compose_cached
from cfgcheck.findings import CheckResult, Finding
from cfgcheck.fixcheck import new_errors
from cfgcheck.validate import validate
from tests.conftest import CONF

# Overrides on the shipped conf/ that each produce at least one error or warning.
CORPUS: dict[str, tuple[str, ...]] = {
    "seq-len": ("data.max_seq_length=3063",),
    "pad-multiple-over-block": ("data.max_seq_length=2040", "data.pad_to_multiple_of=96"),
    "pad-multiple-mismatch": ("data.pad_to_multiple_of=12",),
    "vocab-declared": ("model.vocab_size=32001",),
    "vocab-demo": ("tokenizer=demo-bpe",),
    "special-out-of-range": ("tokenizer.eos_token_id=40000",),
    "pad-missing": ("tokenizer.pad_token=null", "tokenizer.pad_token_id=null"),
    "pad-is-eos": ("tokenizer.pad_token='</s>'", "tokenizer.pad_token_id=2"),
    "tokenizer-unreadable": ("tokenizer.path=/nonexistent/tokenizer.json",),
    "tokenizer-declared": ("tokenizer=demo-bpe", "tokenizer.vocab_size=999"),
    "token-not-in-vocab": ("tokenizer=demo-bpe", "tokenizer.pad_token='<zzz>'"),
    "ignore-index": ("data.ignore_index=5",),
    "ragged": ("data.collator=default",),
    "batch-size": ("trainer.global_batch_size=20",),
    "two-devices": ("trainer.devices=2",),
    "fsdp-one-device": ("trainer.strategy=fsdp",),
    "head-size": ("model.n_head=30",),
    "query-groups": ("model.n_query_groups=5",),
    "rotary-odd": ("model.rotary_fraction=0.3",),
    "qlora-8bit": ("trainer=qlora", "trainer.quantization=int8"),
    "lora-no-rank": ("trainer=full", "trainer.finetuning=lora"),
    "lora-no-targets": ("trainer.lora.targets=[]",),
    "quantized-full": ("trainer=full", "trainer.quantization=nf4"),
    "flash-fp32": ("trainer.attention=flash", "trainer.precision=32-true"),
    "t4-bf16-flash": ("trainer.gpu.name=T4", "trainer.attention=flash"),
    "gemma-2b-on-t4": ("model=gemma-2b", "tokenizer=gemma", "trainer.gpu.name=T4"),
    "13b-full-a100": ("model=llama-2-13b", "trainer=full"),
    "8b-full-seq-4096": ("model=llama-3-8b", "tokenizer=llama-3", "trainer=full"),
    "typo": ("trainer.lora.rnak=16",),
    "quoted-int": ("model.vocab_size='32000'",),
    "bad-choice": ("trainer.precision=bf16",),
    "dropout-range": ("trainer.lora.dropout=1.5",),
    "missing-seq-len": ("~data.max_seq_length",),
    "gpu-unknown": ("trainer.gpu.name=RTX9090",),
    "lr-full": ("trainer=full", "trainer.learning_rate=0.01"),
    "lr-lora": ("trainer.learning_rate=0.5",),
    "lr-tiny": ("trainer.learning_rate=1e-9",),
    "gpu-ambiguous": ("trainer.gpu.name=A100",),
    "combined": (
        "trainer.devices=2",
        "data.max_seq_length=3063",
        "trainer.lora.rnak=16",
        "trainer.attention=flash",
        "trainer.precision=32-true",
    ),
}

# Rules allowed to report an error or warning without a machine-readable fix (none since the
# memory, pipeline and models branches landed): every finding of the corpus must carry one.
AWAITING_FIXES: frozenset[str] = frozenset()


@cache
def run(overrides: tuple[str, ...]) -> CheckResult:
    """The findings ``cfgcheck check OVERRIDES`` reports (Hydra composition, no locations)."""
    return validate(compose_cached(CONF, "config", overrides))


def key(f: Finding) -> tuple[str, tuple[str, ...]]:
    return (f.rule, f.paths)


def serious(result: CheckResult) -> list[Finding]:
    return [f for f in result.findings if f.severity != "info"]


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_fix_removes_its_finding_without_a_new_error(case: str) -> None:
    overrides = CORPUS[case]
    result = run(overrides)
    findings = serious(result)
    assert findings, f"{case}: the corpus config should fail"
    for finding in findings:
        if not finding.fixes:
            assert finding.rule in AWAITING_FIXES, (
                f"{case}: {finding.rule} has no machine-readable fix: {finding.message}"
            )
            continue
        for fix in finding.fixes:
            assert fix.overrides and fix.summary
            assert not any(o.startswith("+") for o in fix.overrides), fix
            after = run((*overrides, *fix.overrides))
            left = [f for f in after.findings if key(f) == key(finding)]
            assert not left, f"{case}: fix {fix.overrides} leaves {left[0].message}"
            new = new_errors(result.findings, after.findings)
            assert not new, f"{case}: fix {fix.overrides} adds {new[0].rule}: {new[0].message}"


def test_no_single_change_fits_gemma_2b_on_a_t4_so_a_combination_is_offered() -> None:
    """bf16 is impossible on a T4 (sm75): the precision fix is fp16; the memory finding needs
    a change that fits 15 GiB, possibly several settings at once."""
    result = run(CORPUS["gemma-2b-on-t4"])
    [capability] = result.by_rule("gpu-capability")
    assert ("trainer.precision=16-mixed",) in [f.overrides for f in capability.fixes]
    for finding in serious(result):
        if finding.rule in AWAITING_FIXES and not finding.fixes:
            continue
        assert finding.fixes, finding.rule


def test_fixes_are_in_the_json_output() -> None:
    import json

    from tests.conftest import run_cfgcheck

    proc = run_cfgcheck("check", "--format", "json", "trainer.devices=2")
    assert proc.returncode == 1
    payload = json.loads(proc.stdout)
    [finding] = [f for f in payload["findings"] if f["rule"] == "strategy-device-count"]
    assert {
        "overrides": ["trainer.strategy=ddp"],
        "summary": "data parallel over the devices",
        "flags": [],
        "shell": "trainer.strategy=ddp",
    } in finding["fixes"]
