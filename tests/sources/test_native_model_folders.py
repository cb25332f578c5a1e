"""Native configs naming a local model folder (a Hugging Face config.json with its tokenizer):
the shape and tokenizer come from the folder, and each format's profile grades what the
framework does about a tokenizer larger than the embedding."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.sources import check_native
from tests.conftest import requires
from tests.model_folders import (
    LLAMA2_7B,
    QWEN25_05B,
    qwen25_tokenizer_files,
    tokenizer_files,
    write_config,
)
from tests.sources.support import one, write


@pytest.fixture(scope="module")
def llama2_padded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama-2-7b's config.json (32,000 rows); its tokenizer gained an added <pad> (32,001)."""
    folder = write_config(tmp_path_factory.mktemp("llama") / "Llama-2-7b-hf", LLAMA2_7B)
    return tokenizer_files(folder, 32000, added=("<pad>",), pad_token="<pad>")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_config(tmp_path_factory.mktemp("qwen") / "Qwen2.5-0.5B", QWEN25_05B)
    return qwen25_tokenizer_files(folder)


def test_a_folder_gives_the_shape_and_the_tokenizer(tmp_path: Path, qwen: Path) -> None:
    file = write(tmp_path, "sft.yaml", f"model_name_or_path: {qwen}\nmax_length: 4096\n")
    result = check_native(file, "trl", gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]
    assert result.config is not None
    assert result.config.model.block_size == 32768 and result.config.model.rows == 151936
    assert result.config.tokenizer.path == str(qwen)


def test_axolotl_resizes_the_embedding_trl_does_not(tmp_path: Path, llama2_padded: Path) -> None:
    axolotl = write(tmp_path, "a.yml", f"base_model: {llama2_padded}\nlearning_rate: 0.0002\n")
    found = one(check_native(axolotl, "axolotl", gpu="H100"), "vocab-mismatch")
    assert found.severity == "warning" and "_resize_token_embeddings" in found.message
    assert found.locations["model.padded_vocab_size"] is not None
    trl = write(tmp_path, "t.yaml", f"model_name_or_path: {llama2_padded}\n")
    found = one(check_native(trl, "trl", gpu="H100"), "vocab-mismatch")
    assert found.severity == "error"
    located = found.locations.get("model.padded_vocab_size")
    assert located is not None and located.file.endswith("config.json")


@requires("torch", "transformers")
def test_what_axolotl_does_avoids_the_index_error() -> None:
    """The Axolotl profile's ground truth on CPU: an id past the embedding rows raises in a
    plain transformers model; after resize_token_embeddings(len(tokenizer)), which Axolotl's
    ModelLoader._resize_token_embeddings calls, the same batch trains a step."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config)
    batch = torch.tensor([[1, 5, 100, 7]])  # 100: the added <pad>, one past the rows
    with pytest.raises(IndexError):
        model(input_ids=batch, labels=batch)
    model.resize_token_embeddings(101)
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    assert torch.isfinite(loss)
