"""Exact parameter counts from a model shape (no torch, no weights), and LoRA's share.

The layout follows the decoder blocks of transformers and LitGPT (the linears of each
architecture, by their real names, are in :mod:`cfgcheck.memory.modules`): per layer the
attention projections (separate q/k/v/o, or Phi-3's fused qkv_proj: the same count), a gated
(SwiGLU/GeGLU: gate, up, down; Phi-3's fused gate_up_proj) or plain (GELU: fc1, fc2) MLP and
one or two norms, plus Qwen3's per-head q/k norms (``norm_qk``: two ``head_size``-wide norms)
and Gemma 2's post-attention / post-MLP norms; then a final norm, the embedding, GPT-2's
learned position embedding and the lm_head (absent when tied). A norm is a weight (RMSNorm)
or a weight and a bias (LayerNorm). Soft-capping and sliding windows have no parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cfgcheck.memory.modules import (
    DOWN,
    EMBEDDING,
    GATE,
    LINEAR,
    NORM,
    ROLES,
    UP,
    Linear,
    architecture_of,
    block_linears,
    matches_any,
    module_tree,
    roles_of,
    traced,
)
from cfgcheck.memory.traced import PEFT_MOE_NAMES, Trace
from cfgcheck.reuse import derived
from cfgcheck.schema.model import ModelConfig

T = TypeVar("T")

__all__ = ["Linear", "ParamCount", "block_linears", "count_params", "lora_params"]


def norm_params(m: ModelConfig, width: int | None = None) -> int:
    """Parameters of one norm over ``width`` (default: hidden) features: a weight, plus a bias
    for LayerNorm."""
    return (width or m.n_embd) * (2 if m.norm == "layernorm" else 1)


def norms_per_block(m: ModelConfig) -> int:
    """Hidden-wide norms of one block: input norm(s) plus Gemma 2's post norms."""
    base = 1 if m.shared_attention_norm else 2
    return base + int(m.post_attention_norm) + int(m.post_mlp_norm)


def block_norm_params(m: ModelConfig) -> int:
    """All norm parameters of one block (Qwen3's head_size-wide q/k norms included)."""
    qk = 2 * norm_params(m, m.head_dim) if m.norm_qk else 0
    return norms_per_block(m) * norm_params(m) + qk


@dataclass(frozen=True)
class ParamCount:
    """Parameters by place; ``total`` is what ``sum(p.numel() for p in model.parameters())``
    returns for the transformers model of the same shape."""

    embedding: int
    lm_head: int
    block_linear: int
    block_linear_weight_elems: int
    block_norms: int
    final_norm: int
    n_layer: int
    position_embedding: int = 0  # GPT-2's learned positions (wpe); RoPE models have none
    # A traced architecture (memory/traced.py): the parameters outside the uniform
    # linears-and-norms layout of the fields above (routed experts, routers, attention sinks,
    # layers that differ from the average, a vision tower), of which ``expert`` are the routed
    # experts' and ``active_expert`` those one token runs through.
    other: int = 0
    expert: int = 0
    active_expert: int = 0

    @property
    def per_block(self) -> int:
        return self.block_linear + self.block_norms + self.other // max(self.n_layer, 1)

    @property
    def active(self) -> int:
        """Parameters one token runs through (the total for a dense model)."""
        return self.total - self.expert + self.active_expert

    @property
    def blocks(self) -> int:
        return (self.block_linear + self.block_norms) * self.n_layer + self.other

    @property
    def total(self) -> int:
        embeddings = self.embedding + self.position_embedding
        return embeddings + self.lm_head + self.blocks + self.final_norm

    @property
    def linear_weights(self) -> int:
        """Elements of the block linear weight matrices (what 4/8-bit quantization stores)."""
        return self.block_linear_weight_elems * self.n_layer

    @property
    def unquantized(self) -> int:
        """Parameters that stay in the compute dtype when the block linears are quantized:
        embeddings, lm_head, norms and biases."""
        return self.total - self.linear_weights


def count_params(m: ModelConfig) -> ParamCount:
    """Exact parameter count of a model shape."""
    return derived("count_params", m, (), lambda: _count_params(m))


def _count_params(m: ModelConfig) -> ParamCount:
    tr = traced(m)
    if tr is not None:
        return _memo(("count", id(tr)), tr, lambda: _traced_count(tr))
    linears = block_linears(m)
    tied = m.tie_embeddings and m.head == "causal_lm"  # a classification score is its own
    head = 0 if tied else m.head_rows * m.n_embd + (m.head_rows if m.head_bias else 0)
    positions = m.block_size * m.n_embd if architecture_of(m) == "gpt2" else 0
    return ParamCount(
        embedding=m.rows * m.n_embd,
        lm_head=head,
        block_linear=sum(x.params for x in linears),
        block_linear_weight_elems=sum(x.in_features * x.out_features for x in linears),
        block_norms=block_norm_params(m),
        final_norm=norm_params(m),
        n_layer=m.n_layer,
        position_embedding=positions,
    )


_MEMO: dict[tuple[object, ...], tuple[Trace, Any]] = {}


def _memo(key: tuple[object, ...], tr: Trace, make: Callable[[], T]) -> T:
    """A traced model's derived counts, computed once per trace (the estimate and the fix
    search ask for them hundreds of times); the entry holds the trace, so its id stays its."""
    hit = _MEMO.get(key)
    if hit is None or hit[0] is not tr:
        if len(_MEMO) >= 512:
            _MEMO.clear()
        hit = _MEMO[key] = (tr, make())
    result: T = hit[1]
    return result


def _traced_count(tr: Trace) -> ParamCount:
    """The trace's counts in the fields above: the decoder layers' linears and norms averaged
    (floor) over the layers, everything else of the layers in ``other``, the lm_head and the
    final norm outside them; ``total`` is the meta model's exact sum."""
    n = max(tr.n_layer, 1)
    in_layers = [p for p in tr.params if tr.layer_of(p) is not None]
    linear = sum(tr.params[p] for p in in_layers if tr.tree.get(p) == LINEAR)
    weights = sum(
        x.in_features * x.out_features for p, x in tr.linears.items() if tr.layer_of(p) is not None
    )
    norms = sum(tr.params[p] for p in in_layers if tr.tree.get(p) == NORM)
    embedding = tr.rows * tr.hidden
    head = 0 if tr.tied or tr.lm_head is None else tr.params.get(tr.lm_head, 0)
    final = sum(
        n_ for p, n_ in tr.params.items() if tr.layer_of(p) is None and tr.tree.get(p) == NORM
    )
    blocks = linear // n * n + norms // n * n
    other = tr.total - embedding - head - final - blocks
    return ParamCount(
        embedding=embedding,
        lm_head=head,
        block_linear=linear // n,
        block_linear_weight_elems=weights // n,
        block_norms=norms // n,
        final_norm=final,
        n_layer=tr.n_layer,
        other=other,
        expert=tr.expert_params,
        active_expert=sum(e.active for e in tr.experts),
    )


ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class Adapted:
    """What a LoRA target list adapts: each block linear with the number of layers in which
    it gets an adapter, whether the lm_head gets one, and the rows of each adapted embedding
    (the token embedding; GPT-2's position embedding ``wpe`` has ``block_size`` rows)."""

    linears: tuple[tuple[Linear, int], ...]
    lm_head: bool
    embedding_rows: tuple[int, ...] = ()
    # LoRA on parameters (PEFT's target_parameters, converted from MoE expert names): the
    # trainable parameters per rank unit, and the parameter names adapted
    param_adapters: int = 0
    param_names: frozenset[str] = frozenset()
    # the MoE layers whose expert parameters are adapted (None: every one)
    param_layers: int | None = None

    @property
    def embedding(self) -> bool:
        return bool(self.embedding_rows)

    @property
    def names(self) -> frozenset[str]:
        """Names of the block linears adapted in at least one layer (plus ``lm_head``)."""
        names = {x.name for x, n in self.linears if n}
        return frozenset(names | ({"lm_head"} if self.lm_head else set()))


def is_all_linear(targets: list[str]) -> bool:
    """``[all-linear]``: PEFT's shorthand (compared lower-cased, as PEFT does), passed to
    PEFT as the string ``"all-linear"``."""
    return len(targets) == 1 and targets[0].lower() == ALL_LINEAR


def _by_roles(m: ModelConfig, targets: list[str], framework: str) -> Adapted:
    """LitGPT switches, or any known name for a shape of unknown architecture, by role."""
    roles: set[str] = set(ROLES) if is_all_linear(targets) else set()
    for t in targets:
        roles.update(roles_of(t, framework))
    picked = tuple((x, m.n_layer if roles & set(x.roles) else 0) for x in block_linears(m))
    moe = _litgpt_moe_adapters(m) if framework == "litgpt" and {GATE, UP, DOWN} & roles else 0
    rows = (m.rows,) if "embed_tokens" in roles else ()
    return Adapted(picked, "lm_head" in roles, rows, param_adapters=moe)


def _litgpt_moe_adapters(m: ModelConfig) -> int:
    """LitGPT's LoRA on a mixture-of-experts MLP (Lightning-AI/litgpt 0.5.13, litgpt/lora.py
    ``LLaMAMoE``): with ``lora_mlp`` the router ``gate`` is a ``LoRALinear`` (hidden ->
    n_expert) and every expert a LoRA ``LLaMAMLP`` (``fc_1``, ``fc_2``: hidden -> expert width,
    ``proj`` back), each ``r * (in + out)``; per unit of rank, over the MoE layers."""
    if not m.n_expert:
        return 0
    tr = traced(m)
    h = m.n_embd
    if tr is not None and tr.experts:
        return sum(h + e.n_expert + 3 * e.n_expert * (h + e.width) for e in tr.experts)
    k = m.n_expert_per_token or 1
    return m.n_layer * (h + m.n_expert + 3 * m.n_expert * (h + m.mlp_width // k))


def adapted_modules(
    m: ModelConfig, targets: list[str], framework: str = "hf", parameters: Sequence[str] = ()
) -> Adapted:
    """The modules ``trainer.lora.targets`` adapts, as the framework resolves the names.

    ``hf`` (PEFT): an entry matches a module whose path equals it or ends with ``"." +`` it
    (:func:`cfgcheck.memory.modules.matches`); ``[all-linear]`` adapts every block linear and
    not the lm_head (PEFT's ``_maybe_include_all_linear_layers`` drops the output embedding).
    ``litgpt``: entries are LoRA switches (``query`` ... ``head``, ``LITGPT_SWITCHES``) or any
    name of ``NAME_ROLES``, by the projections it stands for; so is a shape whose architecture
    cfgcheck does not know (both in :mod:`cfgcheck.memory.modules`).
    ``parameters``: PEFT's ``target_parameters`` (:func:`matched_parameters`), read on the
    traced model only (a hand-written shape has no parameter names).
    """
    # a function of the model's contents and the arguments: the estimate asks ~10 times
    args = (tuple(targets), framework, tuple(parameters))
    return derived("adapted", m, args, lambda: _adapted_modules(m, targets, framework, parameters))


def _adapted_modules(
    m: ModelConfig, targets: list[str], framework: str, parameters: Sequence[str]
) -> Adapted:
    tr = traced(m)
    if tr is not None and framework == "hf":
        # the block's linears read one field of the model beside the trace (block_linears)
        key = ("adapted", id(tr), m.shared_attention_norm, tuple(targets), tuple(parameters))
        return _memo(key, tr, lambda: _traced_adapted(m, tr, targets, tuple(parameters)))
    # One layer's tree names every module kind (embeddings are outside the layers).
    tree = module_tree(m.model_copy(update={"n_layer": 1})) if framework == "hf" else None
    if tree is None:
        return _by_roles(m, targets, framework)
    linears = block_linears(m)
    if is_all_linear(targets):
        return Adapted(tuple((x, m.n_layer) for x in linears), False)
    layers = "transformer.h" if architecture_of(m) == "gpt2" else "model.layers"
    wanted = frozenset(targets)
    # An entry without a digit matches a block's module in every layer or in none.
    per_layer = any(c.isdigit() for t in targets for c in t)
    n = m.n_layer if per_layer else 1
    counts = []
    for x in linears:
        hits = sum(matches_any(f"{layers}.{i}.{x.path}", wanted) for i in range(n))
        counts.append((x, hits if per_layer else hits * m.n_layer))
    rows = tuple(
        m.block_size if path.endswith(".wpe") else m.rows
        for path, kind in tree.items()
        if kind == EMBEDDING and matches_any(path, wanted)
    )
    return Adapted(tuple(counts), "lm_head" in wanted, rows)


def _traced_adapted(
    m: ModelConfig, tr: Trace, targets: list[str], parameters: tuple[str, ...] = ()
) -> Adapted:
    """PEFT's matching on the traced model's own paths: each adapted linear of the
    representative block with the number of layers that adapt it (by its path inside the
    block), the lm_head, the embeddings."""
    every = is_all_linear(targets)
    per_rank, params = _moe_param_adapters(tr, targets)
    more, names = _explicit_param_adapters(tr, parameters, params)
    layers = None if params else _expert_layers(tr, parameters)
    per_rank, params = per_rank + more, params | names
    converted = PEFT_MOE_NAMES.get(tr.peft_moe or "", {})
    if every and converted:  # PEFT resolves all-linear to leaf names, then converts
        leaves = {p.rsplit(".", 1)[-1] for p in tr.linears if p != tr.lm_head}
        wanted, every = frozenset(leaves - set(converted)), False
    else:
        wanted = frozenset(t for t in targets if t not in converted)
    counts: dict[str, int] = {}
    head = False
    for path in tr.linears:
        if path == tr.lm_head:
            head = not every and matches_any(path, wanted)
            continue
        if every or matches_any(path, wanted):
            layer = tr.layer_of(path)
            inner = path if layer is None else path[len(f"{tr.layers}.{layer}.") :]
            counts[inner] = counts.get(inner, 0) + 1
    block = {x.path: x for x in block_linears(m)}
    picked = [(x, counts.pop(x.path, 0)) for x in block.values()]
    # adapted linears outside the representative block (a dense layer's MLP, a vision tower)
    for inner, n in counts.items():
        x = next(tr.linears[p] for p in tr.linears if p.endswith("." + inner) or p == inner)
        name = inner.rsplit(".", 1)[-1]
        picked.append((Linear(name, x.in_features, x.out_features, x.bias, "mlp_in", inner), n))
    rows = tuple(
        tr.rows
        for path, kind in tr.tree.items()
        if kind == EMBEDDING and not every and matches_any(path, wanted)
    )
    return Adapted(tuple(picked), head, rows, per_rank, params, layers)


def _moe_param_adapters(tr: Trace, targets: list[str]) -> tuple[int, frozenset[str]]:
    """PEFT's conversion of transformers-4 expert names (:data:`PEFT_MOE_NAMES`): the LoRA
    parameters per unit of rank of the expert and router parameters it adapts. A 3D expert
    parameter ``(E, a, b)`` gets ``lora_A`` (in x r*E) and ``lora_B`` (r*E x out), the fused
    gate_up_proj twice the rank (peft/tuners/lora/layer.py, ``ParamWrapper.update_layer``);
    the router's 2D weight ``(E, hidden)`` one ordinary adapter."""
    if tr.peft_moe is None:
        return 0, frozenset()
    names = PEFT_MOE_NAMES[tr.peft_moe]
    hit = set(names) if is_all_linear(targets) else {t for t in targets if t in names}
    params = frozenset(names[t] for t in hit)
    total = 0
    for e in tr.experts:
        if "gate_up_proj" in params:
            total += 2 * e.n_expert * (tr.hidden + 2 * e.width)
        if "down_proj" in params:
            total += e.n_expert * (tr.hidden + e.width)
        if "gate.weight" in params:
            total += tr.hidden + e.n_expert
    return total, params


def matches_parameter(key: str, names: Sequence[str]) -> bool:
    """PEFT's ``target_parameters`` rule (peft 0.21, peft/tuners/tuners_utils.py
    ``BaseTuner._inject_parameters``): a parameter's full name ``f"{module}.{param}"`` equals
    an entry or ends with ``"." +`` it, so ``7.mlp.experts.gate_up_proj`` is layer 7's and
    ``mlp.experts.gate_up_proj`` every layer's."""
    return any(key == t or key.endswith("." + t) for t in names)


def matched_parameters(tr: Trace, names: Sequence[str]) -> Mapping[str, tuple[int, ...]]:
    """The traced model's parameters (full name -> shape) that ``names`` adapt."""
    return {k: v for k, v in tr.param_shapes.items() if matches_parameter(k, names)}


def unmatched_parameters(tr: Trace, names: Sequence[str]) -> list[str]:
    """Entries of ``target_parameters`` that match no parameter of the traced model."""
    return [t for t in names if not matched_parameters(tr, [t])]


def _explicit_param_adapters(
    tr: Trace, parameters: tuple[str, ...], converted: frozenset[str] = frozenset()
) -> tuple[int, frozenset[str]]:
    """LoRA parameters per unit of rank of PEFT's ``target_parameters``: ``lora.ParamWrapper``
    (peft/tuners/lora/layer.py 0.21 ``ParamWrapper.update_layer``) gives a parameter of shape
    ``(E, a, b)`` ``lora_A`` of ``(r * E, in)`` and ``lora_B`` of ``(out, r * E)`` with
    ``{in, out} = {a, b}``: ``r * E * (a + b)`` (a 2D parameter ``E = 1``), at the rank as
    given (no doubling: that is the conversion of transformers-4 names only). Checked with
    get_peft_model on tiny gpt-oss and Qwen3-MoE models (tests/test_lora_target_parameters.py).
    A parameter the conversion of ``target_modules`` already adapts (``converted``: PEFT adds
    those names to the same set, peft/utils/transformers_weight_conversion.py, and wraps each
    parameter once) is not counted twice. Also the short names the activation model keys on
    (``gate_up_proj``, ``down_proj``, ``gate.weight``)."""
    if not parameters:
        return 0, frozenset()
    total, names = 0, set()
    for key, shape in matched_parameters(tr, parameters).items():
        if len(shape) < 2 or matches_parameter(key, sorted(converted)):
            continue  # a 1D parameter (a bias) is not modelled
        experts = shape[0] if len(shape) == 3 else 1
        total += experts * (shape[-2] + shape[-1])
        module, _, param = key.rpartition(".")
        leaf = module.rpartition(".")[2]
        names.add(param if len(shape) == 3 else f"{'gate' if leaf == 'router' else leaf}.{param}")
    return total, frozenset(names)


def _expert_layers(tr: Trace, parameters: tuple[str, ...]) -> int:
    """The MoE layers in which ``target_parameters`` adapt a fused expert parameter."""
    hit = {
        e.path
        for e in tr.experts
        for k in matched_parameters(tr, parameters)
        if k.startswith(e.path + ".")
    }
    return len(hit)


def lora_params(
    m: ModelConfig,
    rank: int,
    targets: list[str],
    framework: str = "hf",
    parameters: Sequence[str] = (),
) -> int:
    """Trainable LoRA parameters: ``rank * (in + out)`` per adapted linear (a fused projection
    gets one adapter), the lm_head and the token embedding included when targeted, and the
    parameters ``target_parameters`` adapts (:func:`_explicit_param_adapters`)."""
    args = (rank, tuple(targets), framework, tuple(parameters))
    return derived("lora", m, args, lambda: _lora_params(m, rank, targets, framework, parameters))


def _lora_params(
    m: ModelConfig, rank: int, targets: list[str], framework: str, parameters: Sequence[str]
) -> int:
    adapted = adapted_modules(m, targets, framework, parameters)
    total = sum(rank * (x.in_features + x.out_features) * n for x, n in adapted.linears)
    if adapted.lm_head:
        total += rank * (m.n_embd + m.head_rows)
    total += sum(rank * (m.n_embd + rows) for rows in adapted.embedding_rows)
    return total + rank * adapted.param_adapters
