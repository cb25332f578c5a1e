"""What CPU / NVMe offload takes off the GPU, what the GPU keeps, and the host memory it needs.

Read from the frameworks' source (deepspeedai/DeepSpeed edaa722, torch 2.13):

* **ZeRO-Offload, stage 1/2** (``deepspeed/runtime/zero/stage_1_and_2.py``):
  ``offload_optimizer.device`` other than ``none`` sets ``cpu_offload`` (l.186, so ``nvme``
  is host memory too at these stages) and ``self.device = 'cpu'`` (l.238): the fp32 master
  partition (l.489-500) with its fp32 gradient (l.843) and the optimizer states (DeepSpeedCPUAdam)
  are on the host, with a 16-bit copy of the partition (``param_buffer_of_bit16_for_cpu_offload
  _groups``, l.501-507) and, under gradient accumulation, ``accumulated_grads_in_cpu`` (l.1555,
  the parameter's dtype). The GPU keeps the 16-bit weights (the engine casts the module), the
  reduce bucket (``reduce_bucket_size`` elements, l.869; ``contiguous_gradients`` is forced on,
  l.260) and ``temp_grad_buffer_for_gpu_offload`` (the largest parameter, l.591). ``offload_param``
  is not read at these stages (``zero/config.py``: "Valid only with stage 3").
* **ZeRO-3** (``stage3.py``): ``offload_optimizer`` puts the fp32 partitions, their gradients
  (``grad_partitions_flat_buffer`` on ``self.device``, l.742) and the states on the host
  (``self.device = cpu``, l.328); ``device: nvme`` swaps the fp32 partitions and states to NVMe
  through ``buffer_count`` (4) pinned buffers of the largest sub-group (``optimizer_utils.py``
  l.187, ``sub_group_size`` 1e9). ``offload_param`` keeps the 16-bit partitions on the host (l.918:
  "partitioned params remain in GPU" only without it); on the GPU are only the parameters being
  computed and prefetched (``stage3_prefetch_bucket_size``, HF "auto": 0.9 x hidden^2) and
  the persistent small ones (``stage3_param_persistence_threshold``, HF "auto": 10 x hidden):
  the gather buffers :mod:`cfgcheck.memory.sharding` counts. With ``nvme`` the host holds
  ``max_in_cpu`` (1e9) parameters and ``buffer_count`` (5) x ``buffer_size`` (1e8) swap buffers
  (``offload_config.py``).
* **torch FSDP** ``CPUOffload(offload_params=True)`` / FSDP2 ``CPUOffloadPolicy``
  (``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``: "offloads parameters, gradients, and
  optimizer states to CPU"; the optimizer step runs on the CPU): the sharded fp32 parameters,
  their gradients and the optimizer states are on the host; the GPU keeps the unsharded units
  being computed (the gather buffers) and the activations. FSDP has no NVMe device and no
  optimizer-only offload.

Buckets take the HF integration's "auto" values (transformers ``integrations/deepspeed.py``
``trainer_config_finalize``: ``reduce_bucket_size`` = hidden^2). Host bytes are per process;
a node runs ``trainer.devices`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.params import count_params
from cfgcheck.memory.sharding import Divisors, gather_bytes
from cfgcheck.memory.stack import compute_bytes
from cfgcheck.memory.weights import (
    master_bytes,
    optimizer_state_bytes,
    trainable_params,
)
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# DeepSpeed defaults (deepspeed/runtime/zero/config.py, offload_config.py)
SUB_GROUP_SIZE = 1_000_000_000
OPTIMIZER_SWAP_BUFFERS = 4
PARAM_MAX_IN_CPU = 1_000_000_000
PARAM_SWAP_BUFFERS = 5
PARAM_SWAP_BUFFER_SIZE = 100_000_000


@dataclass(frozen=True)
class Placement:
    """Where the optimizer and the parameters really are, as the framework runs the config."""

    optimizer: str  # none | cpu | nvme
    params: str  # none | cpu | nvme

    @property
    def active(self) -> bool:
        return self.optimizer != "none" or self.params != "none"


def placement(t: TrainerConfig) -> Placement:
    """What the strategy makes of ``trainer.offload`` (see the module): ZeRO-1/2 ignore
    ``params`` and keep ``nvme`` optimizer states in host memory; FSDP's CPU offload moves the
    parameters, gradients and optimizer together and only to the CPU; DDP / one GPU offload
    nothing (rule ``offload-strategy`` says so)."""
    o = t.offload
    if t.strategy in ("zero1", "zero2"):
        return Placement("cpu" if o.optimizer != "none" else "none", "none")
    if t.strategy == "zero3":
        return Placement(o.optimizer, o.params)
    if t.strategy == "fsdp" and o.params == "cpu":
        return Placement("cpu", "cpu")
    return Placement("none", "none")


@dataclass(frozen=True)
class Terms:
    """Per-GPU bytes of the estimate's terms that offload changes."""

    weights: int
    adapters: int
    autocast: int
    gradients: int
    states: int
    paged_states: int
    step: int


def on_gpu(m: ModelConfig, t: TrainerConfig, div: Divisors, terms: Terms) -> Terms:
    """``terms`` with what the offload moves off the GPU taken out (see the module)."""
    p = placement(t)
    if not p.active:
        return terms
    pc = count_params(m)
    compute = compute_bytes(t)
    full = t.finetuning == "full"
    w, adapters, auto, grads = terms.weights, terms.adapters, terms.autocast, terms.gradients
    states, paged, step = terms.states, terms.paged_states, terms.step
    if p.optimizer != "none":
        states, paged, step = 0, 0, 0  # the optimizer and its step on the host / NVMe
        if full:
            # the engine's 16-bit module; the fp32 master partition is on the host
            w = pc.total * compute // div.weights
            auto = 0
        else:
            adapters = adapters * compute // max(master_bytes(t), 1)
        # FSDP copies the sharded gradients to the CPU after the reduce-scatter; DeepSpeed
        # keeps its reduce bucket (and at ZeRO-1/2 a staging buffer) on the GPU
        buckets = bucket_bytes(m, t) + staging_bytes(m, t)
        grads = 0 if t.strategy == "fsdp" else min(grads, buckets)
    if p.params != "none" and full:
        # only the gathered / prefetched units (sharding buffers) and the persistent small
        # parameters stay; with the optimizer on the GPU its fp32 partition does too
        w = 0 if p.optimizer != "none" else pc.total * master_bytes(t) // div.weights
        if t.world_size == 1:  # one GPU: nothing else gathers the units it computes
            w += gather_bytes(m, t)
        auto = 0
    return Terms(w, adapters, auto, grads, states, paged, step)


def bucket_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """The reduce bucket on the GPU: ``reduce_bucket_size`` elements of the 16-bit gradients
    (stage_1_and_2.py l.869, stage3.py l.733): ``trainer.offload.bucket_elements``, else the HF
    integration's "auto", hidden^2."""
    elements = t.offload.bucket_elements
    return (m.n_embd * m.n_embd if elements is None else elements) * compute_bytes(t)


def staging_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """ZeRO-1/2 offload's ``temp_grad_buffer_for_gpu_offload`` on the GPU: the largest
    parameter, 16-bit (stage_1_and_2.py l.591); none at stage 3."""
    if t.strategy not in ("zero1", "zero2") or t.finetuning != "full":
        return 0
    return max(m.rows, m.head_rows) * m.n_embd * compute_bytes(t)


@dataclass(frozen=True)
class HostPart:
    key: str
    label: str
    bytes: int
    note: str


def host_parts(m: ModelConfig, t: TrainerConfig, div: Divisors) -> tuple[HostPart, ...]:
    """Host (CPU) memory one process's offload holds (see the module); () without offload."""
    p = placement(t)
    if not p.active:
        return ()
    pc = count_params(m)
    compute = compute_bytes(t)
    n_opt = div.optimizer
    trained = trainable_params(m, t) // n_opt
    out: list[HostPart] = []
    zero3 = t.strategy == "zero3"
    if p.optimizer == "cpu":
        out.append(HostPart("host_master", "fp32 master weights", 4 * trained, "partition"))
        out.append(HostPart("host_gradients", "fp32 gradients", 4 * trained, "partition"))
        states = optimizer_state_bytes(m, t) // n_opt
        out.append(HostPart("host_states", "optimizer states", states, t.optimizer))
        if t.strategy in ("zero1", "zero2"):
            copy = compute * trained
            if t.gradient_accumulation_steps > 1:
                copy *= 2  # accumulated_grads_in_cpu, in the parameters' dtype
            out.append(HostPart("host_buffers", "16-bit buffers", copy, "stage_1_and_2"))
    elif p.optimizer == "nvme":
        # the swapped sub-groups' fp32 gradient: one buffer of the largest sub-group (l.1256)
        sub = min(SUB_GROUP_SIZE, trained)
        swap = OPTIMIZER_SWAP_BUFFERS * sub * 4
        out.append(HostPart("host_gradients", "fp32 gradients", 4 * sub, "largest sub-group"))
        out.append(HostPart("host_buffers", "NVMe swap buffers", swap, "4 x the largest sub-group"))
    if zero3 and p.optimizer != "none":
        # grad_partitions_flat_buffer: the reduced 16-bit gradient partitions (l.742)
        grads = compute * trained
        out.append(HostPart("host_grad_partitions", "16-bit gradient partitions", grads, "stage3"))
    if p.params == "cpu":
        if t.strategy == "fsdp":
            out.append(
                HostPart(
                    "host_params",
                    "sharded parameters",
                    pc.total * master_bytes(t) // div.weights,
                    "FSDP CPU offload",
                )
            )
        else:
            out.append(
                HostPart(
                    "host_params",
                    "16-bit parameter partitions",
                    pc.total * compute // div.weights,
                    "offload_param",
                )
            )
    elif p.params == "nvme":
        kept = min(PARAM_MAX_IN_CPU, pc.total // div.weights) * compute
        swap = PARAM_SWAP_BUFFERS * PARAM_SWAP_BUFFER_SIZE * compute
        out.append(HostPart("host_params", "parameters in CPU", kept, "max_in_cpu 1e9"))
        out.append(HostPart("host_param_swap", "parameter swap buffers", swap, "5 x 1e8"))
    return tuple(out)
