"""What each parallel strategy divides by the world size, and the buffers it adds per GPU.

* single / ddp: nothing is divided. DDP keeps its gradient buckets, a second copy of the
  gradients (``gradient_as_bucket_view=False``, the default).
* zero1: optimizer states (and the step's temporaries) divided.
* zero2: + gradients divided.
* zero3 / fsdp: + weights divided; the unit being computed is all-gathered in full, and the
  next one prefetched: two of the largest layer's parameters in the compute dtype, plus, when
  it trains, one layer of unsharded gradients before the reduce-scatter. These exist only
  while units run: each unit is resharded after its forward and its backward
  (``reshard_after_forward``, torch/distributed/fsdp), so the optimizer step holds none
  (fms-acceleration's A100 FSDP runs peak at exactly half the one-GPU optimizer step).
Activations and logits are never divided (data parallelism splits the batch, not a sample).
Expert parallelism divides the routed experts further (:mod:`cfgcheck.memory.expert_parallel`):
a gathered unit holds only the local experts, and DDP buckets none of their gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory import expert_parallel
from cfgcheck.memory.params import count_params
from cfgcheck.memory.weights import master_bytes
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Divisors:
    weights: int
    gradients: int
    optimizer: int


def divisors(t: TrainerConfig) -> Divisors:
    n = t.world_size
    if t.shard_group is not None:  # hybrid sharding: shards within the group, replicas across
        n = min(n, t.shard_group)
    s = t.strategy
    if s in ("zero3", "fsdp"):
        return Divisors(n, n, n)
    if s == "zero2":
        return Divisors(1, n, n)
    if s == "zero1":
        return Divisors(1, 1, n)
    return Divisors(1, 1, 1)


def gathers(t: TrainerConfig) -> bool:
    """Whether the strategy's buffers are all-gathered units (absent at the optimizer step)."""
    return t.world_size > 1 and t.strategy in ("zero3", "fsdp")


def buffer_bytes(m: ModelConfig, t: TrainerConfig, gradients: int) -> int:
    """Extra per-GPU buffers of the strategy (DDP buckets, FSDP/ZeRO-3 gather buffers);
    ``gradients``: the bytes of the gradients DDP buckets (expert-parallel experts' are
    ``_ddp_params_and_buffers_to_ignore``, Axolotl expert_parallel/shard.py)."""
    if t.world_size == 1:
        return 0
    if t.strategy == "ddp":
        return gradients
    if t.strategy in ("zero3", "fsdp"):
        return gather_bytes(m, t)
    return 0


def gather_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """The all-gathered units of fsdp / zero3 (see the module): the one computed and the one
    prefetched in the compute dtype, and, when it trains, one unit of unsharded gradients."""
    pc = count_params(m)
    block = expert_parallel.gathered_unit(m, t, pc.per_block, pc.n_layer)
    unit = max(block, pc.embedding, pc.lm_head)
    compute = 4 if t.precision == "32-true" else 2
    grads = unit * master_bytes(t) if t.finetuning == "full" else 0
    return 2 * unit * compute + grads
