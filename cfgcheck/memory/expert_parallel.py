"""Expert parallelism: the routed experts of a mixture-of-experts model split across GPUs.

What the frameworks do (cited from their source):

* Axolotl's ExpertParallelPlugin (axolotl-ai-cloud/axolotl at 067b021c,
  ``src/axolotl/integrations/expert_parallel/shard.py`` ``shard_expert_weights``) slices every
  fused ``*Experts`` module's 3D ``gate_up_proj`` / ``down_proj`` (and their biases) along the
  experts dimension: each rank of the ``ep`` group keeps ``E / ep`` experts. Nothing else is
  sliced: the router, shared experts (ordinary ``nn.Linear`` MLPs), attention and embeddings
  stay whole. Pure EP runs under DDP with the sliced parameters in
  ``_ddp_params_and_buffers_to_ignore`` (no DDP bucket for their gradients); with FSDP the
  experts are wrapped on the ``dp_shard`` axis only (``plugin.py`` ``fully_shard_experts``)
  and the other parameters on ``ep x dp_shard`` (``monkeypatch/accelerate/
  parallelism_config.py`` ``_patched_dp_shard_cp_dim_names``): a unit's all-gather brings
  ``E / ep`` experts, never all of them.
* LLaMA-Factory v1's ``fsdpturbo`` plugin (hiyouga/LLaMA-Factory at ff6d4d12,
  ``src/llamafactory/v1/plugins/trainer_plugins/distributed/fsdpturbo.py``
  ``FSDPTurboParallelState.initialize``): the experts on an ``ep`` mesh, FSDP-sharded on
  ``efsdp = dp / ep``, the rest FSDP over ``dp``.

So per GPU the routed experts' weights, gradients and optimizer states are divided by ``ep``
times what the strategy shards them over among the ``world / ep`` GPUs that hold the same
experts: ``ep * min(d, world / ep)`` for a strategy divisor ``d`` (1 unsharded; ``world``
fully sharded: then the experts' bytes per GPU equal plain FSDP's, only the gathers shrink).
LoRA trains adapters, not the experts: only the frozen expert weights are divided (adapters on
the experts, PEFT ``target_parameters``, are counted whole: the safe side).

Axolotl's DeepEP backend allocates one dispatch buffer per GPU (``buffer.py`` ``get_buffer``:
``deep_ep.Buffer(num_nvl_bytes=256 << 20, num_rdma_bytes=0)`` by default, ``args.py``), which
DeepEP takes with ``cudaMalloc`` outside torch's allocator (deepseek-ai/DeepEP
``csrc/deep_ep.cpp`` ``Buffer::Buffer``: ``num_nvl_bytes`` plus a few KiB of barrier signals
and peer pointers): ``trainer.expert_parallel_buffer_mib``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.modules import traced
from cfgcheck.memory.stack import stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

MIB = 2**20


def routed_params(m: ModelConfig) -> int:
    """Parameters of the routed experts (the fused ``*Experts`` modules transformers builds;
    0 for a dense model or a shape cfgcheck does not trace)."""
    tr = traced(m) if m.n_expert else None
    return tr.expert_params if tr is not None else 0


def applies(m: ModelConfig, t: TrainerConfig) -> bool:
    return t.expert_parallel_size > 1 and routed_params(m) > 0


def divisor(t: TrainerConfig, strategy_divisor: int) -> int:
    """What divides the routed experts' bytes per GPU, given what the strategy divides the
    other parameters' by: the ``ep`` slices, each sharded over the GPUs that hold it."""
    ep = t.expert_parallel_size
    return ep * max(1, min(strategy_divisor, t.world_size // ep))


def spread(total: int, routed: int, div: int, routed_div: int) -> int:
    """Per-GPU bytes of ``total``, of which ``routed`` are the routed experts'."""
    return (total - routed) // div + routed // routed_div


@dataclass(frozen=True)
class Routed:
    """Bytes of the routed experts in each whole-model term (0 where EP does not apply)."""

    weights: int
    trainable: int  # the experts' trainable parameters (full fine-tuning: all of them)

    def share(self, total: int, trainable: int) -> int:
        """The experts' part of a term proportional to the trainable parameters (gradients,
        optimizer states and the step's temporaries)."""
        return total * self.trainable // trainable if trainable else 0


def routed(m: ModelConfig, t: TrainerConfig, master: int) -> Routed:
    """The routed experts' weight bytes (stored as the other unquantized parameters: 3D
    parameters are not bitsandbytes linears) and trainable parameters."""
    if not applies(m, t):
        return Routed(0, 0)
    n = routed_params(m)
    # as weights.weight_bytes stores the unquantized parameters: fp32 after
    # prepare_model_for_kbit_training, else the master dtype
    stored = 4 if stack(m, t).kbit_upcast else master
    return Routed(n * stored, n if t.finetuning == "full" else 0)


def gathered_unit(m: ModelConfig, t: TrainerConfig, per_block: int, n_layer: int) -> int:
    """One decoder layer's parameters as an FSDP / ZeRO-3 unit gathers them: with EP only the
    local ``E / ep`` experts."""
    if not applies(m, t):
        return per_block
    experts = routed_params(m) // max(n_layer, 1)
    return per_block - experts + experts // t.expert_parallel_size


def buffer_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """The backend's dispatch buffer (outside torch's allocator)."""
    return t.expert_parallel_buffer_mib * MIB if applies(m, t) else 0
