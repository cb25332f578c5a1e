"""A Hugging Face ``config.json`` read as cfgcheck's ``model`` keys.

Each supported ``model_type`` names the transformers config class whose defaults fill a key
the file leaves out (the class attributes of ``transformers/models/<type>/configuration_<type>.py``,
transformers 5.x) and the fixed layout of its modeling file (which linears carry a bias, which
norms exist). ``vocab_size`` of a config.json is the number of embedding rows (the
``nn.Embedding`` / ``lm_head`` size), so it becomes ``padded_vocab_size``; the length of the
tokenizer the checkpoint was trained with is not in the file and stays unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cfgcheck.models.files import ModelFolderError

# transformers' activation names (ACT2FN) of the GELU family.
_GELU = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu"}


@dataclass(frozen=True)
class Arch:
    """What one ``model_type`` means, read from transformers' configuration and modeling files."""

    cls: str  # the transformers config class (its defaults fill missing keys)
    defaults: Mapping[str, Any]  # config.json key -> default of ``cls``
    gated: bool  # the MLP is gate * act(up) (Llama, Gemma, Phi-3) rather than act(fc1)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # layout fixed by the modeling file
    aliases: Mapping[str, str] = field(default_factory=dict)  # canonical key -> file key


_LLAMA_LIKE = {
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "num_key_value_heads": None,  # None: num_attention_heads
    "head_dim": None,  # None: hidden_size // num_attention_heads
}

# The layout keys every architecture states (unless its modeling file says otherwise), so a
# YAML value that contradicts the folder is caught even where the file is silent.
_LAYOUT: dict[str, Any] = {
    "norm": "rmsnorm",
    "bias": False,
    "attn_bias": False,
    "lm_head_bias": False,
    "parallel_residual": False,
    "shared_attention_norm": False,
    "norm_qk": False,
    "post_attention_norm": False,
    "post_mlp_norm": False,
    "sliding_window_size": None,
    "attention_logit_softcapping": None,
    "final_logit_softcapping": None,
}

ARCHS: dict[str, Arch] = {
    # configuration_llama.py: LlamaConfig; modeling_llama.py: attention_bias on q/k/v/o,
    # mlp_bias on gate/up/down, lm_head without bias.
    "llama": Arch(
        "LlamaConfig",
        {
            **_LLAMA_LIKE,
            "vocab_size": 32000,
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "max_position_embeddings": 2048,
            "attention_bias": False,
            "mlp_bias": False,
        },
        gated=True,
    ),
    # configuration_mistral.py: MistralConfig (sliding_window defaults to 4096).
    "mistral": Arch(
        "MistralConfig",
        {
            **_LLAMA_LIKE,
            "vocab_size": 32000,
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 4096 * 32,
            "sliding_window": 4096,
        },
        gated=True,
    ),
    # configuration_qwen2.py: Qwen2Config; modeling_qwen2.py: bias=True on q/k/v only; the
    # sliding window applies only with use_sliding_window.
    "qwen2": Arch(
        "Qwen2Config",
        {
            **_LLAMA_LIKE,
            "vocab_size": 151936,
            "hidden_size": 4096,
            "intermediate_size": 22016,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 32768,
            "use_sliding_window": False,
            "sliding_window": 4096,
        },
        gated=True,
        fixed={"attn_bias": True},
    ),
    # configuration_qwen3.py: Qwen3Config (head_dim 128); modeling_qwen3.py: q_norm / k_norm.
    "qwen3": Arch(
        "Qwen3Config",
        {
            **_LLAMA_LIKE,
            "vocab_size": 151936,
            "hidden_size": 4096,
            "intermediate_size": 22016,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "head_dim": 128,
            "max_position_embeddings": 32768,
            "attention_bias": False,
            "use_sliding_window": False,
            "sliding_window": 4096,
        },
        gated=True,
        fixed={"norm_qk": True},
    ),
    # configuration_gemma.py: GemmaConfig (head_dim 256, tied embeddings); GemmaMLP is gated
    # with a GELU (a legacy hidden_act "gelu" is turned into the tanh approximation).
    "gemma": Arch(
        "GemmaConfig",
        {
            "vocab_size": 256000,
            "hidden_size": 3072,
            "intermediate_size": 24576,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "head_dim": 256,
            "hidden_act": "gelu_pytorch_tanh",
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
            "attention_bias": False,
        },
        gated=True,
    ),
    # configuration_gemma2.py: Gemma2Config (soft-capping 50 / 30, sliding window 4096 on every
    # other layer); modeling_gemma2.py: post_attention_layernorm and post_feedforward_layernorm.
    "gemma2": Arch(
        "Gemma2Config",
        {
            "vocab_size": 256000,
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "num_hidden_layers": 26,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "sliding_window": 4096,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
        },
        gated=True,
        # layer_types: sliding on layers 0, 2, 4, ... (ModelConfig.sliding_window_pattern)
        fixed={"post_attention_norm": True, "post_mlp_norm": True, "sliding_window_pattern": 2},
        aliases={"hidden_act": "hidden_activation"},
    ),
    # configuration_phi.py: PhiConfig (partial_rotary_factor 0.5 set in __post_init__);
    # modeling_phi.py: LayerNorm, one norm feeding attention and MLP in parallel, bias on every
    # linear and on lm_head, q/k LayerNorm with qk_layernorm.
    "phi": Arch(
        "PhiConfig",
        {
            "vocab_size": 51200,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "num_key_value_heads": None,
            "hidden_act": "gelu_new",
            "max_position_embeddings": 2048,
            "tie_word_embeddings": False,
            "partial_rotary_factor": 0.5,
            "qk_layernorm": False,
        },
        gated=False,
        fixed={
            "norm": "layernorm",
            "bias": True,
            "lm_head_bias": True,
            "parallel_residual": True,
            "shared_attention_norm": True,
        },
    ),
    # configuration_phi3.py: Phi3Config (partial_rotary_factor 1.0, no sliding window by
    # default); modeling_phi3.py: fused gate_up_proj (gated SiLU), RMSNorm, no bias.
    "phi3": Arch(
        "Phi3Config",
        {
            **_LLAMA_LIKE,
            "vocab_size": 32064,
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "max_position_embeddings": 4096,
            "partial_rotary_factor": 1.0,
            "sliding_window": None,
        },
        gated=True,
    ),
    # configuration_gpt2.py: GPT2Config (attribute_map: hidden_size=n_embd, ...; n_inner None
    # means 4 * n_embd; tied embeddings); modeling_gpt2.py: Conv1D with bias everywhere,
    # LayerNorm, learned absolute positions (no RoPE; rotary_fraction is not read).
    "gpt2": Arch(
        "GPT2Config",
        {
            "vocab_size": 50257,
            "n_embd": 768,
            "n_inner": None,
            "n_layer": 12,
            "n_head": 12,
            "n_positions": 1024,
            "activation_function": "gelu_new",
            "tie_word_embeddings": True,
        },
        gated=False,
        fixed={"norm": "layernorm", "bias": True},
        aliases={
            "hidden_size": "n_embd",
            "num_hidden_layers": "n_layer",
            "num_attention_heads": "n_head",
            "max_position_embeddings": "n_positions",
            "intermediate_size": "n_inner",
            "hidden_act": "activation_function",
        },
    ),
}


SPECIAL_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _token_id(value: Any) -> bool:
    """An id (``2``) or, for eos, a non-empty list of ids (``[128001, 128009]``)."""
    if isinstance(value, list):
        return bool(value) and all(_token_id(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def special_token_ids(data: Mapping[str, Any]) -> dict[str, Any]:
    """The special-token ids a config.json or generation_config.json states (eos: one id or
    a list); nulls and malformed values are left out."""
    out: dict[str, Any] = {}
    for key in SPECIAL_TOKEN_KEYS:
        value = data.get(key)
        if _token_id(value) and (key == "eos_token_id" or not isinstance(value, list)):
            out[key] = value
    return out


@dataclass(frozen=True)
class Value:
    """One model key read from the file: the value and the config.json key behind it."""

    value: Any
    key: str  # the config.json key (dotted when nested), or a formula of keys
    default_of: str | None = None  # "LlamaConfig.head_dim" when the file leaves it out


def hf_model(data: Mapping[str, Any], where: str) -> dict[str, Value]:
    """cfgcheck ``model`` keys from a config.json's mapping. ``where`` names the file."""
    model_type = data.get("model_type")
    arch = ARCHS.get(model_type) if isinstance(model_type, str) else None
    if arch is None:
        known = ", ".join(sorted(ARCHS))
        raise ModelFolderError(
            f"{where}: model_type {model_type!r} is not mapped by cfgcheck (known: {known}); "
            f"write the model section by hand instead of model.pretrained"
        )
    reader = _Reader(arch, data, where)
    out: dict[str, Value] = {}
    hidden = reader.int("hidden_size")
    heads = reader.int("num_attention_heads")
    out["n_embd"] = hidden
    out["n_head"] = heads
    out["n_layer"] = reader.int("num_hidden_layers")
    out["padded_vocab_size"] = reader.int("vocab_size")
    out["block_size"] = reader.int("max_position_embeddings")
    kv = reader.get("num_key_value_heads")
    out["n_query_groups"] = kv if kv.value is not None else Value(heads.value, heads.key)
    if reader.has_default("head_dim"):
        head = reader.get("head_dim")
        out["head_size"] = (
            head
            if head.value is not None
            else Value(hidden.value // heads.value, f"{hidden.key} // {heads.key}")
        )
    width = reader.get("intermediate_size")
    out["intermediate_size"] = (
        width if width.value is not None else Value(4 * hidden.value, f"4 * {hidden.key}")
    )
    act = reader.get("hidden_act")
    if act.value is None:  # an explicit null (gemma's hidden_activation): the class default
        name = arch.aliases.get("hidden_act", "hidden_act")
        act = Value(arch.defaults[name], name, f"transformers {arch.cls}.{name}")
    out["mlp"] = Value(_mlp_kind(act.value, arch.gated, where), act.key, act.default_of)
    out["tie_embeddings"] = reader.get("tie_word_embeddings")
    if reader.has_default("attention_bias"):
        attn_bias = reader.get("attention_bias")
        mlp_bias = reader.get("mlp_bias") if reader.has_default("mlp_bias") else None
        if mlp_bias is not None and mlp_bias.value and attn_bias.value:
            out["bias"] = Value(True, f"{attn_bias.key} + {mlp_bias.key}")
        else:
            # cfgcheck's attn_bias is q/k/v only; Llama's attention_bias also biases o_proj
            # (hidden_size parameters per layer, not modelled).
            out["attn_bias"] = attn_bias
    if reader.has_default("partial_rotary_factor"):
        out["rotary_fraction"] = reader.rotary()
    elif model_type != "gpt2":  # RoPE on every head dimension
        out["rotary_fraction"] = Value(1.0, "model_type")
    if reader.has_default("qk_layernorm"):
        out["norm_qk"] = reader.get("qk_layernorm")
    if reader.has_default("sliding_window"):
        window = reader.get("sliding_window")
        if reader.has_default("use_sliding_window"):
            use = reader.get("use_sliding_window")
            window = window if use.value else Value(None, use.key, use.default_of)
        out["sliding_window_size"] = window
    # Special-token ids: only those the file states (a class default such as LlamaConfig's
    # eos_token_id=2 says nothing about the tokenizer this checkpoint was trained with).
    for key, ids in special_token_ids(data).items():
        out[key] = Value(ids, key)
    if reader.has_default("attn_logit_softcapping"):
        out["attention_logit_softcapping"] = reader.get("attn_logit_softcapping")
        out["final_logit_softcapping"] = reader.get("final_logit_softcapping")
    for name, value in {**_LAYOUT, **arch.fixed}.items():
        out.setdefault(name, Value(value, "model_type"))
    out["architecture"] = Value(model_type, "model_type")
    return out


def _mlp_kind(act: Any, gated: bool, where: str) -> str:
    if not isinstance(act, str):
        raise ModelFolderError(f"{where}: the activation must be a string, not {act!r}")
    if gated:
        return "geglu" if act in _GELU else "swiglu"
    if act in _GELU:
        return "gelu"
    raise ModelFolderError(f"{where}: a non-gated MLP with activation {act!r} is not modelled")


class _Reader:
    """Reads one key of the file, falling back to the class default, type-checked."""

    def __init__(self, arch: Arch, data: Mapping[str, Any], where: str) -> None:
        self.arch, self.data, self.where = arch, data, where

    def has_default(self, key: str) -> bool:
        return self.arch.aliases.get(key, key) in self.arch.defaults

    def get(self, key: str) -> Value:
        name = self.arch.aliases.get(key, key)
        if name in self.data:  # an explicit null is kept (sliding_window: null = no window)
            return Value(self.data[name], name)
        return Value(self.arch.defaults.get(name), name, f"transformers {self.arch.cls}.{name}")

    def int(self, key: str) -> Value:
        v = self.get(key)
        if isinstance(v.value, bool) or not isinstance(v.value, int) or v.value <= 0:
            raise ModelFolderError(
                f"{self.where}: {v.key} must be a positive integer, not {v.value!r}"
            )
        return v

    def rotary(self) -> Value:
        """``partial_rotary_factor`` at the top level or inside rope_parameters/rope_scaling
        (transformers 5 keeps it in ``rope_parameters``)."""
        for section in ("rope_parameters", "rope_scaling"):
            nested = self.data.get(section)
            if isinstance(nested, Mapping) and nested.get("partial_rotary_factor") is not None:
                return Value(nested["partial_rotary_factor"], f"{section}.partial_rotary_factor")
        return self.get("partial_rotary_factor")
