"""ragged-batch, reproduced: samples of different lengths stacked into one batch.

* Unsloth / FastChat SFT: ``padding=True`` ("longest") pads each tokenizer call only to its
  own longest sample, so samples tokenized in different calls differ in length; building a
  tensor of them (transformers' ``default_data_collator``, ``torch.tensor``) fails with
  "ValueError: expected sequence of length X at dim 1 (got Y)".
* Lightning + torchtune: torch's ``default_collate`` over ragged token lists fails with
  "RuntimeError: each element in list of batch should be of equal size".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.data import DataLoader  # noqa: E402
from transformers import default_data_collator  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.runtime import configure_tokenizer, make_collate_fn, tokenizer_kwargs  # noqa: E402
from tests.crash.support import (  # noqa: E402
    TEXTS,
    llama,
    run_config,
    tokenizer_folder,
    train_step,
)

pytestmark = pytest.mark.crash

RAGGED = {"padding": "longest", "collator": "default"}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def tokenized(run: cfgcheck.RunConfig, tok: Any, chunk: int) -> list[dict[str, Any]]:
    """``datasets.map(tokenize, batched=True, batch_size=chunk)``: one tokenizer call per
    ``chunk`` texts, with the config's kwargs."""
    configure_tokenizer(tok, run)
    rows: list[dict[str, Any]] = []
    for i in range(0, len(TEXTS), chunk):
        enc = tok(list(TEXTS[i : i + chunk]), **tokenizer_kwargs(run))
        rows += [{k: enc[k][j] for k in enc} for j in range(len(enc["input_ids"]))]
    return rows


def test_cfgcheck_flags_longest_padding_with_default_collate(real: tuple[Path, Any]) -> None:
    folder, tok = real
    result = cfgcheck.validate(run_config(folder, tok, data=RAGGED))
    (finding,) = result.by_rule("ragged-batch")
    assert finding.severity == "error" and not result.ok
    for value in ("data.padding=longest", "data.collator=default", "trainer.micro_batch_size=4"):
        assert value in finding.message
    assert "expected sequence of length" in finding.message


def test_tensor_of_longest_padded_samples_fails(real: tuple[Path, Any]) -> None:
    folder, tok = real
    unchecked = cfgcheck.RunConfig.model_validate(run_config(folder, tok, data=RAGGED))
    assert tokenizer_kwargs(unchecked)["padding"] == "longest"
    rows = tokenized(unchecked, tok, chunk=2)  # padding=True within each pair only
    lengths = [len(r["input_ids"]) for r in rows[:4]]
    assert lengths[0] == lengths[1] != lengths[2] == lengths[3]
    msg = rf"^expected sequence of length {lengths[0]} at dim 1 \(got {lengths[2]}\)$"
    with pytest.raises(ValueError, match=msg):
        default_data_collator(rows[:4])  # transformers Trainer's collator: torch.tensor(...)


def test_default_collate_of_ragged_lists_fails(real: tuple[Path, Any]) -> None:
    folder, tok = real
    unchecked = cfgcheck.RunConfig.model_validate(run_config(folder, tok, data=RAGGED))
    rows = tokenized(unchecked, tok, chunk=1)  # one call per sample: nothing padded
    collate = make_collate_fn(unchecked)  # data.collator=default -> torch's default_collate
    loader = DataLoader(rows, batch_size=4, collate_fn=collate)
    with pytest.raises(
        RuntimeError, match=r"^each element in list of batch should be of equal size$"
    ):
        next(iter(loader))


def test_the_padded_collator_trains(real: tuple[Path, Any]) -> None:
    folder, tok = real
    result = cfgcheck.validate(run_config(folder, tok, data={"padding": "longest"}))
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    rows = tokenized(result.config, tok, chunk=1)
    loader = DataLoader(rows, batch_size=4, collate_fn=make_collate_fn(result.config))
    batch = next(iter(loader))
    assert batch["attention_mask"].eq(0).any()  # really ragged, padded by the collator
    train_step(llama(result.config.model), batch)


def test_max_length_padding_with_default_collate_trains(real: tuple[Path, Any]) -> None:
    folder, tok = real
    fixed = {"padding": "max_length", "truncation": True, "collator": "default"}
    result = cfgcheck.validate(run_config(folder, tok, data=fixed))
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    rows = [
        {
            "input_ids": torch.tensor(r["input_ids"]),
            "attention_mask": torch.tensor(r["attention_mask"]),
            "labels": torch.tensor(r["input_ids"]).masked_fill(
                torch.tensor(r["attention_mask"]) == 0, result.config.data.ignore_index
            ),
        }
        for r in tokenized(result.config, tok, chunk=1)
    ]
    loader = DataLoader(rows, batch_size=4, collate_fn=make_collate_fn(result.config))
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (4, 32)
    train_step(llama(result.config.model), batch)
