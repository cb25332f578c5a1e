"""A ``config.json`` whose ``model_type`` cfgcheck has no hand-written mapping for
(:data:`cfgcheck.models.hf.ARCHS`), read from the transformers model built on the meta device
(:mod:`cfgcheck.memory.traced`): hidden size, layers, heads and context length from the config
transformers parsed (``config.get_text_config()``, so Gemma 3's ``text_config`` nesting is
read), embedding rows and tied embeddings from the built modules, the MoE experts from the
fused ``*Experts`` modules. The whole config.json travels as ``model.hf_config``: the memory
estimate and the LoRA-target rule read the exact modules and parameter counts from its trace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.models.files import ModelFolderError
from cfgcheck.models.hf import _GELU, Value

if TYPE_CHECKING:  # the tracer (and torch) load only for a file that needs them
    from cfgcheck.memory.traced import Trace

_N_EXPERT = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk")


# What a reading depends on besides the config and the trace (cfgcheck.memory.trace_cache).
_CODE = (Path(__file__), Path(__file__).with_name("hf.py"))


def generic_model(data: Mapping[str, Any], where: str, known: str) -> dict[str, Value]:
    """cfgcheck ``model`` keys of an architecture transformers builds. Raises
    :class:`ModelFolderError` (one line, with the way forward) when it cannot.

    Kept on disk with the traces (:mod:`cfgcheck.memory.trace_cache`), keyed by the whole
    config: a folder read before needs neither torch nor transformers' config classes."""
    from cfgcheck.memory import trace_cache

    try:
        key = "model-folder:" + json.dumps(data, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    kept = None if key is None else trace_cache.load(key, "reading", _CODE)
    out = None if kept is None else _from_json(kept, data)
    if out is None:
        out = _generic_model(data, where, known)
        stored = _to_json(out)
        if key is not None and stored is not None:
            trace_cache.store(key, stored, "reading", _CODE)
    return out


def _to_json(out: Mapping[str, Value]) -> dict[str, Any] | None:
    """The reading as JSON data (the config itself left out), or None when a value would not
    come back the same (a tuple, a float key...)."""
    data = {k: [v.value, v.key, v.default_of] for k, v in out.items() if k != "hf_config"}
    try:
        same = repr(json.loads(json.dumps(data))) == repr(data)
    except (TypeError, ValueError):
        return None
    return data if same and list(out)[-1] == "hf_config" else None


def _from_json(kept: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Value] | None:
    """The reading :func:`_to_json` stored, the config added back; None: not one."""
    out: dict[str, Value] = {}
    for name, v in kept.items():
        ok = isinstance(v, list) and len(v) == 3 and isinstance(v[1], str)
        if not ok or not isinstance(v[2], str | None):
            return None
        out[name] = Value(v[0], v[1], v[2])
    if "architecture" not in out:
        return None
    out["hf_config"] = Value(dict(data), "model_type")
    return out


def _generic_model(data: Mapping[str, Any], where: str, known: str) -> dict[str, Value]:
    from cfgcheck.memory.traced import TraceError, text_config, trace

    model_type = data.get("model_type")
    try:
        tr = trace(data)
    except TraceError as e:
        raise ModelFolderError(
            f"{where}: {e}; cfgcheck maps {known} by hand; otherwise write the model section "
            f"by hand (n_layer, n_embd, n_head, n_query_groups, intermediate_size, "
            f"padded_vocab_size, block_size) instead of model.pretrained"
        ) from e
    text = text_config(data)
    prefix = "text_config." if text is not data else ""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cfg: Any = CONFIG_MAPPING[str(model_type)].from_dict(dict(data)).get_text_config()

    def val(attr: str, *keys: str) -> Value:
        """transformers' value of ``attr``, located at the first of ``keys`` the file has."""
        value = getattr(cfg, attr, None)
        for k in (attr, *keys):
            if k in text:
                return Value(value, prefix + k)
        return Value(value, prefix + attr, f"transformers {type(cfg).__name__}.{attr}")

    out: dict[str, Value] = {}
    hidden = val("hidden_size", "n_embd", "d_model")
    heads = val("num_attention_heads", "n_head")
    for name, v in (("n_embd", hidden), ("n_head", heads)):
        if not isinstance(v.value, int) or v.value <= 0 or not tr.n_layer:
            raise ModelFolderError(
                f"{where}: model_type {model_type!r} ({tr.cls}) has no {v.key} and decoder "
                f"layers cfgcheck can read: it models decoder transformers; write the model "
                f"section by hand instead of model.pretrained"
            )
        out[name] = v
    out["n_layer"] = Value(tr.n_layer, prefix + "num_hidden_layers")
    out["padded_vocab_size"] = Value(tr.rows, prefix + "vocab_size")
    ctx = _first(cfg, "max_position_embeddings", "n_positions", "max_sequence_length")
    out["block_size"] = val(ctx) if ctx else Value(2048, "model_type", "cfgcheck: no context")
    kv = val("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if isinstance(kv.value, int) and kv.value > 0 and heads.value % kv.value == 0:
        out["n_query_groups"] = kv
    elif getattr(cfg, "multi_query", False):  # Falcon-7B: one k/v head
        out["n_query_groups"] = Value(1, prefix + "multi_query")
    else:
        out["n_query_groups"] = Value(heads.value, heads.key)
    head_dim = getattr(cfg, "head_dim", None)
    if isinstance(head_dim, int) and head_dim > 0:
        out["head_size"] = val("head_dim")
    size = head_dim if isinstance(head_dim, int) and head_dim > 0 else hidden.value // heads.value
    built = _built_kv_heads(tr, heads.value, size)
    if built is not None and built != out["n_query_groups"].value:
        # a key the class ignores (GPT-NeoX has no grouped-query attention): the built k/v
        out["n_query_groups"] = Value(built, heads.key, "the k/v width transformers builds")
    parallel = getattr(cfg, "use_parallel_residual", None) or getattr(cfg, "parallel_attn", None)
    if parallel is True:
        # GPT-NeoX ``use_parallel_residual``, Falcon ``parallel_attn``: attention and MLP read
        # the same block input (models/gpt_neox/modeling_gpt_neox.py GPTNeoXLayer.forward)
        key = "use_parallel_residual" if hasattr(cfg, "use_parallel_residual") else "parallel_attn"
        out["parallel_residual"] = val(key)
    if len(_block_norms(tr)) == 1 and parallel is not False:
        # one norm in the block feeds both attention and MLP, added to the residual together:
        # Cohere's ``residual + attn + mlp`` after ``input_layernorm`` (models/cohere/
        # modeling_cohere.py CohereDecoderLayer.forward; cohere2 alike), GPT-J's ``ln_1``,
        # Falcon-7B's ``input_layernorm`` (a sequential pre-norm block has two)
        note = "the one norm per block transformers builds"
        out["parallel_residual"] = Value(True, "model_type", note)
        out["shared_attention_norm"] = Value(True, "model_type", note)
    width = _mlp_width(tr, cfg)
    if width:
        out["intermediate_size"] = width
    out["mlp"] = _mlp(cfg, tr, prefix)
    out["norm"] = Value(_norm(tr), "model_type")
    out["tie_embeddings"] = Value(tr.tied, prefix + "tie_word_embeddings")
    out["norm_qk"] = Value(
        any(p.endswith(("q_norm", "k_norm", "q_layernorm")) for p in tr.tree), "model_type"
    )
    if any(p.endswith(".pre_feedforward_layernorm") for p in tr.tree):
        # Gemma 2/3's sandwich: norms on the attention and MLP outputs besides their inputs
        out["post_attention_norm"] = Value(True, "model_type")
        out["post_mlp_norm"] = Value(True, "model_type")
    factor = getattr(cfg, "partial_rotary_factor", None)
    if factor is None and isinstance(getattr(cfg, "rope_parameters", None), Mapping):
        factor = cfg.rope_parameters.get("partial_rotary_factor")
    if isinstance(factor, int | float) and 0 < factor <= 1:
        out["rotary_fraction"] = Value(float(factor), prefix + "partial_rotary_factor")
    rotary_dim = getattr(cfg, "rotary_dim", None)
    if isinstance(rotary_dim, int) and 0 < rotary_dim < size:
        # GPT-J / CodeGen rotate the first ``rotary_dim`` of each head and ``torch.cat`` the
        # rest back (transformers 5.24 models/gptj/modeling_gptj.py lines 146-157)
        out["rotary_fraction"] = Value(rotary_dim / size, prefix + "rotary_dim")
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    slides = not isinstance(types, list) or "sliding_attention" in types
    if isinstance(window, int) and window > 0 and slides:
        out["sliding_window_size"] = val("sliding_window")
        pattern = _pattern(types)
        if pattern:
            out["sliding_window_pattern"] = Value(pattern, prefix + "layer_types")
    for ours, theirs in (
        ("attention_logit_softcapping", "attn_logit_softcapping"),
        ("final_logit_softcapping", "final_logit_softcapping"),
    ):
        cap = getattr(cfg, theirs, None)
        if isinstance(cap, int | float) and cap > 0:
            out[ours] = val(theirs)
    if tr.experts:
        first = tr.experts[0]
        n_key = next((k for k in _N_EXPERT if k in text), "num_experts")
        k_key = next((k for k in _TOP_K if k in text), "num_experts_per_tok")
        out["n_expert"] = Value(first.n_expert, prefix + n_key)
        out["n_expert_per_token"] = Value(first.top_k, prefix + k_key)
    out["architecture"] = Value(str(model_type), "model_type")
    out["hf_config"] = Value(dict(data), "model_type")
    return out


def _first(cfg: Any, *names: str) -> str | None:
    for n in names:
        v = getattr(cfg, n, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return n
    return None


_FUSED_QKV = ("query_key_value", "qkv_proj", "Wqkv", "c_attn", "W_pack")


def _built_kv_heads(tr: Trace, heads: int, size: int) -> int | None:
    """The k/v heads the first layer's k projection (or fused q/k/v projection) is built with,
    when its width says so unambiguously."""
    layer = f"{tr.layers}.0."
    for path, lin in tr.linears.items():
        name = path.rsplit(".", 1)[-1]
        if not path.startswith(layer) or lin.out_features % size:
            continue
        if name == "k_proj":
            kv = lin.out_features // size
        elif name in _FUSED_QKV:
            rest = lin.out_features // size - heads
            kv = rest // 2 if rest > 0 and rest % 2 == 0 else 0
        else:
            continue
        return kv if 0 < kv <= heads and heads % kv == 0 else None
    return None


def _mlp_width(tr: Trace, cfg: Any) -> Value | None:
    """The MLP width one token runs through: the dense MLP's, or for a MoE layer the routed
    experts' ``top_k * width`` plus the shared experts' (what its activations scale with)."""
    if tr.experts:
        e = tr.experts[-1]
        layer = tr.layer_of(e.path)
        shared = sum(
            x.out_features
            for p, x in tr.linears.items()
            if tr.layer_of(p) == layer and "shared_expert" in p and p.endswith(".up_proj")
        )
        return Value(e.top_k * e.width + shared, "num_experts_per_tok * moe_intermediate_size")
    v = getattr(cfg, "intermediate_size", None) or getattr(cfg, "ffn_hidden_size", None)
    built = _built_mlp_width(tr)
    if built is not None and built != v:
        # a key the class ignores (Falcon builds ffn_hidden_size, 4 x hidden by default)
        return Value(built, "model_type", "the MLP width transformers builds")
    if isinstance(v, int) and v > 0:
        return Value(v, "intermediate_size")
    return None


def _built_mlp_width(tr: Trace) -> int | None:
    """The first layer's MLP width: the input of its projection back to the hidden size."""
    layer = f"{tr.layers}.0."
    widths = {
        lin.in_features
        for path, lin in tr.linears.items()
        if path.startswith(layer) and ".mlp." in path and lin.out_features == tr.hidden
    }
    widths.discard(tr.hidden)
    return widths.pop() if len(widths) == 1 else None


def _mlp(cfg: Any, tr: Trace, prefix: str) -> Value:
    act = getattr(cfg, "hidden_act", None) or getattr(cfg, "hidden_activation", None)
    act = act or getattr(cfg, "activation_function", None)  # GPT-J
    gated = bool(tr.experts) or any(
        p.rsplit(".", 1)[-1] in ("gate_proj", "gate_up_proj", "w1", "w3") for p in tr.linears
    )
    name = act if isinstance(act, str) else "gelu"
    kind = ("geglu" if name in _GELU else "swiglu") if gated else "gelu"
    return Value(kind, prefix + "hidden_act")


# Families whose norms are ``CohereLayerNorm``: a bias-free LayerNorm written out op by op in
# fp32 (``hidden_states.to(torch.float32)``, ``variance = (hidden_states - mean).pow(2)...``,
# ``(hidden_states - mean) * torch.rsqrt(...)``, ``self.weight.to(torch.float32) *
# hidden_states``, then the cast; transformers 5.24 models/cohere/modeling_cohere.py lines
# 51-65, the same forward in cohere2, cohere2_moe and cohere_compass), not an RMSNorm
_COHERE_NORM = frozenset({"cohere", "cohere2", "cohere2_moe", "cohere_compass"})


def _norm(tr: Trace) -> str:
    """LayerNorm when a hidden-wide norm of the first layer owns a weight and a bias (GPT-NeoX,
    Falcon, StableLM, StarCoder2); Cohere's fp32 LayerNorm by family (it owns a weight only,
    like an RMSNorm, but keeps other tensors: :data:`_COHERE_NORM`); RMSNorm otherwise."""
    if tr.model_type in _COHERE_NORM:
        return "cohere_layernorm"
    layer = f"{tr.layers}.0."
    norms = [p for p, k in tr.tree.items() if k == "norm" and p.startswith(layer)]
    return "layernorm" if any(tr.params.get(p, 0) == 2 * tr.hidden for p in norms) else "rmsnorm"


def _block_norms(tr: Trace) -> list[str]:
    """The norms the first decoder layer owns directly (not those inside its attention, such
    as q/k norms)."""
    layer = f"{tr.layers}.0."
    return [
        p
        for p, k in tr.tree.items()
        if k == "norm" and p.startswith(layer) and "." not in p[len(layer) :]
    ]


def _pattern(types: Any) -> int | None:
    """N when every N-th layer attends globally and the rest slide (Gemma 3: 6, gpt-oss: 2)."""
    if not isinstance(types, list) or "full_attention" not in types:
        return None
    n = types.index("full_attention") + 1
    expect = [
        "full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(len(types))
    ]
    return n if n > 1 and types == expect else None
