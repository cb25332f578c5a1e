"""Batching: samples of one batch must stack, and batch arithmetic must add up."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.pipeline import Pipeline, round_up
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.schema.trainer import TrainerConfig
from cfgcheck.tokenizer import tokenizer_facts

_RAGGED_ERRORS = (
    '"ValueError: expected sequence of length 4096 at dim 1 (got 3999)" when tensors are '
    'built from the tokenized lists, "RuntimeError: each element in list of batch should be '
    "of equal size\" in torch's default_collate"
)


def _ragged_fixes(cfg: RunConfig) -> tuple[Fix, ...]:
    """Each complete on its own: a pad token is added where the fix pads and none exists."""
    from cfgcheck.rules.sequence import fitting_length
    from cfgcheck.rules.tokens import pad_fix, usable_pad

    d = cfg.data
    facts = tokenizer_facts(cfg.tokenizer)
    pad: tuple[str, ...] | None = ()
    if not usable_pad(facts):
        pad = pad_fix(cfg, cfg.model.rows)
    out: list[Fix] = []
    if cfg.trainer.framework != "hf":  # LitGPT's and torchtune's collates pad by position
        out.append(Fix(("data.collator=padded",), "pad each batch to its longest sample"))
    elif pad is not None:
        out.append(Fix(("data.collator=padded", *pad), "pad each batch to its longest sample"))
    if pad is None:
        return tuple(out)
    length, multiple = d.effective_max_length, d.pad_to_multiple_of
    fits = round_up(length, multiple) <= cfg.model.block_size
    if not fits or (multiple is not None and length % multiple):
        length = fitting_length(cfg)  # a multiple of pad_to_multiple_of within the block
    lengths = (
        ()
        if length == d.effective_max_length
        else (f"data.max_length={length}", f"data.max_seq_length={min(d.max_seq_length, length)}")
    )
    out.append(
        Fix(
            ("data.padding=max_length", "data.truncation=true", *lengths, *pad),
            f"pad every sample to {length} tokens",
        )
    )
    return tuple(out)


@rule("ragged-batch", requires=("model", "tokenizer", "data", "trainer"))
def ragged_batch(cfg: RunConfig) -> Iterator[Problem]:
    """Samples of different lengths reach default_collate with micro_batch_size > 1."""
    d, t = cfg.data, cfg.trainer
    pipe = Pipeline.of(cfg)
    if not pipe.may_be_ragged:
        return
    mbs = t.micro_batch_size
    if d.padding != "max_length":
        why = (
            f"data.padding={d.padding} leaves samples at their own lengths (each sample is its "
            f"own tokenizer call: 'longest' pads it only to itself"
            + (f", rounded up to {d.pad_to_multiple_of}" if d.pad_to_multiple_of else "")
            + ")"
        )
        paths: tuple[str, ...] = ("data.padding", "data.collator", "trainer.micro_batch_size")
    else:
        why = (
            f"data.padding=max_length with data.truncation=false leaves every sample longer "
            f"than {d.effective_max_length} tokens at its own length"
        )
        paths = ("data.truncation", "data.padding", "data.collator", "trainer.micro_batch_size")
    yield Problem(
        "error",
        paths,
        f"{why}, and data.collator=default stacks them as they are, with "
        f"trainer.micro_batch_size={mbs}: the first batch of unequal samples fails with "
        f"{_RAGGED_ERRORS}",
        "set data.collator=padded (pads each batch to its longest sample), or "
        "data.padding=max_length with data.truncation=true",
        _ragged_fixes(cfg),
    )


def keep_global_batch(t: TrainerConfig, devices: int, num_nodes: int) -> tuple[str, ...] | None:
    """The accumulation override that keeps ``global_batch_size`` on a new device count: ``()``
    when nothing needs to change, None when no whole accumulation does it."""
    if t.global_batch_size is None:
        return ()
    per_step = t.micro_batch_size * devices * num_nodes
    if t.global_batch_size % per_step:
        return None
    steps = t.global_batch_size // per_step
    return (
        ()
        if steps == t.gradient_accumulation_steps
        else (f"trainer.gradient_accumulation_steps={steps}",)
    )


def with_devices(t: TrainerConfig, devices: int, num_nodes: int) -> tuple[str, ...]:
    """Overrides for a new device count that keep the global batch (or, when no whole
    accumulation does, that set the global batch to what the run then computes)."""
    out = [f"trainer.devices={devices}"]
    if num_nodes != t.num_nodes:
        out.append(f"trainer.num_nodes={num_nodes}")
    keep = keep_global_batch(t, devices, num_nodes)
    if keep is None:
        total = t.micro_batch_size * t.gradient_accumulation_steps * devices * num_nodes
        keep = (f"trainer.global_batch_size={total}",)
    return (*out, *keep)


def with_micro_batch(t: TrainerConfig, micro_batch_size: int) -> tuple[str, ...]:
    """Overrides for a new micro batch size that keep the samples per optimizer step."""
    steps, rest = divmod(t.effective_batch_size, micro_batch_size * t.world_size)
    out = (f"trainer.micro_batch_size={micro_batch_size}",)
    if rest == 0 and steps != t.gradient_accumulation_steps:
        return (*out, f"trainer.gradient_accumulation_steps={steps}")
    if rest and t.global_batch_size is not None:
        total = micro_batch_size * t.gradient_accumulation_steps * t.world_size
        return (*out, f"trainer.global_batch_size={total}")
    return out


@rule("batch-size-mismatch", requires=("trainer",))
def batch_size_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """global_batch_size must equal micro_batch_size * accumulation * devices * num_nodes."""
    t = cfg.trainer
    if t.global_batch_size is None or t.global_batch_size == t.effective_batch_size:
        return
    per_step = t.micro_batch_size * t.world_size
    fix = (
        f"set trainer.gradient_accumulation_steps={t.global_batch_size // per_step}"
        if t.global_batch_size % per_step == 0
        else f"set trainer.global_batch_size to a multiple of {per_step} "
        f"(micro_batch_size x devices x num_nodes), e.g. {t.effective_batch_size}"
    )
    yield Problem(
        "error",
        (
            "trainer.global_batch_size",
            "trainer.micro_batch_size",
            "trainer.gradient_accumulation_steps",
            "trainer.devices",
            "trainer.num_nodes",
        ),
        f"trainer.global_batch_size={t.global_batch_size} but trainer.micro_batch_size="
        f"{t.micro_batch_size} x gradient_accumulation_steps={t.gradient_accumulation_steps} "
        f"x devices={t.devices} x num_nodes={t.num_nodes} = {t.effective_batch_size}",
        fix,
        fixes=(
            *(
                (
                    Fix(
                        (f"trainer.gradient_accumulation_steps={t.global_batch_size // per_step}",),
                        f"accumulate {t.global_batch_size // per_step} steps to reach "
                        f"{t.global_batch_size}",
                    ),
                )
                if t.global_batch_size % per_step == 0
                else ()
            ),
            Fix(
                (f"trainer.global_batch_size={t.effective_batch_size}",),
                "declare the global batch the settings compute",
            ),
        ),
    )


@rule("strategy-device-count", requires=("trainer",))
def strategy_device_count(cfg: RunConfig) -> Iterator[Problem]:
    """The parallel strategy must fit the number of devices."""
    t = cfg.trainer
    if t.strategy == "single" and t.world_size > 1:
        yield Problem(
            "error",
            ("trainer.strategy", "trainer.devices", "trainer.num_nodes"),
            f"trainer.strategy=single runs on one device but trainer.devices={t.devices} x "
            f"num_nodes={t.num_nodes} = {t.world_size} devices are requested",
            "set trainer.strategy=ddp (or fsdp / zero2 / zero3 to shard memory), "
            "or trainer.devices=1",
            fixes=(
                Fix(("trainer.strategy=ddp",), "data parallel over the devices"),
                Fix(("trainer.strategy=fsdp",), "shard parameters, gradients and optimizer"),
                Fix(with_devices(t, 1, 1), "run on one device"),
            ),
        )
    elif t.strategy != "single" and t.world_size == 1:
        yield Problem(
            "warning",
            ("trainer.strategy", "trainer.devices"),
            f"trainer.strategy={t.strategy} with a single device (devices={t.devices}, "
            f"num_nodes={t.num_nodes}) adds communication setup and shards nothing",
            "set trainer.strategy=single, or raise trainer.devices",
            fixes=(
                Fix(("trainer.strategy=single",), "no distributed strategy on one device"),
                Fix(with_devices(t, 2, t.num_nodes), "run on two devices"),
            ),
        )
