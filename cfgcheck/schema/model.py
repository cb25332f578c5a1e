"""The ``model`` section: architecture shape of a decoder-only transformer.

Derived fields are computed in one place, :meth:`ModelConfig._derive`, LitGPT-style:

* ``padded_vocab_size = ceil(vocab_size / padding_multiple) * padding_multiple``
  (embedding / lm_head rows; equals ``vocab_size`` when no multiple is given)
* ``n_query_groups = n_head``          (plain multi-head attention, no GQA)
* ``head_size = n_embd // n_head``
* ``intermediate_size = 4 * n_embd``
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from cfgcheck.schema._base import Section
from cfgcheck.schema.bounds import (
    Experts,
    Heads,
    HeadSize,
    Layers,
    MlpWidth,
    Tokens,
    Vocab,
    Width,
)

MlpKind = Literal["gelu", "swiglu", "geglu"]
NormKind = Literal["rmsnorm", "layernorm", "cohere_layernorm"]
# How a pre-quantized checkpoint stores its weights (cfgcheck.models.quant reads them).
WeightFormat = Literal[
    "gptq-2bit",
    "gptq-3bit",
    "gptq-4bit",
    "gptq-8bit",
    "awq-4bit",
    "bnb-nf4",
    "bnb-nf4-dq",
    "bnb-fp4",
    "bnb-int8",
    "mxfp4",
    "fp8",
    "fbgemm-fp8",
]


def find_multiple(n: int, k: int) -> int:
    """Smallest multiple of ``k`` that is >= ``n``."""
    return n if n % k == 0 else n + k - (n % k)


def _shape_or_pretrained(schema: dict[str, Any]) -> None:
    """In a config file, a model section spells a whole shape or names ``pretrained`` (the
    folder's shape fills it before validation; see :mod:`cfgcheck.models.expand`)."""
    required = schema.pop("required", [])
    schema["anyOf"] = [{"required": required}, {"required": ["pretrained"]}]


class ModelConfig(Section):
    model_config = ConfigDict(**Section.model_config, json_schema_extra=_shape_or_pretrained)
    pretrained: str | None = Field(
        None,
        description="A model folder (Hugging Face config.json or LitGPT model_config.yaml), a "
        "Hub id in the local Hugging Face cache, or a preset's name or Hub id: the shape is "
        "read from it (see cfgcheck.models). Nothing is downloaded.",
    )
    name: str = Field(description="Model name, e.g. tinyllama-1.1b.")
    source: str | None = Field(None, description="Where the shape was taken from (URL).")
    block_size: Tokens = Field(description="Longest sequence the model can attend to.")
    vocab_size: Vocab | None = Field(
        None,
        description="len(tokenizer) the model was built and trained for (LitGPT's vocab_size). "
        "Unknown (null) for a Hugging Face model folder, whose config.json vocab_size is the "
        "embedding rows (padded_vocab_size). One of the two is required.",
    )
    padding_multiple: int | None = Field(
        None, gt=0, description="Round the embedding rows up to a multiple of this."
    )
    padded_vocab_size: Vocab | None = Field(
        None, description="Embedding rows. Derived from vocab_size when not given."
    )
    n_layer: Layers = Field(description="Transformer blocks.")
    n_embd: Width = Field(description="Hidden size.")
    n_head: Heads = Field(description="Attention (query) heads.")
    n_query_groups: Heads | None = Field(
        None, description="Key/value heads (GQA). Defaults to n_head."
    )
    head_size: HeadSize | None = Field(None, description="Defaults to n_embd // n_head.")
    intermediate_size: MlpWidth | None = Field(
        None,
        description="MLP width; default 4*n_embd. For a mixture-of-experts model, the width "
        "one token runs through: n_expert_per_token x the expert width, plus shared experts.",
    )
    mlp: MlpKind = Field(
        "swiglu", description="MLP kind: swiglu (Llama), geglu (Gemma), gelu (GPT-2, Phi)."
    )
    norm: NormKind = Field(
        "rmsnorm",
        description="Normalization layer kind: rmsnorm (Llama), layernorm (weight and bias: "
        "GPT-NeoX, Phi), cohere_layernorm (a bias-free LayerNorm written out in fp32: Cohere, "
        "Cohere 2).",
    )
    bias: bool = Field(False, description="Bias on every linear layer.")
    attn_bias: bool = Field(False, description="Bias on the q/k/v projections only.")
    lm_head_bias: bool = Field(False, description="Bias on the output layer (lm_head).")
    tie_embeddings: bool = Field(False, description="lm_head shares the embedding matrix.")
    parallel_residual: bool = Field(
        False,
        description="Attention and MLP read the same input and are added to the residual "
        "together (GPT-NeoX, Phi).",
    )
    shared_attention_norm: bool = Field(
        False, description="One norm feeds both attention and MLP (parallel residual)."
    )
    rotary_fraction: float = Field(1.0, gt=0, le=1, description="Share of head dims with RoPE.")
    # Elements of today's architectures (LitGPT's names: litgpt/config.py).
    architecture: str | None = Field(
        None,
        description="The Hugging Face model_type that runs this shape (llama, mistral, qwen2, "
        "qwen3, gemma, gemma2, phi, phi3, gpt2, ...): decides the module names LoRA targets "
        "and which transformers class builds it. None: inferred from the layout.",
    )
    norm_qk: bool = Field(
        False,
        description="A norm (of model.norm's kind) over each query and key head, head_size "
        "wide, before RoPE (Qwen3's q_norm / k_norm).",
    )
    post_attention_norm: bool = Field(
        False,
        description="A norm on the attention output before the residual add, besides the "
        "input norm (Gemma 2's post_attention_layernorm).",
    )
    post_mlp_norm: bool = Field(
        False,
        description="A norm on the MLP output before the residual add, besides the MLP input "
        "norm (Gemma 2's post_feedforward_layernorm).",
    )
    sliding_window_size: Tokens | None = Field(
        None,
        description="Local attention window in tokens: a query attends to at most this many "
        "keys (itself included), as transformers' sliding-window mask (Mistral v0.1: 4096, "
        "Phi-3-mini: 2047, Gemma 2: 4096). None: full causal attention.",
    )
    sliding_window_pattern: int | None = Field(
        None,
        gt=1,
        description="Which layers use sliding_window_size. None: every layer (Mistral v0.1, "
        "Phi-3). N: of every N layers the first N-1 slide and the N-th attends globally, as "
        "transformers' layer_types (Gemma 2: 2, so layers 0, 2, 4, ... slide).",
    )
    attention_logit_softcapping: float | None = Field(
        None,
        gt=0,
        description="Attention scores become cap * tanh(scores / cap) (Gemma 2: 50.0). No "
        "parameters; transformers' Gemma2 runs it in eager and flash-attention kernels (its "
        "_supports_sdpa is False).",
    )
    final_logit_softcapping: float | None = Field(
        None,
        gt=0,
        description="Output logits become cap * tanh(logits / cap) (Gemma 2: 30.0): one more "
        "vocabulary-wide tensor per token. No parameters.",
    )
    bos_token_id: int | None = Field(
        None,
        ge=0,
        description="The id the checkpoint was trained to start a sequence with (config.json / "
        "generation_config.json bos_token_id; filled from model.pretrained). The tokenizer's "
        "bos id must agree (rule tokenizer-model-mismatch).",
    )
    eos_token_id: int | list[int] | None = Field(
        None,
        description="The id(s) the checkpoint ends a sequence with (config.json / "
        "generation_config.json eos_token_id, one id or a list; filled from model.pretrained). "
        "The tokenizer's eos id must be one of them, or the labels teach another stop token.",
    )
    pad_token_id: int | None = Field(
        None,
        ge=0,
        description="The checkpoint's pad id (config.json pad_token_id; filled from "
        "model.pretrained).",
    )

    head: Literal["causal_lm", "sequence_classification", "token_classification"] = Field(
        "causal_lm",
        description="The output head: the lm_head over the vocabulary, or the classification "
        "score layer of *ForSequenceClassification (num_labels rows, no bias) / "
        "*ForTokenClassification (num_labels rows and a bias), transformers' "
        "GenericFor*Classification (modeling_layers.py). Read from config.json architectures.",
    )
    num_labels: Vocab | None = Field(
        None, description="Classes of a classification head (default 2, as transformers)."
    )
    n_expert: Experts | None = Field(
        None,
        description="Routed experts per mixture-of-experts layer (Mixtral: 8, Qwen3-30B-A3B: "
        "128; LitGPT's n_expert). None: a dense model. Read from model.pretrained.",
    )
    n_expert_per_token: Experts | None = Field(
        None,
        description="Experts each token runs through (the router's top-k; Mixtral: 2).",
    )
    weight_format: WeightFormat | None = Field(
        None,
        description="How a pre-quantized checkpoint stores its weights (its config.json "
        "quantization_config: GPTQ, AWQ, bitsandbytes, gpt-oss's MXFP4 experts, FP8). None: "
        "16/32-bit weights. Read from model.pretrained; the memory estimate counts it.",
    )
    quant_group_size: int | None = Field(
        None, gt=0, description="GPTQ / AWQ group size (one scale and zero per group)."
    )
    hf_config: dict[str, Any] | None = Field(
        None,
        description="The Hugging Face config.json of an architecture cfgcheck reads "
        "generically: transformers builds it on the meta device (no weights, never "
        "trust_remote_code) for its exact modules and parameter counts. Filled by "
        "model.pretrained and the presets of such families.",
    )

    @model_validator(mode="after")
    def _derive(self) -> ModelConfig:
        """Fill the derived fields. Raises only when neither vocab_size nor the embedding rows
        are known; shape problems are rules, not schema errors.

        Values are written past pydantic's ``__setattr__`` so that ``model_fields_set`` keeps
        meaning "given by the user" (rules tell a derived head_size from an explicit one).
        """
        if self.vocab_size is None and self.padded_vocab_size is None:
            raise ValueError(
                "set model.vocab_size (len(tokenizer) the model is built for) or "
                "model.padded_vocab_size (its embedding rows), or model.pretrained"
            )
        vocab = self.vocab_size if self.vocab_size is not None else self.padded_vocab_size
        assert vocab is not None  # one of the two is set (checked above)
        derived = {
            "padded_vocab_size": find_multiple(vocab, self.padding_multiple or 1),
            "n_query_groups": self.n_head,
            "head_size": self.n_embd // self.n_head,
            "intermediate_size": 4 * self.n_embd,
        }
        for name, value in derived.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        return self

    def uses_sliding_window(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) attends through the sliding window."""
        if self.sliding_window_size is None:
            return False
        pattern = self.sliding_window_pattern
        return pattern is None or (layer + 1) % pattern != 0

    @property
    def n_sliding_layers(self) -> int:
        """Layers that attend through the sliding window (0 without one)."""
        return sum(self.uses_sliding_window(i) for i in range(self.n_layer))

    # Typed accessors for the derived fields (always set after validation).
    @property
    def rows(self) -> int:
        """Embedding rows (``padded_vocab_size``)."""
        assert self.padded_vocab_size is not None  # set by _derive
        return self.padded_vocab_size

    @property
    def head_rows(self) -> int:
        """Output rows: the vocabulary for a causal LM, the labels for a classification head."""
        return self.rows if self.head == "causal_lm" else (self.num_labels or 2)

    @property
    def head_bias(self) -> bool:
        """Whether the output layer has a bias (token classification's score does)."""
        if self.head == "causal_lm":
            return self.lm_head_bias
        return self.head == "token_classification"

    @property
    def kv_heads(self) -> int:
        assert self.n_query_groups is not None  # set by _derive
        return self.n_query_groups

    @property
    def head_dim(self) -> int:
        assert self.head_size is not None  # set by _derive
        return self.head_size

    @property
    def mlp_width(self) -> int:
        assert self.intermediate_size is not None  # set by _derive
        return self.intermediate_size
