"""Model shape: head and group divisibility, rotary dimensions."""

from __future__ import annotations

import math
from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig

# transformers 5 (checked by building each model with hidden_size=30, 4 heads, head_dim=8, see
# tests/crash/test_crash_head_size.py): these model_types take an explicit head_dim whatever
# hidden_size % num_attention_heads is ...
HF_EXPLICIT_HEAD_DIM: frozenset[str] = frozenset(
    {
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "olmo",
        "olmo2",
        "granite",
        "phi",
        "phi3",
        "starcoder2",
        "cohere",
    }
)
# ... these refuse it: LlamaConfig.validate_architecture (models/llama/configuration_llama.py)
# raises "The hidden size (30) is not a multiple of the number of attention heads (4).", as do
# Gemma 2/3 and GPT-NeoX; StableLM and GPT-2 check it in their attention modules.
HF_REFUSES: frozenset[str] = frozenset(
    {"llama", "gemma2", "gemma3_text", "gpt_neox", "stablelm", "gpt2", "falcon"}
)


def hf_architecture(cfg: RunConfig) -> str:
    """The transformers model_type that runs the shape: ``model.architecture``, else the one
    cfgcheck.memory.hf_shapes builds for the layout (GeGLU: gemma, gelu: phi, q/k/v bias
    only: qwen2, else llama)."""
    m = cfg.model
    if m.architecture:
        return m.architecture
    if m.mlp == "geglu":
        return "gemma"
    if m.mlp == "gelu":
        return "phi"
    return "qwen2" if m.attn_bias and not m.bias else "llama"


def _divisor_fix(cfg: RunConfig) -> tuple[Fix, ...]:
    """model.n_head (and n_query_groups) set to the divisor of n_embd nearest to n_head."""
    m = cfg.model
    divisors = [h for h in range(1, m.n_embd + 1) if m.n_embd % h == 0]
    best = min(divisors, key=lambda h: (abs(h - m.n_head), -h))
    over = [f"model.n_head={best}"]
    if best % m.kv_heads:
        over.append(f"model.n_query_groups={best}")
    if "head_size" not in m.model_fields_set:
        return (Fix(tuple(over), f"{best} heads of {m.n_embd // best}"),)
    return (Fix(tuple(over), f"{best} heads, model.head_size={m.head_dim} kept"),)


@rule("head-size-mismatch", requires=("model", "trainer"))
def head_size_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """n_embd must divide into n_head heads when head_size is derived (and, for some
    frameworks and architectures, even when head_size is given)."""
    m = cfg.model
    if m.n_embd % m.n_head == 0:
        return
    ratio = f"model.n_embd={m.n_embd} is not divisible by model.n_head={m.n_head}"
    fix = f"choose n_head among the divisors of {m.n_embd}"
    if "head_size" not in m.model_fields_set:
        yield Problem(
            "error",
            ("model.n_embd", "model.n_head"),
            f"{ratio}, so the head size n_embd/n_head={m.n_embd / m.n_head:g} is not whole "
            f"and the q/k/v projections cannot be split into heads (LitGPT's Config asserts "
            f"n_embd % n_head == 0 when head_size is not given)",
            f"{fix}, or set model.head_size explicitly",
            _divisor_fix(cfg),
        )
        return
    framework = cfg.trainer.framework
    if framework == "litgpt":
        # litgpt/config.py: the assert runs only when head_size is None; litgpt/model.py
        # sizes qkv as (n_head + 2 * n_query_groups) * head_size and proj as
        # head_size * n_head -> n_embd, so any explicit head_size builds and trains.
        return
    if framework == "torchtune":
        yield Problem(
            "warning",
            ("model.head_size", "model.n_embd", "model.n_head", "trainer.framework"),
            f"{ratio} with an explicit model.head_size={m.head_dim}: LitGPT builds this, but "
            f"torchtune's llama/mistral/qwen2 builders derive head_dim = embed_dim // "
            f"num_heads ({m.n_embd // m.n_head}) and ignore model.head_size (its gemma and "
            f"qwen3 builders take head_dim)",
            fix,
            _divisor_fix(cfg),
        )
        return
    arch = hf_architecture(cfg)
    if arch in HF_EXPLICIT_HEAD_DIM:
        return
    known = arch in HF_REFUSES
    yield Problem(
        "error" if known else "warning",
        ("model.head_size", "model.n_embd", "model.n_head", "trainer.framework"),
        f"{ratio} with an explicit model.head_size={m.head_dim}: with trainer.framework=hf "
        + (
            f"transformers' {arch} config refuses it (\"ValueError: The hidden size "
            f'({m.n_embd}) is not a multiple of the number of attention heads ({m.n_head})."); '
            if known
            else f"it is not known whether transformers' {arch} accepts it; "
        )
        + "LitGPT (trainer.framework=litgpt) builds it, as do transformers' mistral, qwen2, "
        "qwen3, gemma, phi3 and olmo",
        f"{fix}, or run it with LitGPT (trainer.framework=litgpt)",
        _divisor_fix(cfg),
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
        tuple(
            Fix((f"model.n_query_groups={g}",), f"{g} key/value heads")
            for g in _nearest_divisors(m.n_head, m.kv_heads)
        ),
    )


def _nearest_divisors(n: int, near: int) -> list[int]:
    """The divisors of ``n`` just below and just above ``near``."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    below = [d for d in divisors if d < near][-1:]
    above = [d for d in divisors if d > near][:1]
    return below + above


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
        tuple(
            Fix((f"model.rotary_fraction={f!r}",), f"rotate {round(f * m.head_dim)} dimensions")
            for f in dict.fromkeys((2 * max(1, round(rope / 2)) / m.head_dim, 1.0))
        ),
    )


@rule("expert-parallel-mismatch", requires=("model", "trainer"))
def expert_parallel_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """trainer.expert_parallel_size divides the world size and the number of experts, and the
    model has routed experts to split."""
    m, t = cfg.model, cfg.trainer
    ep = t.expert_parallel_size
    if ep == 1:
        return
    if t.world_size % ep:
        # axolotl-ai-cloud/axolotl@067b021c src/axolotl/utils/distributed.py
        # _get_parallel_config_kwargs; hiyouga/LLaMA-Factory@ff6d4d12 src/llamafactory/v1/
        # plugins/trainer_plugins/distributed/fsdpturbo.py FSDPTurboParallelState.initialize
        yield Problem(
            "error",
            ("trainer.expert_parallel_size", "trainer.devices", "trainer.num_nodes"),
            f"trainer.expert_parallel_size={ep} does not divide the world size "
            f"({t.world_size} GPUs): Axolotl raises 'ValueError: expert_parallel_size ({ep}) "
            f"must divide world_size ({t.world_size}).', LLaMA-Factory's fsdpturbo 'dp_size "
            f"must be divisible by ep_size, got {t.world_size} % {ep} != 0.'",
            f"set trainer.expert_parallel_size to a divisor of {t.world_size}, or run on a "
            f"multiple of {ep} GPUs",
            tuple(
                Fix((f"trainer.expert_parallel_size={d}",), f"{d} expert-parallel ranks")
                for d in _nearest_divisors(t.world_size, ep)
            ),
        )
    if not m.n_expert:
        # Axolotl expert_parallel/plugin.py post_model_build: "no Experts modules were
        # detected for sharding ... DeepEP dispatch/combine will run as a no-op."
        yield Problem(
            "warning",
            ("trainer.expert_parallel_size", "model.n_expert"),
            f"trainer.expert_parallel_size={ep} on a dense model: there are no routed experts "
            "to split (Axolotl warns that DeepEP dispatch/combine will run as a no-op); every "
            "GPU holds the whole model",
            "set trainer.expert_parallel_size=1",
            (Fix(("trainer.expert_parallel_size=1",), "no expert parallelism"),),
        )
    elif m.n_expert % ep:
        # axolotl expert_parallel/shard.py shard_expert_weights
        yield Problem(
            "error",
            ("trainer.expert_parallel_size", "model.n_expert"),
            f"trainer.expert_parallel_size={ep} does not divide the {m.n_expert} experts: "
            f"Axolotl raises 'ValueError: Expert module ...: num_experts={m.n_expert} not "
            f"divisible by ep_size={ep}. Adjust the model config or ep_size.' when it slices "
            "the experts",
            f"set trainer.expert_parallel_size to a divisor of {m.n_expert}",
            tuple(  # the common divisors of the experts and the GPUs nearest ep
                Fix((f"trainer.expert_parallel_size={d}",), f"{m.n_expert // d} experts a GPU")
                for d in _nearest_divisors(math.gcd(m.n_expert, t.world_size), ep)
                if d > 1
            ),
        )
