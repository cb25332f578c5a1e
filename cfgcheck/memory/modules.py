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

Every other family (``ModelConfig.hf_config`` set, e.g. mixtral, qwen3_moe, gemma3, olmo2,
falcon) is read off the real model built on the meta device (:mod:`cfgcheck.memory.traced`):
its tree is ``named_modules()`` itself, its block linears those of its largest decoder layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from cfgcheck.memory.traced import EMBEDDING as EMBEDDING
from cfgcheck.memory.traced import LINEAR as LINEAR
from cfgcheck.memory.traced import NORM as NORM
from cfgcheck.memory.traced import OTHER as OTHER
from cfgcheck.memory.traced import Trace, trace
from cfgcheck.reuse import derived
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


def traced(m: ModelConfig) -> Trace | None:
    """The meta-device trace of ``m.hf_config`` for an architecture without a hand-written
    layout (None: a hand-written one, or no config.json to build)."""
    if m.hf_config is None or architecture_of(m) in ARCHITECTURES:
        return None
    # by the mapping's identity (model_copy shares it), holding it so the id stays its own
    hit = _TRACED.get(id(m.hf_config))
    if hit is not None and hit[0] is m.hf_config:
        return hit[1]
    tr = trace(m.hf_config)
    if len(_TRACED) >= 64:
        _TRACED.clear()
    _TRACED[id(m.hf_config)] = (m.hf_config, tr)
    return tr


_TRACED: dict[int, tuple[object, Trace]] = {}
_BLOCKS: dict[int, tuple[Trace, tuple[Linear, ...]]] = {}


def _traced_source(path: str, roles: tuple[str, ...]) -> str:
    if "o_proj" in roles:
        return "attn_out"
    if "down_proj" in roles:
        return "mlp_act"
    if {"gate_proj", "up_proj"} & set(roles):
        return "mlp_in"
    if roles:
        return "attn_in"
    return "mlp_in" if any(k in path for k in ("mlp", "feed_forward", "moe")) else "attn_in"


def _traced_roles(path: str) -> tuple[str, ...]:
    name = path.rsplit(".", 1)[-1]
    if name in ("c_proj", "dense") and any(k in path for k in ("mlp", "feed_forward")):
        return (DOWN,) if name == "c_proj" else (UP,)
    return NAME_ROLES.get(name, ())


def traced_block(tr: Trace) -> list[Linear]:
    """The linears of the decoder layer with the most parameters (a MoE layer where some
    layers are dense), as :class:`Linear` with their llama roles."""
    hit = _BLOCKS.get(id(tr))
    if hit is None or hit[0] is not tr:
        if len(_BLOCKS) >= 64:
            _BLOCKS.clear()
        hit = _BLOCKS[id(tr)] = (tr, tuple(_traced_block(tr)))
    return list(hit[1])


def _traced_block(tr: Trace) -> list[Linear]:
    if not tr.n_layer:
        return []
    sizes = [0] * tr.n_layer
    for p, n in tr.params.items():
        i = tr.layer_of(p)
        if i is not None:
            sizes[i] += n
    layer = max(range(tr.n_layer), key=lambda i: (sizes[i], -i))
    prefix = f"{tr.layers}.{layer}."
    out = []
    for p, x in tr.linears.items():
        if p.startswith(prefix):
            inner = p[len(prefix) :]
            roles = _traced_roles(p)
            src = _traced_source(p, roles)
            name = inner.rsplit(".", 1)[-1]
            out.append(Linear(name, x.in_features, x.out_features, x.bias, src, inner, roles))
    return out


def block_linears(m: ModelConfig) -> list[Linear]:
    """The linear layers of one transformer block, in forward order, by their real names."""
    # a function of the model's contents alone, asked for hundreds of times per estimate
    return list(derived("block_linears", m, (), lambda: tuple(_block_linears(m))))


def _block_linears(m: ModelConfig) -> list[Linear]:
    tr = traced(m)
    if tr is not None:
        block = traced_block(tr)
        if m.shared_attention_norm:
            # one norm's output feeds attention and MLP (GPT-J ``ln_1``, Falcon-7B
            # ``input_layernorm``, Cohere): the MLP's first linears read the attention's input
            block = [replace(x, source="attn_in") if x.source == "mlp_in" else x for x in block]
        return block
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
    with its kind, or None when the architecture is not one cfgcheck knows. A traced model
    asked for fewer layers than it has gets every layer's modules under the first ones (the
    union: a one-layer tree answers for an entry that names no layer)."""
    tr = traced(m)
    if tr is not None:
        return _traced_tree(tr, m.n_layer)
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


def _traced_tree(tr: Trace, n_layer: int) -> dict[str, str]:
    if n_layer >= tr.n_layer:
        return dict(tr.tree)
    out: dict[str, str] = {}
    prefix = tr.layers + "."
    for path, kind in tr.tree.items():
        i = tr.layer_of(path)
        if i is not None and i >= n_layer:
            rest = path[len(prefix) :].split(".", 1)
            path = f"{prefix}{i % n_layer}" + (f".{rest[1]}" if len(rest) > 1 else "")
        out.setdefault(path, kind)
    return out


def lora_names(m: ModelConfig) -> tuple[str, ...]:
    """The module names a LoRA target list can use for ``m`` (block linears, embedding,
    lm_head), in forward order, or ``()`` for an unknown architecture."""
    tree = module_tree(m)
    if tree is None:
        return ()
    names = [p.rsplit(".", 1)[-1] for p, kind in tree.items() if kind in (LINEAR, EMBEDDING)]
    return tuple(dict.fromkeys(names))


Q, K, V, OUT = "q_proj", "k_proj", "v_proj", "o_proj"
GATE, UP, DOWN = "gate_proj", "up_proj", "down_proj"
HEAD, EMBED = "lm_head", "embed_tokens"

# Every module or switch name a LoRA target list may hold in some stack, with the llama names
# (roles) of what it adapts. The one table for "which projection is this name": the memory
# estimate of a shape cfgcheck cannot name modules for, LitGPT's switches and the fixes of the
# lora-target-unknown rule read it.
NAME_ROLES: dict[str, tuple[str, ...]] = {
    **{role: (role,) for role in (*ROLES, HEAD, EMBED)},
    "wte": (EMBED,),
    # transformers: Phi-3's fused projections, Phi-1.5/2 (dense, fc1, fc2), GPT-2 (Conv1D)
    "qkv_proj": (Q, K, V),
    "gate_up_proj": (GATE, UP),
    "dense": (OUT,),
    "fc1": (UP,),
    "fc2": (DOWN,),
    "c_attn": (Q, K, V),
    # GPT-NeoX / Falcon (query_key_value, dense, dense_h_to_4h, dense_4h_to_h), DeepSeek's
    # multi-head latent attention (q_a/q_b, kv_a_proj_with_mqa, kv_b_proj), Mixtral v0 (w1-w3)
    "query_key_value": (Q, K, V),
    "dense_h_to_4h": (UP,),
    "dense_4h_to_h": (DOWN,),
    "q_a_proj": (Q,),
    "q_b_proj": (Q,),
    "kv_a_proj_with_mqa": (K, V),
    "kv_b_proj": (K, V),
    "out_proj": (OUT,),
    "w1": (GATE,),
    "w3": (UP,),
    "w2": (DOWN,),
    "c_fc": (UP,),
    # GPT-J / CodeGen (transformers models/gptj/modeling_gptj.py GPTJMLP: fc_in, fc_out)
    "fc_in": (UP,),
    "fc_out": (DOWN,),
    "c_proj": (OUT, DOWN),
    # LitGPT modules (litgpt/model.py: attn.qkv, attn.proj, mlp.fc_1 / fc_2 / proj, mlp.fc)
    "qkv": (Q, K, V),
    "proj": (OUT,),
    "fc_1": (GATE,),
    "fc_2": (UP,),
    "mlp.proj": (DOWN,),
    "fc": (UP,),
    # short spellings
    "q": (Q,),
    "k": (K,),
    "v": (V,),
    "o": (OUT,),
}

# LitGPT's LoRA switches (litgpt/lora.py, the booleans Config.lora_query ... lora_head): with
# trainer.framework=litgpt the targets name switches (``query`` or ``lora_query``).
LITGPT_SWITCHES: dict[str, tuple[str, ...]] = {
    "query": (Q,),
    "key": (K,),
    "value": (V,),
    "projection": (OUT,),
    "mlp": (GATE, UP, DOWN),
    "head": (HEAD,),
}


def roles_of(name: str, framework: str = "hf") -> tuple[str, ...]:
    """The llama names ``name`` stands for (``()``: none known)."""
    if framework == "litgpt":
        switch = LITGPT_SWITCHES.get(name.removeprefix("lora_"))
        if switch:
            return switch
    return NAME_ROLES.get(name, ())


def matches(path: str, target: str) -> bool:
    """PEFT's rule for one entry of a ``target_modules`` list (``peft/tuners/tuners_utils.py``,
    ``check_target_module_exists``): the module's full path equals the entry or ends with
    ``"." + entry``. No regex and no wildcard in a list entry."""
    return path == target or path.endswith("." + target)


def matches_any(path: str, targets: frozenset[str] | set[str]) -> bool:
    """``any(matches(path, t) for t in targets)``, in time independent of the number of
    targets: an entry matches iff it equals one of the path's dotted suffixes."""
    parts = path.split(".")
    return any(".".join(parts[i:]) in targets for i in range(len(parts)))


def suffix_index(paths: Iterable[str]) -> dict[str, list[str]]:
    """Each dotted suffix of each path -> the paths it matches (PEFT's list-entry rule)."""
    index: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split(".")
        for i in range(len(parts)):
            index.setdefault(".".join(parts[i:]), []).append(path)
    return index
