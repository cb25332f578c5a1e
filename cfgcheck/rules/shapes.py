"""Model shape: head and group divisibility, rotary dimensions."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig


@rule("head-size-mismatch", requires=("model",))
def head_size_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """n_embd must divide into n_head heads when head_size is derived."""
    m = cfg.model
    if "head_size" in m.model_fields_set or m.n_embd % m.n_head == 0:
        return
    yield Problem(
        "error",
        ("model.n_embd", "model.n_head"),
        f"model.n_embd={m.n_embd} is not divisible by model.n_head={m.n_head}, so the "
        f"head size n_embd/n_head={m.n_embd / m.n_head:g} is not whole and the q/k/v "
        f"projections cannot be split into heads",
        f"choose n_head among the divisors of {m.n_embd}, or set model.head_size explicitly",
    )


@rule("query-groups-mismatch", requires=("model",))
def query_groups_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """n_head must be a multiple of n_query_groups (grouped-query attention)."""
    m = cfg.model
    if m.n_head % m.kv_heads == 0:
        return
    yield Problem(
        "error",
        ("model.n_head", "model.n_query_groups"),
        f"model.n_head={m.n_head} is not a multiple of model.n_query_groups={m.kv_heads}: "
        f"grouped-query attention repeats each key/value head n_head/n_query_groups times",
        f"set model.n_query_groups to a divisor of {m.n_head} (1 = multi-query, "
        f"{m.n_head} = multi-head)",
    )


@rule("rotary-dims-odd", requires=("model",))
def rotary_dims_odd(cfg: RunConfig) -> Iterator[Problem]:
    """RoPE rotates dimension pairs, so head_size * rotary_fraction must be a whole even number."""
    m = cfg.model
    rope = m.head_dim * m.rotary_fraction
    if rope == int(rope) and int(rope) % 2 == 0:
        return
    yield Problem(
        "error",
        ("model.head_size", "model.rotary_fraction"),
        f"model.head_size={m.head_dim} x model.rotary_fraction={m.rotary_fraction} = "
        f"{rope:g} rotary dimensions; RoPE needs a whole, even number",
        "pick a rotary_fraction that gives an even number of dimensions "
        f"(e.g. {2 * max(1, round(rope / 2)) / m.head_dim:g})",
    )
