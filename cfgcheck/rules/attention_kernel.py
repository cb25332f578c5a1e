"""The attention kernel the architecture's transformers class can run.

Gemma 2 soft-caps its attention scores (``attention_logit_softcapping``); transformers'
``Gemma2PreTrainedModel`` sets ``_supports_sdpa = False`` (``models/gemma2/modeling_gemma2.py``),
so asking for ``attn_implementation="sdpa"`` raises ``ValueError: Gemma2ForCausalLM does not
support an attention implementation through torch.nn.functional.scaled_dot_product_attention
yet.`` (``modeling_utils.py``); eager and FlashAttention-2 (with its ``softcap`` argument) run
it. LitGPT computes soft-capped attention itself, so only ``trainer.framework=hf`` is affected.
"""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.memory import devices
from cfgcheck.memory.estimate import estimate
from cfgcheck.memory.modules import architecture_of, traced
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig

NO_SDPA = frozenset({"gemma2"})  # of the architectures cfgcheck builds


def _fits(cfg: RunConfig, **changes: object) -> bool:
    """Whether the estimate with ``changes`` to the trainer fits the GPU (True when no GPU is
    known: gpu-memory cannot fail then)."""
    t = cfg.trainer.model_copy(update=changes)
    try:
        avail = devices.available(t.gpu, t.devices)
    except devices.UnknownGpuError:
        return True
    if avail is None:
        return True
    return estimate(cfg.model, cfg.data, t).total_bytes <= avail.bytes


@rule("attention-unsupported", requires=("model", "data", "trainer"))
def attention_unsupported(cfg: RunConfig) -> Iterator[Problem]:
    """The architecture's transformers class must implement trainer.attention."""
    m, t = cfg.model, cfg.trainer
    arch = architecture_of(m)
    if t.framework != "hf" or t.attention != "sdpa":
        return
    tr = traced(m) if arch not in NO_SDPA else None
    if arch not in NO_SDPA and (tr is None or tr.supports_sdpa):
        return
    candidates: list[tuple[tuple[str, ...], dict[str, object], str]] = [
        (("trainer.attention=eager",), {"attention": "eager"}, "eager attention"),
        (
            ("trainer.attention=eager", "trainer.gradient_checkpointing=true"),
            {"attention": "eager", "gradient_checkpointing": True},
            "eager attention with gradient checkpointing",
        ),
    ]
    fixes = tuple(
        Fix(overrides, summary)
        for overrides, changes, summary in candidates
        if _fits(cfg, **changes)
    )[:1]
    hint = (
        "set trainer.attention=eager (transformers' recommendation for Gemma 2 training; it "
        "keeps the seq x seq scores, so it needs more memory), or trainer.attention=flash "
        "with flash-attn >= 2.6 (soft-capping support) on an Ampere or newer GPU"
    )
    if not fixes:
        hint += "; eager attention does not fit this GPU even with gradient checkpointing"
    if tr is not None:  # a traced class without an sdpa path (gpt-oss: its attention sinks)
        yield Problem(
            "error",
            ("trainer.attention", "model.architecture"),
            f"trainer.attention=sdpa but transformers' {tr.cls} has no sdpa path "
            f'(_supports_sdpa = False): from_pretrained raises "ValueError: {tr.cls} does not '
            f"support an attention implementation through "
            f'torch.nn.functional.scaled_dot_product_attention yet."',
            "set trainer.attention=eager (it keeps the seq x seq scores: more memory), or "
            "trainer.attention=flash where the architecture supports it",
            fixes=fixes,
        )
        return
    yield Problem(
        "error",
        ("trainer.attention", "model.architecture"),
        f"trainer.attention=sdpa but {m.name} (architecture {arch}) soft-caps its attention "
        f"scores and transformers has no sdpa path for it: from_pretrained raises "
        f'"ValueError: Gemma2ForCausalLM does not support an attention implementation '
        f'through torch.nn.functional.scaled_dot_product_attention yet."',
        hint,
        fixes=fixes,
    )
