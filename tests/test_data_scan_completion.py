"""Prompt-completion datasets (TRL's format: ``prompt`` / ``completion``, as text or as lists
of messages): the scan's per-sample lengths and label masks are compared with what TRL 1.16's
own ``SFTTrainer._prepare_dataset`` produces (EOS appended, tokenized, completion and
assistant masks folded into labels, truncated, fully masked samples dropped) on a real
tokenizer built in the test."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cfgcheck.data import ScanError, scan_dataset, scan_findings
from cfgcheck.schema.run import RunConfig
from tests.test_data_scan import write_jsonl
from tests.test_data_scan_jobs import _comparable
from tests.test_data_scan_report import chat_tokenizer


def text_records() -> list[dict[str, str]]:
    from tests.factories import CORPUS

    out = []
    for i in range(12):
        prompt = " ".join(CORPUS[: 1 + i % 6])  # prompts of growing length
        completion = " " + CORPUS[(i + 7) % len(CORPUS)]
        if i == 4:  # already ends with the EOS: TRL appends none
            completion += "</s>"
        out.append({"prompt": prompt, "completion": completion})
    return out


def chat_records() -> list[dict[str, Any]]:
    return [
        {
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "completion": [{"role": "assistant", "content": r["completion"].strip()}],
        }
        for r in text_records()
    ]


def trl_prepared(
    tok: Any, rows: list[dict[str, Any]], max_length: int | None, output_dir: str, **config: Any
) -> list[dict[str, Any]]:
    """The rows as TRL's SFTTrainer prepares them: its own ``_prepare_dataset`` (the trainer's
    state it reads is set as its ``__init__`` sets it: sft_trainer.py:961-964, 940-943)."""
    from trl import SFTConfig, SFTTrainer

    from datasets import Dataset

    args = SFTConfig(
        output_dir=output_dir,
        max_length=max_length,
        report_to=[],
        use_cpu=True,
        dataset_num_proc=None,
        **config,
    )
    only = args.completion_only_loss
    state = SimpleNamespace(
        _tokenizer=tok, chat_template=None, completion_only_loss=True if only is None else only
    )
    out = SFTTrainer._prepare_dataset(state, Dataset.from_list(rows), tok, args, False, None, "t")
    return [dict(r) for r in out]


def scan_run(folder: Path, tok: Any, path: Path, limit: int, **data: Any) -> RunConfig:
    import cfgcheck
    from tests.crash.support import run_config

    cfg = run_config(
        folder,
        tok,
        model={"block_size": 1024},
        data={"max_seq_length": limit, "paths": [str(path)], "prompt_field": "prompt", **data},
    )
    result = cfgcheck.validate(cfg)
    assert result.config is not None, result.findings
    return result.config


def alpaca_records() -> list[dict[str, str]]:
    """The shipped Alpaca-style records as prompt / completion (the demo tokenizer adds BOS)."""
    import json

    from tests.conftest import REPO

    lines = (REPO / "datasets" / "alpaca-tiny.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [{"prompt": r["instruction"], "completion": " " + r["output"]} for r in rows]


def demo_tokenizer() -> tuple[Path, Any]:
    """The shipped demo tokenizer (assets/demo-tokenizer): a real BPE that adds BOS."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from tests.conftest import REPO

    folder = REPO / "assets" / "demo-tokenizer"
    return folder, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


CASES = [
    pytest.param("alpaca", {}, id="bos-text-completion-only"),
    pytest.param("text", {}, id="text-completion-only"),
    pytest.param("text", {"completion_only_loss": False}, id="text-all-tokens"),
    pytest.param("chat", {}, id="chat-completion-only"),
    pytest.param("chat", {"assistant_only_loss": True}, id="chat-assistant-only"),
]


@pytest.mark.slow  # datasets, transformers and TRL load
@pytest.mark.parametrize(("kind", "settings"), CASES)
def test_lengths_and_labels_match_trl_and_prompts_filling_max_length_are_dropped(
    kind: str, settings: dict[str, Any], tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    if kind == "alpaca":
        folder, tok = demo_tokenizer()
        rows = alpaca_records()
    else:
        folder, tok = chat_tokenizer(tmp_path / "tok")
        rows = text_records() if kind == "text" else chat_records()
    path = write_jsonl(tmp_path / "pc.jsonl", rows)
    full = trl_prepared(tok, rows, None, output_dir=str(tmp_path / "out"), **settings)
    ids = [r["input_ids"] for r in full]
    labels = [r["labels"] for r in full]
    if kind == "alpaca":
        assert all(x[0] == tok.bos_token_id for x in ids)
    if kind != "chat":  # the EOS TRL appends, once
        assert all(x[-1] == tok.eos_token_id and x[-2] != tok.eos_token_id for x in ids)
    masked = any(v == -100 for lab in labels for v in lab)
    assert masked == (settings.get("completion_only_loss") is not False)
    prompt = [next(i for i, v in enumerate(lab) if v != -100) for lab in labels]
    limit = sorted(prompt)[len(prompt) // 2] + 1 if masked else 12

    run = scan_run(folder, tok, path, limit, **settings)
    one = scan_dataset(run, jobs=1)
    assert _comparable(one) == _comparable(scan_dataset(run, jobs=2, shard_bytes=600))
    assert one.samples == len(rows)
    assert one.hist == {n: sum(1 for x in ids if len(x) == n) for n in {len(x) for x in ids}}
    assert one.summary.longest[0].length == max(len(x) for x in ids)
    # Targets: label positions 1.. (position 0 is never a target after the shift).
    assert one.summary.targets == sum(sum(v != -100 for v in lab[1:]) for lab in labels)
    assert one.summary.targets_fed == sum(sum(v != -100 for v in lab[1:limit]) for lab in labels)
    # TRL truncates to max_length, then drops the samples left with no label.
    out = str(tmp_path / "out")
    cut = trl_prepared(tok, rows, limit, out, **settings)
    dropped = [i for i, lab in enumerate(labels) if all(v == -100 for v in lab[:limit])]
    assert len(cut) == len(rows) - len(dropped)
    assert one.summary.no_targets == len(dropped)
    assert [s.line for s in one.summary.no_targets_at] == [i + 1 for i in dropped[:5]]
    assert bool(dropped) == masked  # the longer half of the prompts fill max_length
    if dropped:
        assert len(dropped) < len(rows)
        (f,) = [f for f in scan_findings(one, run) if f.rule == "data-no-labels"]
        assert "the completion's tokens" in f.message and "drops them" in f.message
        need = max(prompt[i] + 1 for i in dropped)
        assert f"to at least {need}" in f.hint
        fixed = run.model_copy(
            update={"data": run.data.model_copy(update={"max_seq_length": need})}
        )
        assert scan_dataset(fixed, jobs=1).summary.no_targets == 0
        assert len(trl_prepared(tok, rows, need, out, **settings)) == len(rows)


def test_a_record_mixing_text_and_messages_names_its_line(tmp_path: Path) -> None:
    folder, tok = chat_tokenizer(tmp_path / "tok")
    rows: list[dict[str, Any]] = [{"prompt": "a b", "completion": " c"}] * 3
    rows.append({"prompt": [{"role": "user", "content": "a"}], "completion": " c"})
    path = write_jsonl(tmp_path / "pc.jsonl", rows)
    run = scan_run(folder, tok, path, 64)
    with pytest.raises(ScanError, match=r"pc\.jsonl:4: .*both text or both lists of messages"):
        scan_dataset(run, jobs=1)


def test_assistant_only_loss_on_text_prompts_is_refused_as_trl_does(tmp_path: Path) -> None:
    folder, tok = chat_tokenizer(tmp_path / "tok")
    path = write_jsonl(tmp_path / "pc.jsonl", text_records())
    run = scan_run(folder, tok, path, 64, assistant_only_loss=True)
    with pytest.raises(ScanError, match="needs a conversational dataset"):
        scan_dataset(run, jobs=1)


def test_prompt_field_and_messages_field_are_exclusive() -> None:
    from cfgcheck.schema.data import DataConfig

    with pytest.raises(ValueError, match="one of messages_field"):
        DataConfig(max_seq_length=8, prompt_field="prompt", messages_field="messages")
    assert DataConfig(max_seq_length=8, prompt_field="prompt").masks_completion
    assert not DataConfig(max_seq_length=8).masks_completion
    plain = DataConfig(max_seq_length=8, prompt_field="p", completion_only_loss=False)
    assert not plain.masks_completion


def test_parquet_prompt_completion_scans_as_its_jsonl_and_names_a_missing_column(
    tmp_path: Path,
) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    folder, tok = chat_tokenizer(tmp_path / "tok")
    rows = text_records()
    jsonl = write_jsonl(tmp_path / "pc.jsonl", rows)
    parquet = tmp_path / "pc.parquet"
    # A text column too: only the prompt and completion columns are read.
    pq.write_table(pa.Table.from_pylist([{**r, "text": "x"} for r in rows]), parquet)
    a = scan_dataset(scan_run(folder, tok, jsonl, 16), jobs=1)
    b = scan_dataset(scan_run(folder, tok, parquet, 16), jobs=1)
    assert (a.hist, a.summary.targets, a.summary.no_targets) == (
        b.hist,
        b.summary.targets,
        b.summary.no_targets,
    )
    assert a.summary.no_targets > 0
    other = scan_run(folder, tok, parquet, 16, completion_field="answer")
    with pytest.raises(ScanError, match=r"no column 'answer' \(data.completion_field\)"):
        scan_dataset(other, jobs=1)


@pytest.mark.slow  # datasets, transformers and TRL load
@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
def test_add_eos_counts_plain_text_as_trl_does(bos: bool, tmp_path: Path) -> None:
    """``data.add_eos``: plain text gets the EOS TRL appends (once), so lengths and labels
    are TRL's; without it, each sample not already ending with the EOS is one token short."""
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    if bos:
        folder, tok = demo_tokenizer()
        pairs = alpaca_records()
    else:
        folder, tok = chat_tokenizer(tmp_path / "tok")
        pairs = text_records()
    rows = [{"text": r["prompt"] + r["completion"]} for r in pairs]
    ends = [r["text"].endswith("</s>") for r in rows]
    path = write_jsonl(tmp_path / "lm.jsonl", rows)
    full = trl_prepared(tok, rows, None, str(tmp_path / "out"), dataset_text_field="text")
    ids = [r["input_ids"] for r in full]
    assert all(lab == x for lab, x in zip((r["labels"] for r in full), ids, strict=True))
    assert all(x[-1] == tok.eos_token_id for x in ids) and all(x[0] == 1 for x in ids) == bos
    run = scan_run(folder, tok, path, 32, prompt_field=None, add_eos=True)
    one = scan_dataset(run, jobs=1)
    assert _comparable(one) == _comparable(scan_dataset(run, jobs=2, shard_bytes=600))
    assert one.hist == {n: sum(1 for x in ids if len(x) == n) for n in {len(x) for x in ids}}
    assert one.summary.targets == sum(len(x) - 1 for x in ids)
    assert one.summary.targets_fed == sum(min(len(x), 32) - 1 for x in ids)
    off = scan_dataset(scan_run(folder, tok, path, 32, prompt_field=None), jobs=1)
    assert off.summary.targets == one.summary.targets - ends.count(False)
