"""Memory fixes: config changes that lower the per-GPU estimate, each re-estimated.

Every fix is a complete set of plain ``key=value`` overrides that keeps the rest of the config
consistent: a smaller micro batch raises the gradient accumulation so the global batch stays
the same; more GPUs under FSDP lower the accumulation by the same factor (and are offered only
when the global batch divides); LoRA/QLoRA fixes name a rank. :func:`fixes` keeps the fixes
(or, when no single change is enough, the pairs of changes) whose estimate, with its margin,
fits the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from cfgcheck.memory.estimate import MemoryEstimate, estimate
from cfgcheck.memory.verdict import decide, may_fit, verdict
from cfgcheck.reuse import pinned
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Change:
    overrides: tuple[str, ...]
    update: dict[str, Any]  # TrainerConfig fields
    summary: str


@dataclass(frozen=True)
class MemoryFix:
    overrides: tuple[str, ...]
    summary: str
    total_bytes: int  # per-GPU estimate with the fix
    saved_bytes: int
    fits: bool  # the estimate with its margin fits the budget (True when no budget)

    @property
    def setting(self) -> str:
        return " ".join(self.overrides)


def _smaller_micro_batches(micro: int) -> list[int]:
    """Smaller micro batches that divide ``micro`` (so the global batch stays the same),
    largest first: ``micro / d`` for d up to 64, and 1."""
    found = {micro // d for d in range(2, min(micro, 64) + 1) if micro % d == 0} | {1}
    return sorted((k for k in found if k < micro), reverse=True)


def _changes(t: TrainerConfig) -> list[Change]:
    out: list[Change] = []
    if not t.gradient_checkpointing:
        out.append(
            Change(
                ("trainer.gradient_checkpointing=true",),
                {"gradient_checkpointing": True},
                "gradient checkpointing: keep layer inputs, recompute the rest",
            )
        )
    for micro in _smaller_micro_batches(t.micro_batch_size):
        accum = t.gradient_accumulation_steps * t.micro_batch_size // micro
        out.append(
            Change(
                (
                    f"trainer.micro_batch_size={micro}",
                    f"trainer.gradient_accumulation_steps={accum}",
                ),
                {"micro_batch_size": micro, "gradient_accumulation_steps": accum},
                f"micro batch {micro}, {accum} accumulation steps (same global batch)",
            )
        )
    if t.loss_chunking == "none":
        # transformers: Liger's fused linear + cross-entropy; LitGPT / torchtune chunk the loss
        kind = "fused" if t.framework == "hf" else "chunked"
        out.append(
            Change(
                (f"trainer.loss_chunking={kind}",),
                {"loss_chunking": kind},
                "never hold the full fp32 logits"
                + (" (liger-kernel's fused linear cross-entropy)" if kind == "fused" else ""),
            )
        )
    rank = t.lora.rank or 16
    if t.finetuning == "full":
        out.append(
            Change(
                ("trainer.finetuning=lora", f"trainer.lora.rank={rank}"),
                {"finetuning": "lora", "lora": t.lora.model_copy(update={"rank": rank})},
                f"LoRA rank {rank} instead of full fine-tuning",
            )
        )
    if t.quantization == "none" and t.precision == "bf16-true":
        out.append(
            Change(
                (
                    "trainer.finetuning=qlora",
                    "trainer.quantization=nf4-dq",
                    f"trainer.lora.rank={rank}",
                ),
                {
                    "finetuning": "qlora",
                    "quantization": "nf4-dq",
                    "lora": t.lora.model_copy(update={"rank": rank}),
                },
                f"QLoRA: 4-bit base, LoRA rank {rank}",
            )
        )
    if t.strategy not in ("fsdp", "zero3") and t.num_nodes == 1:
        out += _fsdp(t)
    return out


def _fsdp(t: TrainerConfig) -> list[Change]:
    """FSDP on more GPUs of the node, the accumulation divided so the global batch holds
    (fewest GPUs first)."""
    out: list[Change] = []
    for devices in (2, 4, 8):
        if devices <= t.devices:
            continue
        factor = devices // t.devices if devices % t.devices == 0 else 0
        if not factor or t.gradient_accumulation_steps % factor:
            continue
        accum = t.gradient_accumulation_steps // factor
        overrides = ["trainer.strategy=fsdp", f"trainer.devices={devices}"]
        if accum != t.gradient_accumulation_steps:
            overrides.append(f"trainer.gradient_accumulation_steps={accum}")
        out.append(
            Change(
                tuple(overrides),
                {"strategy": "fsdp", "devices": devices, "gradient_accumulation_steps": accum},
                f"FSDP over {devices} GPUs, {accum} accumulation steps (same global batch)",
            )
        )
    return out


def _merge(a: Change, b: Change) -> Change | None:
    if set(a.update) & set(b.update):
        return None  # both set the same field: not a combination
    return Change(a.overrides + b.overrides, a.update | b.update, f"{a.summary}; {b.summary}")


def fixes(
    m: ModelConfig,
    d: DataConfig,
    t: TrainerConfig,
    budget: int | None = None,
    allowed: Callable[[str], bool] | None = None,
    exact: bool = True,
) -> list[MemoryFix]:
    """Changes that lower the estimate, largest saving first; with ``allowed``, only changes
    whose every override it accepts (the settings the config's format offers).

    With a ``budget`` (bytes), only changes whose estimate with its margin fits are kept; when
    no single change fits, pairs of changes are tried. Of the smaller micro batches the largest
    that fits is kept (without a budget: the smallest).

    "Fits" is the verdict `check` gives the changed run (:func:`cfgcheck.memory.verdict.decide`,
    the allocator simulation's where it covers the run). With ``exact=False`` it is the
    estimate's (:func:`~cfgcheck.memory.verdict.verdict`, no replay): for a caller that checks
    each fix it offers with the rule itself (the gpu-memory rule's fixes are re-checked by
    :mod:`cfgcheck.fixcheck`, which drops a fix whose run still does not fit).
    """
    with pinned():  # the search never changes a section: each is keyed once
        return _search(m, d, t, budget, allowed, exact)


def _search(
    m: ModelConfig,
    d: DataConfig,
    t: TrainerConfig,
    budget: int | None,
    allowed: Callable[[str], bool] | None,
    exact: bool,
) -> list[MemoryFix]:

    # The figures on the GPU (MemoryEstimate.on_gpu), as the gpu-memory finding and `cfgcheck
    # memory` state the peak, so that "saves X (-> Y)" adds up to the peak they quote.
    def on_gpu(e: MemoryEstimate) -> int:
        return (e if budget is None else e.on_gpu(budget)).total_bytes

    base = on_gpu(estimate(m, d, t))
    singles = [c for c in _changes(t) if allowed is None or all(map(allowed, c.overrides))]

    def family(c: Change) -> str:
        if c.overrides[0].startswith("trainer.micro_batch_size="):
            return "micro"
        return "fsdp" if c.overrides[0] == "trainer.strategy=fsdp" else ""

    def evaluate(changes: list[Change], singles: bool = False) -> list[MemoryFix]:
        found = []
        done: set[str] = set()  # families whose kept fix is found (below: the first that fits)
        for c in changes:
            if singles and family(c) in done:
                continue
            changed = t.model_copy(update=c.update)
            e = estimate(m, d, changed)
            total = on_gpu(e)
            if total >= base:
                continue
            # the verdict `check` gives the fixed run (the simulation's where it covers it);
            # no replay for a fix whose allocated peak already rules "fits" out
            fits = budget is None or (
                may_fit(e, budget)
                and (decide(m, d, changed, budget, e).verdict if exact else verdict(e, budget))
                == "fits"
            )
            found.append(MemoryFix(c.overrides, c.summary, total, base - total, fits))
            if fits and budget is not None and family(c):
                done.add(family(c))
        return found

    found = evaluate(singles, singles=True)
    if budget is not None:
        found = [f for f in found if f.fits]
        if not found:
            pairs = [p for a, b in combinations(singles, 2) if (p := _merge(a, b)) is not None]
            found = sorted((f for f in evaluate(pairs) if f.fits), key=lambda f: -f.total_bytes)[:3]
    # one of each family: the largest micro batch that fits (without a budget the smallest),
    # the fewest GPUs that fit
    micro = [f for f in found if f.overrides[0].startswith("trainer.micro_batch_size=")]
    fsdp = [f for f in found if f.overrides[0] == "trainer.strategy=fsdp"]
    rest = [f for f in found if f not in micro and f not in fsdp]
    if micro:
        rest.append(micro[0] if budget is not None else micro[-1])
    if fsdp:
        rest.append(fsdp[0])
    return sorted(rest, key=lambda f: -f.saved_bytes)
