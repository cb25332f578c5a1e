"""Shared pieces of the crash reproductions and the runtime tests: a real tokenizer folder
built with tests/factories.py, a run config whose tokenizer section matches it, tiny
random-weight models built from a ``model`` section's shape, and one real training step."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cfgcheck
from cfgcheck.schema.model import ModelConfig
from tests.factories import CORPUS, bpe, save_folder

# Texts of clearly different token lengths (the first is the longest).
TEXTS: tuple[str, ...] = (
    " ".join(CORPUS[:3]),
    CORPUS[0],
    "A tokenizer maps text.",
    "LoRA",
    CORPUS[1],
    "Mixed precision.",
    CORPUS[4],
    "The embedding.",
)


def tokenizer_folder(
    directory: Path,
    *,
    pad: bool | str = True,
    added: tuple[str, ...] = (),
) -> tuple[Path, Any]:
    """A transformers tokenizer folder (BPE tokenizer.json + tokenizer_config.json) and the
    tokenizer ``AutoTokenizer`` loads from it, offline. ``pad=True``: ``<pad>`` is a special
    token of the base vocabulary (id 3) and the pad token; ``pad=False``: no pad token; a
    string: that token (put it in ``added`` to append it after the base vocabulary).
    Skips the calling test when transformers is not installed."""
    import pytest

    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    special = ("<unk>", "<s>", "</s>", "<pad>") if pad is True else ("<unk>", "<s>", "</s>")
    pad_token = "<pad>" if pad is True else (pad or None)
    folder = save_folder(bpe(special=special, added=added), directory, pad_token=pad_token)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return folder, tok


def validated(cfg: dict[str, Any]) -> cfgcheck.RunConfig:
    """The typed config of a plain dict that must pass every rule."""
    result = cfgcheck.validate(cfg)
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    return result.config


def run_config(
    folder: Path,
    tok: Any,
    *,
    model: dict[str, Any] | None = None,
    tokenizer: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    trainer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A plain run config for a tiny model. The tokenizer section names the real folder AND
    declares its size and special tokens (so rules see the real values whether or not
    tokenizer path resolution is in place)."""
    specials: dict[str, Any] = {}
    for name in ("pad", "eos", "bos", "unk"):
        token = getattr(tok, f"{name}_token")
        if token is not None:
            specials[f"{name}_token"] = token
            specials[f"{name}_token_id"] = tok.convert_tokens_to_ids(token)
    return {
        "name": "tiny-run",
        "model": {
            "name": "tiny",
            "block_size": 64,
            "vocab_size": len(tok),
            "n_layer": 2,
            "n_embd": 32,
            "n_head": 2,
            **(model or {}),
        },
        "tokenizer": {"path": str(folder), "vocab_size": len(tok), **specials, **(tokenizer or {})},
        "data": {
            "max_seq_length": 32,
            "padding": "longest",
            "collator": "padded",
            **(data or {}),
        },
        "trainer": {
            "micro_batch_size": 4,
            "precision": "32-true",
            "finetuning": "full",
            "learning_rate": 1e-3,
            **(trainer or {}),
        },
    }


def llama(m: ModelConfig) -> Any:
    """A random-weight transformers Llama with the shape of ``m`` (RoPE positions), from the
    same shape mapping the memory estimate's meta-device cross-check uses."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from cfgcheck.memory.hf_shapes import hf_config

    torch.manual_seed(0)
    config = hf_config(m)
    assert isinstance(config, LlamaConfig), type(config)  # the tests' shapes are Llama-like
    config.pad_token_id = config.bos_token_id = config.eos_token_id = None
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


def from_shape(m: ModelConfig) -> Any:
    """A random-weight transformers model of whichever architecture has ``m``'s layout (Llama,
    Phi, Gemma, Qwen2), built through ``cfgcheck.memory.hf_shapes.hf_config``."""
    import torch
    from transformers import AutoModelForCausalLM

    from cfgcheck.memory.hf_shapes import hf_config

    torch.manual_seed(0)
    config = hf_config(m)
    config.pad_token_id = config.bos_token_id = config.eos_token_id = None
    return AutoModelForCausalLM.from_config(config).eval()


def gpt2(m: ModelConfig) -> Any:
    """A random-weight transformers GPT-2 with the shape of ``m``: learned absolute position
    embeddings with exactly ``block_size`` rows (``n_positions``)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=m.rows,
        n_positions=m.block_size,
        n_embd=m.n_embd,
        n_layer=m.n_layer,
        n_head=m.n_head,
        n_inner=m.mlp_width,
        bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2LMHeadModel(config).eval()


def train_step(model: Any, batch: dict[str, Any], lr: float = 1e-3) -> float:
    """One real optimizer step (forward, backward, AdamW step); returns the finite loss."""
    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    value = float(loss.item())
    assert math.isfinite(value), f"loss is not finite: {value}"
    changed = any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert changed, "the optimizer step changed no weight"
    return value
