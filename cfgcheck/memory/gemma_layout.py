"""Which Gemma runs :mod:`cfgcheck.memory.gemma_ops` generates op by op (:func:`exact`; the
sources are in its docstring), each block linear's kind, the tensors the multimodal model
builds outside the language model, the :class:`~cfgcheck.memory.layer_ops.Ops` fields of the
layout (Gemma 3's q/k norms, sandwich norms and attention types) and a layer's norms: what
:func:`cfgcheck.memory.events.step_events` reads of the model before the step runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from math import prod
from typing import Any

from cfgcheck.memory.layer_ops import kinds as layer_kinds
from cfgcheck.memory.modules import architecture_of, traced
from cfgcheck.memory.params import Adapted, adapted_modules, block_linears
from cfgcheck.memory.stack import padded_batches
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


GEMMA3 = ("gemma3_text", "gemma3")


def exact(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> bool:
    """The Gemma settings generated op by op (see the module docstring)."""
    arch = architecture_of(m)
    g3 = arch in GEMMA3
    if arch != "gemma" and not g3:  # asked of every simulated run (events.orders)
        return False
    seq = Pipeline.from_data(d).memory_length()
    return (
        not (t.gradient_checkpointing and (kinds(m, t) or {}).get("down_proj") == "lora")
        and t.loss_chunking == "none"
        and t.attention == "sdpa"
        and t.precision in ("bf16-true", "16-true", "32-true")
        and m.norm == "rmsnorm"
        and m.mlp == "geglu"
        and tuple(x.name for x in block_linears(m)) == LINEARS
        and not any(x.bias for x in block_linears(m))
        and m.norm_qk == g3
        and m.post_attention_norm == g3
        and m.post_mlp_norm == g3
        and not m.shared_attention_norm
        and not m.parallel_residual
        and not m.attention_logit_softcapping
        and not m.final_logit_softcapping
        # Gemma 3: a window shorter than the sequence on padded rows (both masks made) or
        # none at all (neither)
        and (
            m.sliding_window_size is None
            if not g3
            else (m.sliding_window_size or 0) >= seq or padded_batches(d, t)
        )
        # Gemma 3 with both attention types, as every published one (one type makes one mask
        # and one table set, not generated)
        and (not g3 or len(type_orders(m)) == 2)
        and d.collator != "packed"
        and (m.rotary_fraction or 1.0) == 1.0
        and m.tie_embeddings
        and kinds(m, t) is not None
    )


def _text_only(m: ModelConfig, t: TrainerConfig) -> Adapted:
    """The adapted linears less those outside the language model (Gemma 3's vision tower,
    matched by the same target names: they run not on a text batch)."""
    a = adapted_modules(m, t.lora.targets, t.framework)
    return replace(a, linears=tuple((x, n) for x, n in a.linears if x.roles))


def kinds(m: ModelConfig, t: TrainerConfig) -> dict[str, str] | None:
    """:func:`cfgcheck.memory.layer_ops.kinds`, the vision tower's adapters of Gemma 3's
    multimodal model aside (built, never given a gradient: :func:`outside_tensors`)."""
    k = layer_kinds(m, t)
    if k is not None or architecture_of(m) != "gemma3" or t.finetuning != "lora":
        return k
    if t.lora.target_parameters or t.precision not in ("bf16-true", "16-true"):
        return None
    a = _text_only(m, t)
    if a.lm_head or a.embedding_rows or any(n not in (0, m.n_layer) for _, n in a.linears):
        return None
    names = {x.name for x, n in a.linears if n}
    return {x: "lora" if x in names else "frozen" for x in LINEARS} if "q_proj" in names else None


def outside_tensors(m: ModelConfig, t: TrainerConfig, master: int, adapter: int) -> list[int]:
    """Bytes of the tensors built outside the language model, which the step never touches:
    Gemma 3's vision tower and projector (every parameter of the meta-device trace outside
    the text model and the lm_head), and PEFT's adapters on the tower's linears."""
    tr = traced(m)
    if tr is None or architecture_of(m) != "gemma3":
        return []
    text = tr.layers.rsplit(".", 1)[0] + "."
    out = [
        prod(shape) * master
        for path, shape in tr.param_shapes.items()
        if not path.startswith(text) and path != (tr.lm_head or "") + ".weight"
    ]
    if t.finetuning == "lora":
        r = t.lora.rank or 0
        a = adapted_modules(m, t.lora.targets, t.framework)
        for x, n in a.linears:
            if not x.roles:
                out += [r * x.in_features * adapter, x.out_features * r * adapter] * n
    return out


def type_orders(m: ModelConfig) -> tuple[tuple[bool, ...], ...]:
    """The orders a process can make Gemma 3's per-type tensors in: ``set(config.layer_types)``
    orders the rotary tables (Gemma3TextModel.forward) and the multimodal model's masks
    (masking_utils ``create_masks_for_generate``), and string hashing decides a set's order
    per process (``PYTHONHASHSEED``, random by default): a run may take either (True: the
    sliding window's first). One order where the layers have one type; none for Gemma."""
    if architecture_of(m) not in GEMMA3:
        return ()
    types = set(_sliding(m))
    return ((True, False), (False, True)) if len(types) == 2 else (tuple(types),)


def process_order(m: ModelConfig) -> tuple[bool, ...]:
    """This process's order of :func:`type_orders` (the tracer's, in the tests)."""
    types = [("sliding_attention" if x else "full_attention") for x in _sliding(m)]
    return tuple(x == "sliding_attention" for x in set(types))


def _sliding(m: ModelConfig) -> tuple[bool, ...]:
    pattern = m.sliding_window_pattern or 6
    return tuple(bool((i + 1) % pattern) for i in range(m.n_layer))


def layout(m: ModelConfig, order: tuple[bool, ...] | None = None) -> dict[str, Any]:
    """The :class:`Ops` fields of a Gemma layout: Gemma 3's q/k norms, sandwich norms, each
    layer's attention type (transformers' ``Gemma3TextConfig.layer_types``: sliding unless
    ``(i + 1) % sliding_window_pattern == 0``), its per-type tensors made in ``order`` (one of
    :func:`type_orders`; None: this process's, :func:`process_order`)."""
    if architecture_of(m) not in GEMMA3:
        return {"gemma": True}
    order = process_order(m) if order is None else order
    return {"gemma": True, "qk_norm": True, "sandwich": True, "sliding": _sliding(m),
            "table_order": order,
            "mask_order": order if architecture_of(m) == "gemma3" else ()}  # fmt: skip


def norm_names(m: ModelConfig) -> tuple[str, ...]:
    """A layer's norms in module order (Gemma 3's q_norm and k_norm apart: their weights
    are not among cfgcheck's parameter tensors)."""
    if architecture_of(m) not in GEMMA3:
        return ("input_layernorm", "post_attention_layernorm")
    return ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
            "post_feedforward_layernorm")  # fmt: skip


def qk_norm_weights(
    alloc: Callable[[int], int], m: ModelConfig, master: int
) -> list[dict[str, tuple[tuple[int, int], ...]]]:
    """Gemma 3's ``q_norm`` and ``k_norm`` weights per layer (``head_dim`` elements each), made
    with the model: (id, bytes) by name; none for Gemma."""
    if architecture_of(m) not in GEMMA3:
        return []
    nb = (m.head_size or m.n_embd // m.n_head) * master
    return [{x: ((alloc(nb), nb),) for x in ("q_norm", "k_norm")} for _ in range(m.n_layer)]
