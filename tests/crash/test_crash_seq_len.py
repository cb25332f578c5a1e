"""seq-len-over-block-size, reproduced: sequences longer than the model's context window.

LitGPT (the seed's "ValueError: Cannot attend to 3063, block size is only 2048") is not
installed here. transformers' GPT-2 has the same hard limit: learned absolute position
embeddings with exactly ``n_positions`` (= block_size) rows, so position ``block_size``
does not exist and its lookup fails with torch's "IndexError: index out of range in self".
Llama-style models (RoPE) do NOT fail past ``max_position_embeddings`` in transformers 5.23:
rotary angles are computed for any position, the model silently runs outside the context
it was trained for (see the last test), which cfgcheck flags all the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.data import DataLoader  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.runtime import configure_tokenizer, make_collate_fn, tokenizer_kwargs  # noqa: E402
from tests.crash.support import (  # noqa: E402
    TEXTS,
    gpt2,
    llama,
    run_config,
    tokenizer_folder,
    train_step,
)

pytestmark = pytest.mark.crash

BLOCK = 32
TOO_LONG = 48


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def config(real: tuple[Path, Any], max_seq_length: int) -> dict[str, Any]:
    folder, tok = real
    return run_config(
        folder, tok, model={"block_size": BLOCK}, data={"max_seq_length": max_seq_length}
    )


def first_batch(run: cfgcheck.RunConfig, tok: Any) -> dict[str, Any]:
    """The training script's data path: config kwargs, config collate fn, a DataLoader."""
    configure_tokenizer(tok, run)
    data = [dict(tok(t, **tokenizer_kwargs(run))) for t in TEXTS]
    loader = DataLoader(
        data, batch_size=run.trainer.micro_batch_size, collate_fn=make_collate_fn(run)
    )
    batch: dict[str, Any] = next(iter(loader))
    return batch


def test_cfgcheck_flags_the_config(real: tuple[Path, Any]) -> None:
    result = cfgcheck.validate(config(real, TOO_LONG))
    (finding,) = result.by_rule("seq-len-over-block-size")
    assert finding.severity == "error" and not result.ok
    assert f"data.max_seq_length={TOO_LONG}" in finding.message
    assert f"model.block_size={BLOCK}" in finding.message


def test_the_real_model_fails_past_its_block_size(real: tuple[Path, Any]) -> None:
    unchecked = cfgcheck.RunConfig.model_validate(config(real, TOO_LONG))
    batch = first_batch(unchecked, real[1])
    assert batch["input_ids"].shape == (4, TOO_LONG)  # the first sample is 171 tokens
    model = gpt2(unchecked.model)
    with pytest.raises(IndexError, match=r"^index out of range in self$"):
        model(**batch)


def test_the_accepted_config_trains(real: tuple[Path, Any]) -> None:
    result = cfgcheck.validate(config(real, BLOCK))
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    batch = first_batch(result.config, real[1])
    assert batch["input_ids"].shape == (4, BLOCK)  # exactly the context window
    train_step(gpt2(result.config.model), batch)


def test_llama_rope_runs_past_max_position_embeddings(real: tuple[Path, Any]) -> None:
    """Documents the limit of the reproduction: no exception from a RoPE model."""
    unchecked = cfgcheck.RunConfig.model_validate(config(real, TOO_LONG))
    batch = first_batch(unchecked, real[1])
    model = llama(unchecked.model)
    assert model.config.max_position_embeddings == BLOCK
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape[:2] == (4, TOO_LONG) and torch.isfinite(logits).all()
