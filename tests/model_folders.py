"""Model folders for the tests: ``config.json`` files with the published values of real
checkpoints (each copied from the URL above it, unchanged keys, irrelevant ones such as
``torch_dtype`` left out), LitGPT ``model_config.yaml`` files, real tokenizers built with the
``tokenizers`` library, and a fake Hugging Face cache laid out as huggingface_hub writes it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers

from tests.factories import save_folder

# https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json
QWEN25_05B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
# https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
LLAMA2_7B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "use_cache": True,
    "vocab_size": 32000,
}
# https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json
LLAMA32_1B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "use_cache": True,
    "vocab_size": 128256,
}
# https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json
QWEN3_06B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
# https://huggingface.co/google/gemma-2-2b/blob/main/config.json
GEMMA2_2B: dict[str, Any] = {
    "architectures": ["Gemma2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": 1,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2304,
    "initializer_range": 0.02,
    "intermediate_size": 9216,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "num_attention_heads": 8,
    "num_hidden_layers": 26,
    "num_key_value_heads": 4,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "use_cache": True,
    "vocab_size": 256000,
}
# https://huggingface.co/google/gemma-2b/blob/main/config.json
GEMMA_2B: dict[str, Any] = {
    "architectures": ["GemmaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 16384,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 8,
    "num_hidden_layers": 18,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "use_cache": True,
    "vocab_size": 256000,
}
# https://huggingface.co/microsoft/phi-2/blob/main/config.json
PHI2: dict[str, Any] = {
    "architectures": ["PhiForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 50256,
    "embd_pdrop": 0.0,
    "eos_token_id": 50256,
    "hidden_act": "gelu_new",
    "hidden_size": 2560,
    "initializer_range": 0.02,
    "intermediate_size": 10240,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "phi",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "partial_rotary_factor": 0.4,
    "qk_layernorm": False,
    "resid_pdrop": 0.1,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "use_cache": True,
    "vocab_size": 51200,
}
# https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
PHI3_MINI: dict[str, Any] = {
    "architectures": ["Phi3ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "embd_pdrop": 0.0,
    "eos_token_id": 32000,
    "hidden_act": "silu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
    "model_type": "phi3",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096,
    "pad_token_id": 32000,
    "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": 2047,
    "tie_word_embeddings": False,
    "use_cache": True,
    "vocab_size": 32064,
}
# https://huggingface.co/mistralai/Mistral-7B-v0.3/blob/main/config.json
MISTRAL_7B_V03: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_cache": True,
    "vocab_size": 32768,
}
# https://huggingface.co/openai-community/gpt2/blob/main/config.json
GPT2: dict[str, Any] = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "vocab_size": 50257,
}

PUBLISHED: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B": QWEN25_05B,
    "meta-llama/Llama-2-7b-hf": LLAMA2_7B,
    "meta-llama/Llama-3.2-1B": LLAMA32_1B,
    "Qwen/Qwen3-0.6B": QWEN3_06B,
    "google/gemma-2-2b": GEMMA2_2B,
    "google/gemma-2b": GEMMA_2B,
    "microsoft/phi-2": PHI2,
    "microsoft/Phi-3-mini-4k-instruct": PHI3_MINI,
    "mistralai/Mistral-7B-v0.3": MISTRAL_7B_V03,
    "openai-community/gpt2": GPT2,
}


def write_config(folder: Path, config: Mapping[str, Any]) -> Path:
    """``folder/config.json`` written as transformers' ``save_pretrained`` does (indent 2)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder


def wordlevel(base: int, special: Sequence[str] = ("<unk>", "<s>", "</s>")) -> Tokenizer:
    """A real word-level tokenizer of exactly ``base`` tokens: ``special`` first, then
    ``w<i>`` words (a large vocabulary without training)."""
    vocab = {t: i for i, t in enumerate(special)}
    vocab.update({f"w{i}": i for i in range(len(special), base)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token=special[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(special))
    return tok


def tokenizer_files(
    folder: Path,
    base: int,
    added: Sequence[str] = (),
    pad_token: str | None = None,
    *,
    special: Sequence[str] = ("<unk>", "<s>", "</s>"),
    eos_token: str | None = "</s>",
    bos_token: str | None = "<s>",
    unk_token: str | None = "<unk>",
) -> Path:
    """Save a ``base``-token tokenizer into ``folder`` with ``added`` special tokens appended
    (ids base, base+1, ...), as ``tokenizer.add_special_tokens`` + ``save_pretrained`` leave it."""
    tok = wordlevel(base, special)
    if added:
        tok.add_special_tokens(list(added))
    return save_folder(
        tok, folder, pad_token=pad_token, eos_token=eos_token, bos_token=bos_token,
        unk_token=unk_token,
    )  # fmt: skip


# https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/tokenizer_config.json added_tokens_decoder:
# ids 151643.. after the 151,643 BPE tokens; eos and pad "<|endoftext|>", no bos, no unk.
QWEN25_ADDED = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
)  # fmt: skip


def qwen25_tokenizer_files(folder: Path) -> Path:
    """Qwen2.5's tokenizer layout: 151,643 base tokens, 22 added (151,665), eos = pad =
    ``<|endoftext|>`` (id 151643), no bos and no unk token."""
    return tokenizer_files(
        folder, 151643, QWEN25_ADDED, "<|endoftext|>", special=("<unk>",),
        eos_token="<|endoftext|>", bos_token=None, unk_token=None,
    )  # fmt: skip


def hub_cache(cache: Path, hub_id: str, config: Mapping[str, Any], commit: str) -> Path:
    """A Hugging Face cache entry as huggingface_hub writes it: the file content in
    ``blobs/``, ``snapshots/<commit>/config.json`` a symlink to it, ``refs/main`` the commit."""
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    blob = repo / "blobs" / "0123abcd"
    blob.write_text(json.dumps(config, indent=2))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(Path("..") / ".." / "blobs" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot
