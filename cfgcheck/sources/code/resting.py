"""Findings that rest on a value a static reader cannot know, shared by every source that reads
without running (``--from python``, ``--from launch``): such a finding is left out rather than
built on a guess."""

from __future__ import annotations

from collections.abc import Iterable

from cfgcheck.findings import Finding

# What the memory estimate is computed from (cfgcheck.memory: the weights, their precision and
# quantization, which of them train, the LoRA adapter's rank and targets, the activations of
# one micro batch at the padded length, the devices ZeRO / FSDP shard them over): an estimate
# resting on an unknown one is left out.
MEMORY_INPUTS = frozenset(
    {
        "data.max_seq_length",
        "trainer.micro_batch_size",
        "trainer.precision",
        "trainer.quantization",
        "trainer.finetuning",
        "trainer.gradient_checkpointing",
        "trainer.devices",
        "trainer.lora.rank",
        "trainer.lora.targets",
        "data.collator",
        "data.padding",
    }
)


def rests_on(finding: Finding, unknown: Iterable[str]) -> bool:
    """Whether ``finding`` rests on one of the ``unknown`` cfgcheck paths: it names one, or it
    is the memory verdict and one of its inputs is unknown."""
    resting = set(unknown)
    return bool(
        resting & set(finding.paths) or (finding.rule == "gpu-memory" and resting & MEMORY_INPUTS)
    )
