"""vocab-mismatch with model.pretrained, reproduced on a real model folder: a Llama checkpoint
whose tokenizer gained an added ``<pad>`` without resizing the embedding crashes the first
padded batch ("IndexError: index out of range in self"); the resized model trains. A Qwen-style
folder with more embedding rows than tokenizer tokens trains as is (no finding)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.data import DataLoader  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.models.expand import expand_pretrained  # noqa: E402
from cfgcheck.runtime import configure_tokenizer, make_collate_fn, tokenizer_kwargs  # noqa: E402
from tests.crash.support import TEXTS, tokenizer_folder, train_step  # noqa: E402

pytestmark = pytest.mark.crash


def checkpoint_folder(directory: Path, model_type: str, extra_rows: int) -> tuple[Path, Any]:
    """A tiny checkpoint folder: a config.json of ``model_type`` with ``len(tokenizer) +
    extra_rows`` embedding rows next to a real tokenizer whose base vocabulary (<unk> <s>
    </s> + BPE) got an added ``<pad>`` (the usual
    ``tokenizer.add_special_tokens({"pad_token": "<pad>"})``)."""
    folder, tok = tokenizer_folder(directory, pad="<pad>", added=("<pad>",))
    config = {
        "model_type": model_type,
        "architectures": ["LlamaForCausalLM" if model_type == "llama" else "Qwen2ForCausalLM"],
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "vocab_size": len(tok) + extra_rows,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder, tok


def run_config(folder: Path, **model: Any) -> dict[str, Any]:
    """A run whose model and tokenizer both come from the folder."""
    return {
        "name": "pretrained-crash",
        "model": {"pretrained": str(folder), **model},
        "data": {"max_seq_length": 32, "padding": "longest", "collator": "padded"},
        "trainer": {"micro_batch_size": 4, "precision": "32-true", "learning_rate": 1e-3},
    }


def from_folder(folder: Path) -> Any:
    """The checkpoint's model as transformers builds it from the folder's config.json (random
    weights: the shapes are what matters)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    return AutoModelForCausalLM.from_config(config).eval()


def first_batch(run: cfgcheck.RunConfig, tok: Any) -> dict[str, Any]:
    configure_tokenizer(tok, run)
    data = [dict(tok(t, **tokenizer_kwargs(run))) for t in TEXTS[:4]]
    loader = DataLoader(data, batch_size=4, collate_fn=make_collate_fn(run))
    batch: dict[str, Any] = next(iter(loader))
    return batch


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    # the checkpoint's embedding: one row per token of the tokenizer before <pad> was added
    return checkpoint_folder(tmp_path_factory.mktemp("llama"), "llama", -1)


def test_cfgcheck_flags_the_added_pad(llama_folder: tuple[Path, Any]) -> None:
    folder, tok = llama_folder
    rows = len(tok) - 1
    result = cfgcheck.validate(run_config(folder))
    (f,) = result.by_rule("vocab-mismatch")
    assert f.severity == "error"
    assert f"{len(tok)} tokens" in f.message and f"only {rows} embedding rows" in f.message
    assert f.fixes[0].overrides == (f"model.padded_vocab_size={len(tok)}",)


def test_the_real_step_crashes(llama_folder: tuple[Path, Any]) -> None:
    folder, tok = llama_folder
    unchecked = cfgcheck.RunConfig.model_validate(expand_pretrained(run_config(folder)).config)
    batch = first_batch(unchecked, tok)
    model = from_folder(folder)
    assert int(batch["input_ids"].max()) == len(tok) - 1  # the added <pad> pads short rows
    assert model.get_input_embeddings().num_embeddings == len(tok) - 1
    with pytest.raises(IndexError, match=r"^index out of range in self$"):
        model(**batch)


def test_the_resized_checkpoint_trains(llama_folder: tuple[Path, Any]) -> None:
    folder, tok = llama_folder
    result = cfgcheck.validate(run_config(folder, padded_vocab_size=len(tok)))
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    model = from_folder(folder)
    model.resize_token_embeddings(len(tok))  # what model.padded_vocab_size declares
    assert model.get_input_embeddings().num_embeddings == result.config.model.rows
    train_step(model, first_batch(result.config, tok))


def test_more_rows_than_tokens_trains_without_a_finding(tmp_path: Path) -> None:
    """Qwen's layout: the embedding is padded past the tokenizer (here by 38 rows)."""
    folder, tok = checkpoint_folder(tmp_path / "qwen", "qwen2", 38)
    result = cfgcheck.validate(run_config(folder))
    assert not result.by_rule("vocab-mismatch")
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None and result.config.model.rows > len(tok)
    train_step(from_folder(folder), first_batch(result.config, tok))
