"""Which modules an architecture has, by their real names: the one place for that knowledge.

The parameter count (``params.py``), the activation estimate and the LoRA-target rule all read
it. Each architecture is the Hugging Face ``model_type`` that builds the shape
(``ModelConfig.architecture``, or inferred from the layout); its module tree is the one
``model.named_modules()`` returns for the transformers class (``tests/test_lora_targets.py``
checks every tree against transformers on the meta device):

* ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``gemma``, ``gemma2``:
  ``model.layers.N.self_attn.{q,k,v,o}_proj``, ``model.layers.N.mlp.{gate,up,down}_proj``
  (+ ``self_attn.q_norm`` / ``k_norm`` in Qwen3, ``pre_/post_feedforward_layernorm`` in Gemma 2);
* ``phi`` (Phi-1.5 / Phi-2): ``self_attn.{q_proj,k_proj,v_proj,dense}``, ``mlp.{fc1,fc2}``;
* ``phi3``: fused ``self_attn.qkv_proj`` and ``mlp.gate_up_proj``, ``o_proj``, ``down_proj``;
* ``gpt2``: ``transformer.h.N.attn.{c_attn,c_proj}``, ``mlp.{c_fc,c_proj}`` (``Conv1D``),
  learned position embeddings ``transformer.wpe``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cfgcheck.schema.model import ModelConfig

# The llama names of the seven block projections, the "roles" every layout maps onto.
ROLES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2"})
ARCHITECTURES = LLAMA_LIKE | {"phi", "phi3", "gpt2"}


@dataclass(frozen=True)
class Linear:
    """One linear layer of a transformer block: ``out_features x in_features`` (+ bias)."""

    name: str  # the module's own name (last component of its path), e.g. "qkv_proj"
    in_features: int
    out_features: int
    bias: bool
    # Which activation feeds it: "attn_in" (attention norm output), "attn_out" (attention
    # output), "mlp_in" (MLP norm output), "mlp_act" (MLP hidden after the activation).
    source: str
    path: str = ""  # path inside the block, e.g. "self_attn.qkv_proj"
    roles: tuple[str, ...] = field(default=())  # llama names it computes, e.g. q, k, v

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


def architecture_of(m: ModelConfig) -> str | None:
    """``m.architecture``, or the transformers ``model_type`` its layout implies (None: none).

    gelu MLP + LayerNorm + one shared norm -> phi; GeGLU -> gemma (gemma2 with post norms);
    q/k norms -> qwen3; q/k/v bias only -> qwen2; a sliding window -> mistral; else llama.
    """
    if m.architecture is not None:
        return m.architecture.lower()
    if m.mlp == "gelu":
        shared = m.norm == "layernorm" and m.bias and m.shared_attention_norm
        return "phi" if shared and m.parallel_residual else None
    if m.norm != "rmsnorm" or m.lm_head_bias or m.parallel_residual:
        return None
    if m.mlp == "geglu":
        return "gemma2" if m.post_attention_norm or m.post_mlp_norm else "gemma"
    if m.norm_qk:
        return "qwen3"
    if m.attn_bias and not m.bias:
        return "qwen2"
    return "mistral" if m.sliding_window_size else "llama"


def block_linears(m: ModelConfig) -> list[Linear]:
    """The linear layers of one transformer block, in forward order, by their real names."""
    arch = architecture_of(m)
    h, q_out, kv_out, inter = m.n_embd, m.n_head * m.head_dim, m.kv_heads * m.head_dim, m.mlp_width
    qkv_bias = m.bias or m.attn_bias
    mlp_src = "attn_in" if m.shared_attention_norm else "mlp_in"
    gated = m.mlp != "gelu"
    if arch == "phi3":
        return [
            Linear("qkv_proj", h, q_out + 2 * kv_out, qkv_bias, "attn_in", "self_attn.qkv_proj",
                   ("q_proj", "k_proj", "v_proj")),
            Linear("o_proj", q_out, h, m.bias, "attn_out", "self_attn.o_proj", ("o_proj",)),
            Linear("gate_up_proj", h, 2 * inter, m.bias, mlp_src, "mlp.gate_up_proj",
                   ("gate_proj", "up_proj")),
            Linear("down_proj", inter, h, m.bias, "mlp_act", "mlp.down_proj", ("down_proj",)),
        ]  # fmt: skip
    if arch == "gpt2":
        return [
            Linear("c_attn", h, q_out + 2 * kv_out, qkv_bias, "attn_in", "attn.c_attn",
                   ("q_proj", "k_proj", "v_proj")),
            Linear("c_proj", q_out, h, m.bias, "attn_out", "attn.c_proj", ("o_proj",)),
            Linear("c_fc", h, inter, m.bias, mlp_src, "mlp.c_fc", ("up_proj",)),
            Linear("c_proj", inter, h, m.bias, "mlp_act", "mlp.c_proj", ("down_proj",)),
        ]  # fmt: skip
    o, up, down = ("dense", "fc1", "fc2") if arch == "phi" else ("o_proj", "up_proj", "down_proj")
    layers = [
        Linear("q_proj", h, q_out, qkv_bias, "attn_in", "self_attn.q_proj", ("q_proj",)),
        Linear("k_proj", h, kv_out, qkv_bias, "attn_in", "self_attn.k_proj", ("k_proj",)),
        Linear("v_proj", h, kv_out, qkv_bias, "attn_in", "self_attn.v_proj", ("v_proj",)),
        Linear(o, q_out, h, m.bias, "attn_out", f"self_attn.{o}", ("o_proj",)),
    ]
    if gated:
        layers.append(
            Linear("gate_proj", h, inter, m.bias, mlp_src, "mlp.gate_proj", ("gate_proj",))
        )
    layers += [
        Linear(up, h, inter, m.bias, mlp_src, f"mlp.{up}", ("up_proj",)),
        Linear(down, inter, h, m.bias, "mlp_act", f"mlp.{down}", ("down_proj",)),
    ]
    return layers


# Module kinds: what PEFT's LoRA can wrap ("linear", "embedding") and what it refuses.
LINEAR, EMBEDDING, NORM, OTHER = "linear", "embedding", "norm", "other"


def _block_others(m: ModelConfig, arch: str) -> list[tuple[str, str]]:
    """The non-linear modules of one block (paths inside the block), by architecture."""
    if arch == "gpt2":
        return [("ln_1", NORM), ("attn", OTHER), ("attn.attn_dropout", OTHER),
                ("attn.resid_dropout", OTHER), ("ln_2", NORM), ("mlp", OTHER),
                ("mlp.act", OTHER), ("mlp.dropout", OTHER)]  # fmt: skip
    act = "activation_fn" if arch in ("phi", "phi3") else "act_fn"
    out = [("self_attn", OTHER), ("mlp", OTHER), (f"mlp.{act}", OTHER), ("input_layernorm", NORM)]
    if arch == "phi":
        return [*out, ("resid_dropout", OTHER)]
    out.append(("post_attention_layernorm", NORM))
    if arch == "phi3":
        out += [("resid_attn_dropout", OTHER), ("resid_mlp_dropout", OTHER)]
    if m.norm_qk:
        out += [("self_attn.q_norm", NORM), ("self_attn.k_norm", NORM)]
    if arch == "gemma2":
        out += [("pre_feedforward_layernorm", NORM), ("post_feedforward_layernorm", NORM)]
    return out


def module_tree(m: ModelConfig) -> dict[str, str] | None:
    """Every module path of the transformers model (``named_modules()``, the root excluded)
    with its kind, or None when the architecture is not one cfgcheck knows."""
    arch = architecture_of(m)
    if arch not in ARCHITECTURES:
        return None
    if arch == "gpt2":
        top = "transformer"
        tree = {top: OTHER, f"{top}.wte": EMBEDDING, f"{top}.wpe": EMBEDDING,
                f"{top}.drop": OTHER, f"{top}.h": OTHER, f"{top}.ln_f": NORM}  # fmt: skip
        layers = f"{top}.h"
    else:
        final = "model.final_layernorm" if arch == "phi" else "model.norm"
        tree = {"model": OTHER, "model.embed_tokens": EMBEDDING, "model.layers": OTHER,
                final: NORM, "model.rotary_emb": OTHER}  # fmt: skip
        if arch == "phi":
            tree["model.embed_dropout"] = OTHER
        layers = "model.layers"
    block = [(x.path, LINEAR) for x in block_linears(m)] + _block_others(m, arch)
    for i in range(m.n_layer):
        tree[f"{layers}.{i}"] = OTHER
        tree.update({f"{layers}.{i}.{path}": kind for path, kind in block})
    tree["lm_head"] = LINEAR
    return tree


def lora_names(m: ModelConfig) -> tuple[str, ...]:
    """The module names a LoRA target list can use for ``m`` (block linears, embedding,
    lm_head), in forward order, or ``()`` for an unknown architecture."""
    tree = module_tree(m)
    if tree is None:
        return ()
    names = [p.rsplit(".", 1)[-1] for p, kind in tree.items() if kind in (LINEAR, EMBEDDING)]
    return tuple(dict.fromkeys(names))


def matches(path: str, target: str) -> bool:
    """PEFT's rule for one entry of a ``target_modules`` list (``peft/tuners/tuners_utils.py``,
    ``check_target_module_exists``): the module's full path equals the entry or ends with
    ``"." + entry``. No regex and no wildcard in a list entry."""
    return path == target or path.endswith("." + target)
