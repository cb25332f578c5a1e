"""Shape and padding rules, reproduced: each misconfiguration fails in real transformers/torch
code on CPU, and the shape cfgcheck accepts trains one real step.

- head-size-mismatch: n_embd not divisible by n_head. GPT-2 refuses to build its attention;
  transformers' Llama config refuses the shape outright.
- query-groups-mismatch: n_head not a multiple of n_query_groups. Llama's grouped-query
  attention cannot repeat the key/value heads onto the query heads.
- rotary-dims-odd: head_size x rotary_fraction odd. Phi's partial RoPE rotates dimension
  pairs, so the rotated slice and the cos/sin tables disagree in size.
- pad-multiple-mismatch: padding with truncation to a max_length that is not a multiple of
  pad_to_multiple_of; transformers' tokenizer refuses the call.
- pad-multiple-over-block-size: without truncation, rounding up to pad_to_multiple_of pushes
  a batch past the block size, and GPT-2 has no position embedding for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import cfgcheck  # noqa: E402
from cfgcheck.runtime import configure_tokenizer, make_collate_fn, tokenizer_kwargs  # noqa: E402
from tests.crash.support import (  # noqa: E402
    TEXTS,
    from_shape,
    gpt2,
    run_config,
    tokenizer_folder,
    train_step,
    validated,
)

pytestmark = pytest.mark.crash

PHI = {  # the phi-2 layout, tiny: gelu MLP, LayerNorm, biases, one shared norm per layer
    "mlp": "gelu",
    "norm": "layernorm",
    "bias": True,
    "lm_head_bias": True,
    "parallel_residual": True,
    "shared_attention_norm": True,
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def config(real: tuple[Path, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    folder, tok = real
    return run_config(folder, tok, **sections)


def flagged(cfg: dict[str, Any], rule: str, *values: str) -> cfgcheck.RunConfig:
    """cfgcheck refuses ``cfg`` with ``rule`` naming ``values``; returns the config unchecked,
    as a script without cfgcheck would run it."""
    result = cfgcheck.validate(cfg)
    (finding,) = result.by_rule(rule)
    assert finding.severity == "error" and not result.ok
    for value in values:
        assert value in finding.message, (value, finding.message)
    return cfgcheck.RunConfig.model_validate(cfg)


def batch_for(run: cfgcheck.RunConfig, tok: Any) -> dict[str, Any]:
    """A training batch through the config's tokenizer kwargs and collate function."""
    configure_tokenizer(tok, run)
    samples = [dict(tok(t, **tokenizer_kwargs(run))) for t in TEXTS[:4]]
    batch: dict[str, Any] = make_collate_fn(run)(samples)
    return batch


def test_head_size_mismatch(real: tuple[Path, Any]) -> None:
    bad = flagged(
        config(real, model={"n_embd": 32, "n_head": 3}),
        "head-size-mismatch",
        "model.n_embd=32",
        "model.n_head=3",
    )
    with pytest.raises(ValueError, match=r"embed_dim.* must be divisible by num_heads"):
        gpt2(bad.model)
    from transformers import LlamaConfig

    with pytest.raises(Exception, match=r"hidden size \(32\) is not a multiple of the number"):
        LlamaConfig(hidden_size=32, num_attention_heads=3, num_key_value_heads=3)

    good = validated(config(real, model={"n_embd": 32, "n_head": 4}))
    assert train_step(gpt2(good.model), batch_for(good, real[1]))


def test_query_groups_mismatch(real: tuple[Path, Any]) -> None:
    bad = flagged(
        config(real, model={"n_embd": 32, "n_head": 4, "n_query_groups": 3}),
        "query-groups-mismatch",
        "model.n_head=4",
        "model.n_query_groups=3",
    )
    batch = batch_for(bad, real[1])
    with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match .* \(3\)"):
        from_shape(bad.model)(**batch)

    good = validated(config(real, model={"n_embd": 32, "n_head": 4, "n_query_groups": 2}))
    assert train_step(from_shape(good.model), batch_for(good, real[1]))


def test_rotary_dims_odd(real: tuple[Path, Any]) -> None:
    shape = {**PHI, "n_embd": 32, "n_head": 4}  # head_size 8
    bad = flagged(
        config(real, model={**shape, "rotary_fraction": 0.375}),  # 3 rotary dims
        "rotary-dims-odd",
        "model.head_size=8",
        "model.rotary_fraction=0.375",
    )
    model = from_shape(bad.model)
    assert type(model).__name__ == "PhiForCausalLM"
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match .* \(4\)"):
        model(**batch_for(bad, real[1]))

    good = validated(config(real, model={**shape, "rotary_fraction": 0.25}))  # 2 dims
    assert train_step(from_shape(good.model), batch_for(good, real[1]))


def test_pad_multiple_mismatch(real: tuple[Path, Any]) -> None:
    _, tok = real
    bad = flagged(
        config(real, data={"max_seq_length": 30, "pad_to_multiple_of": 12}),
        "pad-multiple-mismatch",
        "data.max_seq_length=30",
        "data.pad_to_multiple_of=12",
    )
    configure_tokenizer(tok, bad)
    with pytest.raises(ValueError, match=r"truncation length \(30\) is not a multiple of"):
        tok(TEXTS[0], **tokenizer_kwargs(bad))

    good = validated(config(real, data={"max_seq_length": 24, "pad_to_multiple_of": 12}))
    batch = batch_for(good, tok)
    assert batch["input_ids"].shape[1] == 24
    assert train_step(gpt2(good.model), batch)


def test_pad_multiple_over_block_size(real: tuple[Path, Any]) -> None:
    _, tok = real
    # A sample of 25 to 32 tokens: it fits the 32-token block, but 12 x 3 = 36 does not.
    text = tok.decode(tok(TEXTS[0])["input_ids"][:27])
    assert 24 < len(tok(text)["input_ids"]) <= 32
    untruncated = {"max_seq_length": 30, "pad_to_multiple_of": 12, "truncation": False}
    bad = flagged(
        config(real, model={"block_size": 32}, data=untruncated),
        "pad-multiple-over-block-size",
        "data.pad_to_multiple_of=12",
        "36",
        "model.block_size=32",
    )
    # The usual script: one tokenizer call pads the batch, rounded up to the multiple.
    configure_tokenizer(tok, bad)
    batch = dict(tok([text, "short"], return_tensors="pt", **tokenizer_kwargs(bad)))
    assert batch["input_ids"].shape[1] == 36
    with pytest.raises(IndexError, match=r"^index out of range in self$"):
        gpt2(bad.model)(**batch, labels=batch["input_ids"])

    fixed = {"max_seq_length": 24, "pad_to_multiple_of": 12, "truncation": True}
    good = validated(config(real, model={"block_size": 32}, data=fixed))
    batch = dict(tok([text, "short"], return_tensors="pt", **tokenizer_kwargs(good)))
    assert batch["input_ids"].shape[1] == 24
    assert train_step(gpt2(good.model), {**batch, "labels": batch["input_ids"]})


def test_ignore_index_that_is_a_token_is_never_learned(real: tuple[Path, Any]) -> None:
    """ignore-index-is-token (a warning): not a crash, a silent loss of signal. With
    data.ignore_index=0 (the <unk> id here), torch's cross-entropy gives every position whose
    label is token 0 no gradient, so the model never learns to predict it."""
    _, tok = real
    result = cfgcheck.validate(config(real, data={"ignore_index": 0}))
    (finding,) = result.by_rule("ignore-index-is-token")
    assert finding.severity == "warning" and "data.ignore_index=0" in finding.message

    logits = torch.zeros(1, 3, len(tok), requires_grad=True)
    labels = torch.tensor([[0, 5, 0]])  # token 0 is a real label at positions 0 and 2
    for ignore, learned in ((0, [False, True, False]), (-100, [True, True, True])):
        logits.grad = None
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, len(tok)), labels.view(-1), ignore_index=ignore
        )
        loss.backward()
        assert logits.grad is not None
        has_signal = [bool(logits.grad[0, i].abs().sum() > 0) for i in range(3)]
        assert has_signal == learned
    assert cfgcheck.validate(config(real)).by_rule("ignore-index-is-token") == []
