"""cfgcheck.runtime collate functions through real torch DataLoaders over samples made by a
real transformers tokenizer."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.data import DataLoader  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.runtime import (  # noqa: E402
    PackedCollator,
    PaddedCollator,
    PadTokenMissingError,
    SequenceTooLongError,
    TokenizerMismatchError,
    configure_tokenizer,
    make_collate_fn,
    tokenizer_kwargs,
)
from tests.crash.support import TEXTS, llama, run_config, tokenizer_folder, validated  # noqa: E402


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def samples(tok: Any, run: cfgcheck.RunConfig, texts: tuple[str, ...] = TEXTS) -> list[Any]:
    """One tokenizer call per sample with the config's kwargs (datasets.map style)."""
    configure_tokenizer(tok, run)
    return [dict(tok(t, **tokenizer_kwargs(run))) for t in texts]


def batches(run: cfgcheck.RunConfig, data: list[Any], **kwargs: Any) -> list[dict[str, Any]]:
    loader = DataLoader(
        data, batch_size=run.trainer.micro_batch_size, collate_fn=make_collate_fn(run, **kwargs)
    )
    return list(loader)


def test_padded_right_pads_ids_labels_and_mask(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok))
    data = samples(tok, run)
    got = batches(run, data)
    assert len(got) == 2
    for b, batch in enumerate(got):
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        assert ids.dtype == torch.long and ids.shape == mask.shape == labels.shape
        chunk = data[4 * b : 4 * b + 4]
        assert ids.shape[1] == max(len(s["input_ids"]) for s in chunk) <= 32
        for row, s in enumerate(chunk):
            n = len(s["input_ids"])
            assert ids[row, :n].tolist() == s["input_ids"]
            assert labels[row, :n].tolist() == s["input_ids"]
            assert (ids[row, n:] == tok.pad_token_id).all()
            assert (labels[row, n:] == -100).all()
            assert mask[row].tolist() == [1] * n + [0] * (ids.shape[1] - n)


def test_padded_left_side(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, tokenizer={"padding_side": "left"}))
    data = samples(tok, run)
    batch = batches(run, data)[0]
    width = batch["input_ids"].shape[1]
    for row, s in enumerate(data[:4]):
        n = len(s["input_ids"])
        assert batch["input_ids"][row, width - n :].tolist() == s["input_ids"]
        assert (batch["input_ids"][row, : width - n] == tok.pad_token_id).all()
        assert (batch["labels"][row, : width - n] == -100).all()
        assert batch["attention_mask"][row].tolist() == [0] * (width - n) + [1] * n


def test_custom_ignore_index_and_given_labels_are_kept(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"ignore_index": -1}))
    data = samples(tok, run)[2:4]
    data[0]["labels"] = [-1] * 3 + data[0]["input_ids"][3:]  # prompt masked by the script
    batch = batches(run, data)[0]
    n = len(data[0]["input_ids"])
    assert batch["labels"][0].tolist() == data[0]["labels"]
    assert batch["labels"][1, len(data[1]["input_ids"]) :].eq(-1).all()
    assert batch["input_ids"].shape[1] == n


@pytest.mark.parametrize(("max_seq_length", "longest"), [(32, 32), (30, 32)])
def test_pad_to_multiple_of(real: tuple[Path, Any], max_seq_length: int, longest: int) -> None:
    """Rounded up like transformers' DataCollatorWithPadding: a 30-token cut becomes 32 (the
    rules see the same 32: cfgcheck.pipeline)."""
    folder, tok = real
    data_cfg = {"pad_to_multiple_of": 8, "max_seq_length": max_seq_length, "padding": "do_not_pad"}
    run = validated(run_config(folder, tok, data=data_cfg, trainer={"micro_batch_size": 2}))
    # token lengths (171, 44), (22, 4), (64, 16), (56, 14), (16, 14), truncated to max
    got = batches(run, samples(tok, run, (*TEXTS, TEXTS[5], TEXTS[7])))
    widths = [b["input_ids"].shape[1] for b in got]
    assert widths == [longest, 24, longest, longest, 16]
    assert all(w % 8 == 0 for w in widths)


def test_padding_max_length_gives_fixed_width(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"padding": "max_length", "max_length": 24}))
    data = samples(tok, run)
    assert all(sum(s["attention_mask"]) <= 24 for s in data)
    got = batches(run, data)
    assert {tuple(b["input_ids"].shape) for b in got} == {(4, 24)}
    # tokenizer padding (attention_mask 0) is masked in the labels too
    short = sum(data[3]["attention_mask"])
    assert got[0]["labels"][3, short:].eq(-100).all()
    assert got[0]["attention_mask"][3].sum().item() == short


def test_never_exceeds_max_seq_length(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"padding": "do_not_pad", "truncation": False}))
    raw = [{"input_ids": tok(t)["input_ids"]} for t in TEXTS]
    truncating = PaddedCollator(tok.pad_token_id, -100, max_seq_length=32)
    assert truncating(raw)["input_ids"].shape == (8, 32)
    # without truncation the limit is what the model can attend to: model.block_size=64
    with pytest.raises(SequenceTooLongError, match=r"171 tokens, above the 64 the model"):
        batches(run, raw)


def test_missing_pad_id_is_a_clear_error(tmp_path: Path) -> None:
    folder, tok = tokenizer_folder(tmp_path, pad=False)
    # schema-valid but unchecked: the rules would have flagged pad-token-missing
    unchecked = cfgcheck.RunConfig.model_validate(run_config(folder, tok))
    with pytest.raises(PadTokenMissingError, match=r"set tokenizer.pad_token.*pad_token_id="):
        make_collate_fn(unchecked)
    assert isinstance(make_collate_fn(unchecked, pad_token_id=2), PaddedCollator)
    # with transformers (framework=hf) the padding collator needs a pad token in every case
    # (tokenizer.pad); LitGPT's conventions pad only when needed: a batch of 1 is valid, and a
    # script batching 2 then fails clearly
    one = validated(
        run_config(
            folder,
            tok,
            data={"padding": "do_not_pad"},
            trainer={"micro_batch_size": 1, "framework": "litgpt"},
        )
    )
    data = samples(tok, one, TEXTS[2:4])  # 22 and 4 tokens
    loader = DataLoader(data, batch_size=2, collate_fn=make_collate_fn(one))
    with pytest.raises(PadTokenMissingError, match=r"data\.collator=padded has to pad"):
        next(iter(loader))


def test_explicit_pad_id_must_match_the_config(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok))
    with pytest.raises(TokenizerMismatchError, match=r"tokenizer\.pad_token_id=3"):
        make_collate_fn(run, pad_token_id=0)


def test_packed_rows_positions_and_labels(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"collator": "packed", "padding": "do_not_pad"}))
    data = samples(tok, run)
    lengths = [len(s["input_ids"]) for s in data]
    got = batches(run, data)
    for b, batch in enumerate(got):
        ids, labels, pos = batch["input_ids"], batch["labels"], batch["position_ids"]
        chunk = lengths[4 * b : 4 * b + 4]
        total = sum(chunk)
        assert ids.shape == (-(-total // 32), 32) == labels.shape == pos.shape
        assert "attention_mask" not in batch
        flat_ids, flat_labels, flat_pos = ids.flatten(), labels.flatten(), pos.flatten()
        expected = [t for s in data[4 * b : 4 * b + 4] for t in s["input_ids"]]
        assert flat_ids[:total].tolist() == expected
        assert (flat_ids[total:] == tok.pad_token_id).all()
        assert (flat_labels[total:] == -100).all()
        start = 0
        for n in chunk:
            assert flat_pos[start : start + n].tolist() == list(range(n))
            assert flat_labels[start].item() == -100  # no cross-sample prediction
            assert flat_labels[start + 1 : start + n].tolist() == expected[start + 1 : start + n]
            start += n
        assert int(pos.max()) < 32


def test_packed_samples_do_not_attend_to_each_other(real: tuple[Path, Any]) -> None:
    """transformers' Llama builds a block-diagonal mask from restarting position_ids."""
    folder, tok = real
    cfg = run_config(folder, tok, data={"collator": "packed", "padding": "do_not_pad"})
    run = validated(cfg)
    data = samples(tok, run, TEXTS[2:4] + TEXTS[5:6])  # 22 + 4 + 16 tokens: 2 rows
    batch = make_collate_fn(run)(data)
    model = llama(run.model)
    with torch.no_grad():
        # use_cache=False: transformers derives the mask from position_ids only without a cache
        packed = model(**batch, use_cache=False).logits
        alone = model(input_ids=torch.tensor([data[1]["input_ids"]])).logits
        joined = model(input_ids=batch["input_ids"], use_cache=False).logits  # one sequence
    second = slice(22, 26)
    assert torch.allclose(packed[0, second], alone[0], atol=1e-5)
    assert not torch.allclose(joined[0, second], alone[0], atol=1e-5)


def test_default_collator_is_torch_default_collate(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"collator": "default", "padding": "max_length"}))
    data = [{k: torch.tensor(v) for k, v in s.items()} for s in samples(tok, run)]
    got = batches(run, data)
    assert {tuple(b["input_ids"].shape) for b in got} == {(4, 32)}
    assert set(got[0]) == {"input_ids", "attention_mask"}


def test_collators_pickle_for_dataloader_workers(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"collator": "packed", "padding": "do_not_pad"}))
    packed = make_collate_fn(run)
    assert isinstance(packed, PackedCollator)
    assert pickle.loads(pickle.dumps(packed)) == packed


def test_pad_equal_eos_keeps_real_eos_labels(tmp_path: Path) -> None:
    """Labels are masked by position (length / attention_mask), not by pad id: with
    pad = eos the real EOS ending a sample is still learned. transformers'
    DataCollatorForLanguageModeling masks by id and loses it (the pad-is-eos warning)."""
    from transformers import DataCollatorForLanguageModeling

    folder, tok = tokenizer_folder(tmp_path, pad=False)
    cfg = run_config(folder, tok, tokenizer={"pad_token": "</s>", "pad_token_id": 2})
    run = validated(cfg)
    configure_tokenizer(tok, run)
    eos = tok.eos_token_id
    data = [{"input_ids": tok(t)["input_ids"] + [eos]} for t in TEXTS[2:4]]
    ours = make_collate_fn(run)(data)
    n = len(data[1]["input_ids"])
    assert ours["labels"][1, n - 1].item() == eos  # the real EOS is a target
    assert ours["labels"][1, n:].eq(-100).all() and ours["input_ids"][1, n:].eq(eos).all()
    theirs = DataCollatorForLanguageModeling(tok, mlm=False)(data)
    assert theirs["labels"][1, n - 1].item() == -100


def test_readme_flow_from_a_hydra_conf_dir(real: tuple[Path, Any], tmp_path: Path) -> None:
    """The README's example: cfgcheck.check() on a conf/ tree, then the helpers, one step."""
    import yaml

    from tests.crash.support import train_step

    folder, tok = real
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text(yaml.safe_dump(run_config(folder, tok)))
    result = cfgcheck.check(
        conf, "config", ["data.max_seq_length=24", "trainer.micro_batch_size=2"]
    )
    result.raise_for_errors()
    configure_tokenizer(tok, result)
    samples = [tok(t, **tokenizer_kwargs(result)) for t in TEXTS]  # BatchEncoding mappings
    loader = DataLoader(samples, batch_size=2, collate_fn=make_collate_fn(result))
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (2, 24)
    assert result.config is not None
    train_step(llama(result.config.model), batch)


def test_packed_batch_trains_one_step(real: tuple[Path, Any]) -> None:
    from tests.crash.support import train_step

    folder, tok = real
    run = validated(run_config(folder, tok, data={"collator": "packed", "padding": "do_not_pad"}))
    batch = batches(run, samples(tok, run))[1]  # 32 (truncated) + 16 + 32 + 14 -> 3 rows
    assert batch["input_ids"].shape == (3, 32)
    model = llama(run.model)
    model.config.use_cache = False
    train_step(model, batch)
