"""What the scan reports beyond lengths (issue 26, item 4): tokens lost to truncation, samples
left with no label after truncation (the NaN loss reproduced with a tiny real model), empty
samples, ids at or above the embedding rows, packed rows; each merged exactly across
workers (--jobs 1 and 2 give the same report), each a finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.data import scan_dataset, scan_findings
from tests.test_data_scan import TEMPLATE, expected_lengths, make_run, records, write_jsonl
from tests.test_data_scan_jobs import _comparable


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    from tests.factories import bpe, save_folder

    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def test_truncated_tokens_labels_and_packed_rows_are_exact_for_any_jobs(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(60)
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    lengths = expected_lengths(tok_dir, rows)
    limit = sorted(lengths)[len(lengths) // 2]  # half the samples are cut
    run = make_run(cfg, tok_dir, path, max_seq_length=limit)
    one = scan_dataset(run, jobs=1)
    two = scan_dataset(run, jobs=2, shard_bytes=600, chunk_size=7)
    assert _comparable(one) == _comparable(two)

    cut = sum(max(0, n - limit) for n in lengths)
    assert one.tokens_cut == cut > 0
    assert one.cut_share == pytest.approx(cut / sum(lengths))
    # Labels the loss reads: every position after the first, within the truncated length.
    assert one.summary.targets == sum(n - 1 for n in lengths)
    assert one.summary.targets_fed == sum(min(n, limit) - 1 for n in lengths)
    assert one.summary.packed_rows == -(-sum(lengths) // limit)
    (f,) = [f for f in scan_findings(one, run) if f.rule == "data-truncated"]
    assert f"{cut / sum(lengths):.1%} of all tokens ({cut:,})" in f.message


def test_empty_samples_are_counted_and_located(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows: list[dict[str, Any]] = [{"text": t["answer"]} for t in records(30)]
    for i in (4, 17, 25):
        rows[i] = {"text": "  "}
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    run = make_run(cfg, tok_dir, path, template=None, text_field="text")
    one = scan_dataset(run, jobs=1)
    two = scan_dataset(run, jobs=2, shard_bytes=500)
    assert _comparable(one) == _comparable(two)
    assert one.summary.empty == 3
    assert [s.line for s in one.summary.empty_at] == [5, 18, 26]
    (f,) = [f for f in scan_findings(one, run) if f.rule == "data-empty-samples"]
    assert "3 of 30 samples have an empty text" in f.message and "d.jsonl:18" in f.message


@pytest.mark.slow  # a real model: torch and transformers load
def test_ids_at_or_above_the_embedding_rows(cfg: dict[str, Any], tmp_path: Path) -> None:
    """A tokenizer with tokens added after its base vocabulary and a model built for the
    base vocabulary: the samples that use them are named; the real embedding
    lookup fails on exactly those."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer

    from tests.factories import bpe, save_folder

    tok = save_folder(bpe(added=("<tool>", "<end_tool>")), tmp_path / "tok", pad_token="<unk>")
    rows = [{"text": t["answer"]} for t in records(12)]
    rows[3]["text"] += " <tool>"
    rows[9]["text"] = "<end_tool> " + rows[9]["text"]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    run = make_run(cfg, tok, path, template=None, text_field="text")
    tk = Tokenizer.from_file(str(tok / "tokenizer.json"))
    rows_model = tk.token_to_id("<tool>")  # the base vocabulary: the added ids are past it
    top = tk.token_to_id("<end_tool>")
    assert top == rows_model + 1
    run = run.model_copy(
        update={
            "model": run.model.model_copy(
                update={"vocab_size": rows_model, "padded_vocab_size": rows_model}
            )
        }
    )
    one = scan_dataset(run, jobs=1)
    assert _comparable(one) == _comparable(scan_dataset(run, jobs=2, shard_bytes=300))
    s = one.summary
    assert s.over_vocab == 2 and [x.line for x in s.over_vocab_at] == [4, 10]
    assert s.max_id == top
    (f,) = [f for f in scan_findings(one, run) if f.rule == "data-ids-over-embedding"]
    assert f.severity == "error" and f"at least {top + 1} embedding rows" in f.hint

    embedding = torch.nn.Embedding(rows_model, 8)
    for i, r in enumerate(rows):
        ids = torch.tensor(tk.encode(r["text"]).ids)
        if i in (3, 9):
            with pytest.raises(IndexError, match="index out of range in self"):
                embedding(ids)
        else:
            embedding(ids)


# --- samples with no label after truncation: the NaN loss, reproduced --------------------

CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<s>assistant: "
    "{% generation %}{{ m['content'] }}</s>{% endgeneration %}"
    "{% else %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endif %}{% endfor %}"
)


def chat_tokenizer(directory: Path) -> tuple[Path, Any]:
    """A transformers tokenizer folder whose chat template marks the assistant's text with
    {% generation %}, and the tokenizer transformers loads from it."""
    from tests.crash.support import tokenizer_folder

    folder, _ = tokenizer_folder(directory)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config))
    from transformers import AutoTokenizer

    return folder, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def conversations() -> list[list[dict[str, str]]]:
    from tests.factories import CORPUS

    out = []
    for i in range(12):
        prompt = " ".join(CORPUS[: 1 + i % 6])  # prompts of growing length
        out.append(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": CORPUS[7]}]
        )
    return out


@pytest.mark.slow  # a real model: torch and transformers load
def test_chat_masks_match_trl_and_prompts_filling_max_length_leave_no_label(
    tmp_path: Path,
) -> None:
    """The scan tokenizes conversations as TRL's SFTTrainer does (its own _tokenize, with
    assistant masks), and names the samples whose prompt fills max_length: their labels
    are all -100 after truncation, and a batch of only those gives loss NaN in transformers'
    GPT-2; a batch with labels trains."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from trl.data_utils import _tokenize

    import cfgcheck
    from tests.crash.support import gpt2, run_config

    folder, tok = chat_tokenizer(tmp_path / "tok")
    chats = conversations()
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in chats])
    trl_out = [_tokenize(tok, c, return_assistant_tokens_mask=True) for c in chats]
    ids = [list(o["input_ids"]) for o in trl_out]
    masks = [list(o["assistant_masks"]) for o in trl_out]
    prompt = [m.index(1) for m in masks]  # tokens before the assistant's first
    limit = sorted(prompt)[len(prompt) // 2] + 1  # the longer half of the prompts fill it
    cfg = run_config(
        folder,
        tok,
        model={"block_size": 1024},
        data={
            "max_seq_length": limit,
            "paths": [str(path)],
            "messages_field": "messages",
            "assistant_only_loss": True,
        },
    )
    result = cfgcheck.validate(cfg)
    assert result.config is not None, result.findings
    run = result.config
    one = scan_dataset(run, jobs=1)
    assert _comparable(one) == _comparable(scan_dataset(run, jobs=2, shard_bytes=400))
    assert one.hist == {n: sum(1 for x in ids if len(x) == n) for n in {len(x) for x in ids}}
    assert one.summary.targets == sum(sum(m[1:]) for m in masks)
    # TRL: labels = ids where the assistant mask is 1, then truncated to max_length.
    labels = [
        [t if b else -100 for t, b in zip(x, m, strict=True)][:limit]
        for x, m in zip(ids, masks, strict=True)
    ]
    empty = [i for i, lab in enumerate(labels) if all(v == -100 for v in lab[1:])]
    assert 0 < len(empty) < len(chats)
    assert one.summary.no_targets == len(empty)
    assert [s.line for s in one.summary.no_targets_at] == [i + 1 for i in empty[:5]]
    (f,) = [f for f in scan_findings(one, run) if f.rule == "data-no-labels"]
    need = max(prompt[i] + 1 for i in empty)
    assert f"to at least {need}" in f.hint and "NaN" in f.message

    model = gpt2(run.model)

    def loss(rows: list[int]) -> float:
        width = max(len(labels[i]) for i in rows)
        pad = tok.pad_token_id
        batch_ids = [ids[i][:limit] + [pad] * (width - len(labels[i])) for i in rows]
        batch_labels = [labels[i] + [-100] * (width - len(labels[i])) for i in rows]
        with torch.no_grad():
            out = model(input_ids=torch.tensor(batch_ids), labels=torch.tensor(batch_labels))
        return float(out.loss)

    assert torch.isnan(torch.tensor(loss(empty[:2])))  # only label-less samples: NaN
    kept = [i for i in range(len(chats)) if i not in empty]
    assert torch.isfinite(torch.tensor(loss(kept[:2])))
    # The fix: max_length past the longest such prompt keeps a label in every sample.
    fixed = run.model_copy(update={"data": run.data.model_copy(update={"max_seq_length": need})})
    assert scan_dataset(fixed, jobs=1).summary.no_targets == 0


def test_template_without_generation_markers_is_one_clear_error(tmp_path: Path) -> None:
    import cfgcheck
    from cfgcheck.data import ScanError
    from tests.crash.support import run_config, tokenizer_folder

    folder, tok = tokenizer_folder(tmp_path / "tok")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE.replace("{% generation %}", "").replace(
        "{% endgeneration %}", ""
    )
    config_path.write_text(json.dumps(config))
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": c} for c in conversations()])
    data = {"paths": [str(path)], "messages_field": "messages", "assistant_only_loss": True}
    run = cfgcheck.validate(run_config(folder, tok, data=data)).config
    assert run is not None
    with pytest.raises(ScanError, match=r"needs a chat template that marks .*\{% generation %\}"):
        scan_dataset(run, jobs=1)


def test_a_record_that_is_not_a_conversation_names_its_line(
    cfg: dict[str, Any], tmp_path: Path
) -> None:
    import cfgcheck
    from cfgcheck.data import ScanError
    from tests.crash.support import run_config

    folder, tok = chat_tokenizer(tmp_path / "tok")
    rows: list[dict[str, Any]] = [{"messages": c} for c in conversations()]
    rows[6] = {"messages": "hello"}
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    data = {"paths": [str(path)], "messages_field": "messages"}
    run = cfgcheck.validate(run_config(folder, tok, data=data)).config
    assert run is not None
    for jobs in (1, 2):
        with pytest.raises(ScanError, match=r"c\.jsonl:7: .*expected a list of messages"):
            scan_dataset(run, jobs=jobs)


@pytest.mark.slow  # a real model: torch and transformers load
def test_a_plain_text_sample_too_short_for_a_target_gives_nan(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    """Without masking a sample of one token has no target after the shift: the scan counts
    it, and the loss of a batch of only such samples is NaN."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer

    from tests.crash.support import gpt2

    tk = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    single = next(w for w in ("a", "b", "x", "A") if len(tk.encode(w).ids) == 1)
    rows = [{"text": t["answer"]} for t in records(8)] + [{"text": single}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    run = make_run(cfg, tok_dir, path, template=None, text_field="text")
    report = scan_dataset(run, jobs=1)
    assert report.summary.no_targets == 1 and report.summary.no_targets_at[0].line == 9
    (f,) = [f for f in scan_findings(report, run) if f.rule == "data-no-labels"]
    assert "drop these samples" in f.hint
    model = gpt2(run.model.model_copy(update={"block_size": 64}))
    ids = torch.tensor([tk.encode(single).ids])
    with torch.no_grad():
        assert torch.isnan(model(input_ids=ids, labels=ids).loss)


assert TEMPLATE  # the shared records render through this template
