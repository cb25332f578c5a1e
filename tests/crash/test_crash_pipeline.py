"""The pipeline rules of issue 10, reproduced: each miss crashes a real CPU step (the real
pipeline of tests/real_pipeline.py: PreTrainedTokenizerFast, one tokenizer call per sample,
default_collate / DataCollatorWithPadding / packing, a tiny LlamaForCausalLM, LitGPT's
block-size guard) and cfgcheck flags it; the finding's first fix, applied as overrides,
passes cfgcheck and trains. Each false alarm trains and cfgcheck no longer refuses it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import cfgcheck
from cfgcheck.data.check import with_scan_findings
from cfgcheck.memory.estimate import sequence_length
from tests.factories import CORPUS
from tests.real_pipeline import (
    Case,
    apply_overrides,
    build_tokenizers,
    case_of,
    load_tokenizer,
    real_step,
    run_config,
)

pytestmark = [pytest.mark.crash, pytest.mark.filterwarnings("ignore")]

LONG = (" ".join(CORPUS[:3]), CORPUS[1], CORPUS[2] + " " + CORPUS[5], CORPUS[4])
SHORT = ("The embedding.", "LoRA trains.", "Mixed precision.", "A tokenizer.")


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_tokenizers(tmp_path_factory.mktemp("pipeline-tokenizers"))


def case(**changes: Any) -> Case:
    base: dict[str, Any] = {
        "tokenizer": "pad",
        "declared_pad": None,
        "padding": "longest",
        "truncation": True,
        "max_seq_length": 32,
        "max_length": None,
        "pad_to_multiple_of": None,
        "collator": "padded",
        "micro_batch_size": 2,
        "block_size": 64,
        "texts": LONG,
    }
    return Case(**{**base, **changes})


def checked(c: Case, tokenizers: dict[str, Path], tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """(``cfgcheck check --scan-data``'s result, the run config) of a case."""
    data = tmp_path / f"train-{len(list(tmp_path.iterdir()))}.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in c.texts))
    cfg = run_config(c, tokenizers[c.tokenizer], data)
    return with_scan_findings(cfgcheck.validate(cfg)), cfg


def flagged_crashes_and_fix_trains(
    c: Case, rule: str, crash: str, tokenizers: dict[str, Path], tmp_path: Path
) -> cfgcheck.Finding:
    result, cfg = checked(c, tokenizers, tmp_path)
    (finding,) = [f for f in result.errors if f.rule == rule]
    error = real_step(c, tokenizers[c.tokenizer])
    assert error is not None and re.search(crash, error), error
    assert finding.fixes, "an error finding carries a fix"
    fixed_cfg = apply_overrides(cfg, finding.fixes[0].overrides)
    fixed = with_scan_findings(cfgcheck.validate(fixed_cfg))
    assert fixed.ok, [f.message for f in fixed.errors]
    fixed_case = case_of(fixed_cfg, c)
    assert real_step(fixed_case, tokenizers[c.tokenizer]) is None
    return finding


def test_miss1_declared_pad_missing_from_the_vocabulary(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    """No unk token: transformers gives '<nope>' no id, and the pad check compares None < 0."""
    c = case(tokenizer="bare", declared_pad="<nope>")
    f = flagged_crashes_and_fix_trains(
        c, "pad-token-missing", r"TypeError: '<' not supported", tokenizers, tmp_path
    )
    assert "no id" in f.message and "TypeError" in f.message


def test_miss2_packing_without_a_pad_token(tokenizers: dict[str, Path], tmp_path: Path) -> None:
    """Short samples leave the last packed row part-empty: it is filled with the pad id."""
    c = case(
        tokenizer="nopad", padding="do_not_pad", collator="packed", max_seq_length=16, texts=SHORT
    )
    f = flagged_crashes_and_fix_trains(c, "pad-token-missing", r"NoneType", tokenizers, tmp_path)
    assert "last row" in f.message
    # long samples all cut to max_seq_length fill whole rows: the scan shows no row is padded
    full = case(tokenizer="nopad", padding="do_not_pad", collator="packed", max_seq_length=16)
    result, _ = checked(full, tokenizers, tmp_path)
    assert result.ok and result.by_rule("pad-token-missing")[0].severity == "warning"
    assert real_step(full, tokenizers["nopad"]) is None


def test_miss3_rounding_up_pads(tokenizers: dict[str, Path], tmp_path: Path) -> None:
    """padding=do_not_pad, batch of 1, but the padding collator rounds up to a multiple of 8
    (and transformers' tokenizer.pad asks for a pad token in any case)."""
    c = case(tokenizer="nopad", padding="do_not_pad", pad_to_multiple_of=8, micro_batch_size=1)
    flagged_crashes_and_fix_trains(
        c, "pad-token-missing", r"Asking to pad but the tokenizer", tokenizers, tmp_path
    )


def test_miss4_padding_to_a_max_length_above_the_block(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    """Short samples, each padded to max_length=96 > block 64: flagged as a length problem,
    not as ragged batches (they stack)."""
    c = case(padding="max_length", max_length=96, collator="default", texts=SHORT)
    result, _ = checked(c, tokenizers, tmp_path)
    assert not result.by_rule("ragged-batch")
    f = flagged_crashes_and_fix_trains(
        c,
        "seq-len-over-block-size",
        r"Cannot attend to 96, block size is only 64",
        tokenizers,
        tmp_path,
    )
    assert "every batch fails" in f.message


def test_miss5_explicit_head_size_is_framework_dependent(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    """n_embd=30, n_head=4, head_size=8: transformers' LlamaConfig refuses it; LitGPT's Config
    (litgpt/config.py) asserts divisibility only when head_size is None and sizes the
    projections from head_size, so it builds."""
    c = case(shape=(30, 4, 8))
    f = flagged_crashes_and_fix_trains(
        c, "head-size-mismatch", r"hidden size \(30\) is not a multiple", tokenizers, tmp_path
    )
    assert "trainer.framework=hf" in f.message and "LitGPT" in f.message
    _, cfg = checked(c, tokenizers, tmp_path)
    cfg["trainer"]["framework"] = "litgpt"
    assert not cfgcheck.validate(cfg).by_rule("head-size-mismatch")


def test_false_alarm1_pad_token_of_the_padding_section(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    c = case(tokenizer="section")
    tok = load_tokenizer(tokenizers["section"], None)
    assert tok.pad_token == "<pad>"  # PreTrainedTokenizerFast reads the padding section
    result, _ = checked(c, tokenizers, tmp_path)
    assert result.ok, [f.message for f in result.errors]
    assert real_step(c, tokenizers["section"]) is None


def test_false_alarm2_uniform_batches_between_max_seq_length_and_block(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    """Every sample is exactly max_length=48 tokens and stacks; the silent part (48 > 32
    reaches the model) is a warning whose fix removes it."""
    c = case(padding="max_length", max_length=48, collator="default")
    result, cfg = checked(c, tokenizers, tmp_path)
    assert result.ok, [f.message for f in result.errors]
    assert real_step(c, tokenizers["pad"]) is None
    (warning,) = result.by_rule("max-length-over-max-seq-length")
    for fix in warning.fixes:
        fixed_cfg = apply_overrides(cfg, fix.overrides)
        fixed = cfgcheck.validate(fixed_cfg)
        assert fixed.ok and not fixed.by_rule("max-length-over-max-seq-length")
        assert real_step(case_of(fixed_cfg, c), tokenizers["pad"]) is None


def test_false_alarm3_packed_rows_are_never_rounded(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    c = case(
        padding="do_not_pad",
        collator="packed",
        max_seq_length=30,
        pad_to_multiple_of=12,
        block_size=32,
    )
    result, _ = checked(c, tokenizers, tmp_path)
    assert result.ok, [f.message for f in result.errors]
    assert real_step(c, tokenizers["pad"]) is None


def test_silent_sequences_longer_than_max_seq_length(
    tokenizers: dict[str, Path], tmp_path: Path
) -> None:
    """max_length=40 between max_seq_length=16 and the block: 40-token batches reach the model;
    cfgcheck says so and the memory estimate assumes 40, not 16."""
    c = case(max_seq_length=16, max_length=40)
    tok = load_tokenizer(tokenizers["pad"], None)
    assert max(len(tok(t, truncation=True, max_length=40)["input_ids"]) for t in c.texts) == 40
    result, _ = checked(c, tokenizers, tmp_path)
    (warning,) = result.by_rule("max-length-over-max-seq-length")
    assert "40" in warning.message
    assert result.config is not None and sequence_length(result.config.data) == 40
    assert real_step(c, tokenizers["pad"]) is None  # it trains, on 40-token sequences
