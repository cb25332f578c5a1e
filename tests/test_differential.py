"""Differential test: cfgcheck's verdict against a real CPU training step, on generated configs.

Each generated case is a tiny run (a real BPE tokenizer folder, a small JSONL dataset, padding /
truncation / max_length / pad_to_multiple_of / collator / micro batch / block size) checked two
ways:

* cfgcheck: ``cfgcheck.validate`` plus the data-scan findings, exactly as
  ``cfgcheck check --scan-data`` does (``cfgcheck.data.check.with_scan_findings``); the verdict
  is "error" when any finding is an error.
* a real pipeline written here, independently of ``cfgcheck.runtime`` and ``cfgcheck.pipeline``:
  ``PreTrainedTokenizerFast`` loaded from the folder (the declared pad token set on it as a
  script would), one tokenizer call per sample with the config's padding / truncation /
  max_length / pad_to_multiple_of, then torch's ``default_collate``, transformers'
  ``DataCollatorWithPadding`` or a packing collator written below, a ``LlamaForCausalLM`` of the
  model shape, LitGPT's block-size guard, and forward + backward + AdamW on every batch.

They must agree: error <=> crash. Every fix of every config-level error is also applied and the
config checked again: the finding must go and no new error may appear.

A few dozen examples by default; ``CFGCHECK_DIFF_EXAMPLES=500`` runs more (and prints the tally
of agreements, misses and false alarms). Misses fail the test; false alarms fail it above 2 %.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.data.check import with_scan_findings  # noqa: E402
from tests.factories import CORPUS, bpe, save_folder  # noqa: E402

EXAMPLES = int(os.environ.get("CFGCHECK_DIFF_EXAMPLES", "30"))
FALSE_ALARM_RATE = 0.02
WORDS = " ".join(CORPUS[:8]).split()

pytestmark = pytest.mark.filterwarnings("ignore")


# --- tokenizers -----------------------------------------------------------------------------
# "pad": <pad> is a special token and tokenizer_config.json's pad_token.
# "nopad": no pad token (unk and eos exist).
# "section": no pad in tokenizer_config.json, only in tokenizer.json's "padding" section.
# "bare": no pad and no unk token in the config (a declared pad missing from the vocabulary
#         then gets no id at all).
TOKENIZERS = ("pad", "nopad", "section", "bare")


def _build_tokenizers(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    with_pad = ("<unk>", "<s>", "</s>", "<pad>")
    out["pad"] = save_folder(bpe(special=with_pad), root / "pad", pad_token="<pad>")
    out["nopad"] = save_folder(bpe(), root / "nopad")
    section = bpe(special=with_pad)
    section.enable_padding(pad_id=3, pad_token="<pad>")
    out["section"] = save_folder(section, root / "section")
    out["bare"] = save_folder(bpe(), root / "bare", unk_token=None)
    return out


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _build_tokenizers(tmp_path_factory.mktemp("diff-tokenizers"))


# --- generated cases ------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    tokenizer: str
    declared_pad: str | None
    padding: str
    truncation: bool
    max_seq_length: int
    max_length: int | None
    pad_to_multiple_of: int | None
    collator: str
    micro_batch_size: int
    block_size: int
    texts: tuple[str, ...]
    shape: tuple[int, int, int | None] = (32, 2, None)  # n_embd, n_head, explicit head_size


def _texts(seed: int, count: int, longest: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    return tuple(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest))) for _ in range(count)
    )


cases = st.builds(
    Case,
    tokenizer=st.sampled_from(TOKENIZERS),
    declared_pad=st.sampled_from([None, None, "</s>", "<nope>"]),
    padding=st.sampled_from(["longest", "max_length", "do_not_pad"]),
    truncation=st.booleans(),
    max_seq_length=st.integers(6, 48),
    max_length=st.one_of(st.none(), st.integers(6, 72)),
    pad_to_multiple_of=st.sampled_from([None, None, 4, 8, 12, 16]),
    collator=st.sampled_from(["default", "padded", "packed"]),
    micro_batch_size=st.integers(1, 3),
    block_size=st.sampled_from([16, 24, 32, 48, 64]),
    texts=st.builds(_texts, st.integers(0, 10**6), st.integers(1, 6), st.sampled_from([3, 8, 30])),
    shape=st.sampled_from([(32, 2, None), (32, 2, None), (32, 4, 16), (30, 4, 8), (36, 8, 8)]),
)


# --- the real pipeline (independent of cfgcheck) ---------------------------------------------
def load_tokenizer(folder: Path, declared_pad: str | None) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    tok.padding_side = "right"
    if declared_pad is not None:
        tok.pad_token = declared_pad  # what a training script does with the config's value
    return tok


def pack(features: list[dict[str, Any]], length: int, pad_id: int | None) -> dict[str, Any]:
    """Concatenate the real tokens of the batch into rows of ``length``; the last row is
    filled with the pad id (labels -100)."""
    ids: list[int] = []
    for f in features:
        ids += [i for i, m in zip(f["input_ids"], f["attention_mask"], strict=True) if m]
    fill = -len(ids) % length
    if fill and pad_id is None:
        raise ValueError("packing needs a pad id to fill the last row")
    labels = ids + [-100] * fill
    ids = ids + [pad_id or 0] * fill
    rows = torch.tensor(ids).view(-1, length)
    return {"input_ids": rows, "labels": torch.tensor(labels).view(-1, length)}


def real_step(case: Case, folder: Path) -> str | None:
    """Run the pipeline; None when every batch trained, else the error."""
    from torch.utils.data import default_collate
    from transformers import DataCollatorWithPadding, LlamaConfig, LlamaForCausalLM

    try:
        tok = load_tokenizer(folder, case.declared_pad)
        kwargs = {
            "padding": {"do_not_pad": False}.get(case.padding, case.padding),
            "truncation": case.truncation,
            "max_length": case.max_length or case.max_seq_length,
            "pad_to_multiple_of": case.pad_to_multiple_of,
        }
        features = [dict(tok(t, **kwargs)) for t in case.texts]
        torch.manual_seed(0)
        n_embd, n_head, head_size = case.shape
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=n_embd,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=n_head,
            num_key_value_heads=n_head,
            head_dim=head_size or n_embd // n_head,
            max_position_embeddings=case.block_size,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )
        model = LlamaForCausalLM(config)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        padder = DataCollatorWithPadding(tok, pad_to_multiple_of=case.pad_to_multiple_of)
        for start in range(0, len(features), case.micro_batch_size):
            chunk = features[start : start + case.micro_batch_size]
            if case.collator == "packed":
                batch = pack(chunk, case.max_seq_length, tok.pad_token_id)
            else:
                if case.collator == "default":
                    batch = default_collate(
                        [{k: torch.tensor(v) for k, v in f.items()} for f in chunk]
                    )
                else:
                    batch = dict(padder(chunk))
                labels = batch["input_ids"].clone()
                labels[batch["attention_mask"] == 0] = -100
                batch["labels"] = labels
            batch.pop("token_type_ids", None)
            t = batch["input_ids"].shape[1]
            if t > case.block_size:  # LitGPT's guard (litgpt/model.py, GPT.forward)
                raise ValueError(f"Cannot attend to {t}, block size is only {case.block_size}")
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    except Exception as e:  # the verdict is "it crashed"; the reason is shown on disagreement
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return None


# --- cfgcheck's verdict --------------------------------------------------------------------
def run_config(case: Case, folder: Path, data_file: Path) -> dict[str, Any]:
    tok = load_tokenizer(folder, case.declared_pad)
    data: dict[str, Any] = {
        "max_seq_length": case.max_seq_length,
        "padding": case.padding,
        "truncation": case.truncation,
        "collator": case.collator,
        "paths": [str(data_file)],
        "format": "jsonl",
    }
    if case.max_length is not None:
        data["max_length"] = case.max_length
    if case.pad_to_multiple_of is not None:
        data["pad_to_multiple_of"] = case.pad_to_multiple_of
    tokenizer: dict[str, Any] = {"path": str(folder)}
    if case.declared_pad is not None:
        tokenizer["pad_token"] = case.declared_pad
    n_embd, n_head, head_size = case.shape
    shape = {"n_embd": n_embd, "n_head": n_head}
    if head_size is not None:
        shape["head_size"] = head_size
    return {
        "name": "diff",
        "model": {
            "name": "tiny",
            "block_size": case.block_size,
            "vocab_size": len(tok),
            "n_layer": 1,
            **shape,
            "intermediate_size": 64,
        },
        "tokenizer": tokenizer,
        "data": data,
        "trainer": {"micro_batch_size": case.micro_batch_size, "precision": "32-true"},
    }


def apply_overrides(cfg: dict[str, Any], overrides: tuple[str, ...]) -> dict[str, Any]:
    """Plain ``key=value`` overrides on a copy of ``cfg`` (values parsed as YAML scalars)."""
    import yaml

    out = json.loads(json.dumps(cfg))
    for item in overrides:
        key, _, raw = item.partition("=")
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = yaml.safe_load(raw)
    return out


def check_fixes(result: cfgcheck.CheckResult, cfg: dict[str, Any]) -> Iterator[str]:
    """Problems with the fixes of config-level errors: a fix that leaves its finding, or one
    that brings a new error."""
    before = {f.rule for f in result.errors}
    for finding in result.errors:
        for fix in finding.fixes:
            after = cfgcheck.validate(apply_overrides(cfg, fix.overrides))
            rules = {f.rule for f in after.errors}
            if finding.rule in rules:
                yield f"{finding.rule}: fix {fix.overrides} leaves the finding"
            if rules - before:
                yield f"{finding.rule}: fix {fix.overrides} brings {sorted(rules - before)}"


@dataclass
class Tally:
    total: int = 0
    misses: list[str] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)
    fix_problems: list[str] = field(default_factory=list)
    trained: int = 0  # configs whose real step trained (the rest crashed)
    rules: dict[str, int] = field(default_factory=dict)  # error rules seen, by count


TALLY = Tally()


# The default run asserts on every example; a larger run (CFGCHECK_DIFF_EXAMPLES above the
# default) counts them all and asserts the totals in test_tally, which runs after.
TALLY_ONLY = EXAMPLES > 30


def report() -> str:
    t = TALLY
    lines = [
        f"differential: {t.total} configs, {t.total - len(t.misses) - len(t.false_alarms)} "
        f"agree, {len(t.misses)} misses, {len(t.false_alarms)} false alarms, "
        f"{len(t.fix_problems)} fix problems; {t.trained} trained, {t.total - t.trained} "
        f"crashed; errors by rule: {dict(sorted(t.rules.items()))}",
        *(f"  miss: {m}" for m in t.misses[:10]),
        *(f"  false alarm: {m}" for m in t.false_alarms[:10]),
        *(f"  fix: {m}" for m in t.fix_problems[:10]),
    ]
    return "\n".join(lines)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 30,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases)
def test_verdict_agrees_with_a_real_step(
    case: Case, tokenizers: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tokenizers[case.tokenizer]
    data_file = tmp_path_factory.mktemp("diff-data") / "train.jsonl"
    data_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in case.texts))
    cfg = run_config(case, folder, data_file)
    result = with_scan_findings(cfgcheck.validate(cfg))
    errors = [f"{f.rule}: {f.message[:160]}" for f in result.errors]
    crash = real_step(case, folder)
    TALLY.total += 1
    TALLY.trained += crash is None
    for f in result.errors:
        TALLY.rules[f.rule] = TALLY.rules.get(f.rule, 0) + 1
    shown = f"{case} -> cfgcheck {errors or 'ok'}, real step {crash or 'trains'}"
    if crash is not None and not errors:
        TALLY.misses.append(shown)
    elif crash is None and errors:
        TALLY.false_alarms.append(shown)
    problems = list(check_fixes(cfgcheck.validate(cfg), cfg))
    TALLY.fix_problems += [f"{p} ({case})" for p in problems]
    if TALLY_ONLY:
        return
    assert not TALLY.misses, TALLY.misses[0]
    assert not problems, problems
    allowed = max(1, int(FALSE_ALARM_RATE * max(TALLY.total, EXAMPLES)))
    assert len(TALLY.false_alarms) <= allowed, TALLY.false_alarms


def test_tally() -> None:
    """The totals of the run above: no miss, no broken fix, false alarms within 2 %."""
    if TALLY.total == 0:
        pytest.skip("the differential test did not run")
    sys.stderr.write(report() + "\n")
    assert not TALLY.misses, report()
    assert not TALLY.fix_problems, report()
    assert len(TALLY.false_alarms) <= FALSE_ALARM_RATE * TALLY.total, report()
