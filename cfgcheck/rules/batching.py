"""Batching: samples of one batch must stack, and batch arithmetic must add up."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.pipeline import Pipeline
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts

_RAGGED_ERRORS = (
    '"ValueError: expected sequence of length 4096 at dim 1 (got 3999)" when tensors are '
    'built from the tokenized lists, "RuntimeError: each element in list of batch should be '
    "of equal size\" in torch's default_collate"
)


def _ragged_fixes(cfg: RunConfig) -> tuple[Fix, ...]:
    """Each complete on its own: a pad token is added where the fix pads and none exists."""
    from cfgcheck.rules.tokens import pad_fix, usable_pad

    d = cfg.data
    facts = tokenizer_facts(cfg.tokenizer)
    pad: tuple[str, ...] = ()
    if not usable_pad(facts):
        found = pad_fix(cfg, cfg.model.rows)
        if found is None:
            return ()
        pad = found
    out = [Fix(("data.collator=padded", *pad), "pad each batch to its longest sample")]
    if d.pad_to_multiple_of is None or d.effective_max_length % d.pad_to_multiple_of == 0:
        out.append(
            Fix(
                ("data.padding=max_length", "data.truncation=true", *pad),
                f"pad every sample to data.max_length={d.effective_max_length}",
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
