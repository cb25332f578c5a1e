"""Batching: samples of one batch must stack, and batch arithmetic must add up."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig

_RAGGED_ERRORS = (
    '"ValueError: expected sequence of length 4096 at dim 1 (got 3999)" when tensors are '
    'built from the tokenized lists, "RuntimeError: each element in list of batch should be '
    "of equal size\" in torch's default_collate"
)
_RAGGED_FIX = (
    "set data.collator=padded (pads each batch to its longest sample, labels with "
    "data.ignore_index), or data.padding=max_length with data.truncation=true"
)


@rule("ragged-batch", requires=("data", "trainer"))
def ragged_batch(cfg: RunConfig) -> Iterator[Problem]:
    """Samples of different lengths reach default_collate with micro_batch_size > 1."""
    d, t = cfg.data, cfg.trainer
    if t.micro_batch_size == 1 or d.collator != "default":
        return
    mbs = t.micro_batch_size
    if d.padding != "max_length":
        yield Problem(
            "error",
            ("data.padding", "data.collator", "trainer.micro_batch_size"),
            f"data.padding={d.padding} leaves samples of different lengths (padding=True / "
            f"'longest' pads only to the longest sample of each tokenizer call, not to "
            f"max_length) and data.collator=default stacks them as they are, with "
            f"trainer.micro_batch_size={mbs}: the first batch fails with {_RAGGED_ERRORS}",
            _RAGGED_FIX,
        )
        return
    if not d.truncation:
        yield Problem(
            "error",
            ("data.truncation", "data.padding", "trainer.micro_batch_size"),
            f"data.padding=max_length with data.truncation=false leaves every sample longer "
            f"than {d.effective_max_length} tokens at its own length, and "
            f"data.collator=default with trainer.micro_batch_size={mbs} cannot stack them: "
            f"{_RAGGED_ERRORS}",
            "set data.truncation=true, or data.collator=padded",
        )
    if d.effective_max_length > d.max_seq_length:
        yield Problem(
            "error",
            ("data.max_length", "data.max_seq_length"),
            f"data.max_length={d.effective_max_length} is above data.max_seq_length="
            f"{d.max_seq_length}: samples padded to {d.effective_max_length} are cut to "
            f"{d.max_seq_length} only when they are longer, so lengths differ within a batch",
            f"remove data.max_length (it defaults to data.max_seq_length) or set "
            f"data.max_length<={d.max_seq_length}",
        )


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
        )
    elif t.strategy != "single" and t.world_size == 1:
        yield Problem(
            "warning",
            ("trainer.strategy", "trainer.devices"),
            f"trainer.strategy={t.strategy} with a single device (devices={t.devices}, "
            f"num_nodes={t.num_nodes}) adds communication setup and shards nothing",
            "set trainer.strategy=single, or raise trainer.devices",
        )
