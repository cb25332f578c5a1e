"""Peak GPU memory estimate of a training run, and the GPUs it is checked against.

The package is built in layers; a module imports only from its own layer or a lower one, and
never in a cycle (tests/test_memory_layering.py reads every import, function-level ones
included, and checks :data:`LAYERS`):

0. shapes: what the model is (``traced`` reads a transformers model on the meta device,
   ``trace_cache`` keeps its traces across processes,
   ``modules`` the linears and norms of a block, ``params`` the parameter counts,
   ``hf_shapes`` the transformers config of a shape) and the GPUs (``devices``);
1. stack: whose conventions run the config (``stack``: dtypes, what a framework keeps,
   the attention kernel that really runs, whether batches are padded);
2. terms: one mechanism each (``weights``, ``activations``, ``sharding``, ``offload``,
   ``expert_parallel``, ``mla`` (DeepSeek's latent attention), ``gpt_oss``, ``llama4``,
   ``allocator``, ``coverage``; ``rl`` for preference/RL terms, ``tiled`` for tiled MLPs,
   ``recompute`` the recomputed layer's largest moment under QLoRA, ``attention_backward``
   eager attention's softmax backward;
   ``allocsim`` the caching allocator, whose settings ``allocconf`` reads at layer 0);
3. estimate: the terms stacked into the peak of a step (``estimate``), or into the step's
   allocation events that ``allocsim`` replays (``events``; ``events_kbit`` with ``kbit_layer``
   and ``kbit_ops`` for QLoRA, ``events_liger`` for Liger's fused loss, all built with
   ``event_seq``; ``layer_ops`` and ``llama_step`` for the Llama layout op by op, with
   ``gemma_ops`` for Gemma's (``gemma_layout``: the runs it covers), ``events_moe`` and
   ``param_wrapper`` for mixture-of-experts blocks (``moe_layout``: the runs covered),
   ``gpt_oss_ops`` with ``gpt_oss_pieces`` and ``gpt_oss_experts`` for gpt-oss
   (``gpt_oss_layout``: the runs it covers);
   ``sim_cache`` keeps replays and simulated steps on disk);
4. verdict: what is said about an estimate (``verdict``, ``fixes``, ``plot``; ``simulated``
   the simulation's figures next to it).
"""

from cfgcheck.memory.estimate import GIB, Component, MemoryEstimate, estimate
from cfgcheck.memory.params import ParamCount, count_params

# module (under cfgcheck.memory) -> layer; a new module must be declared here
LAYERS: dict[str, int] = {
    "traced": 0,
    "trace_cache": 0,
    "modules": 0,
    "params": 0,
    "hf_shapes": 0,
    "devices": 0,
    "allocconf": 0,
    "stack": 1,
    "weights": 2,
    "activations": 2,
    "recompute": 2,
    "attention_backward": 2,
    "sharding": 2,
    "offload": 2,
    "expert_parallel": 2,
    "mla": 2,
    "gpt_oss": 2,
    "llama4": 2,
    "allocator": 2,
    "coverage": 2,
    "rl": 2,
    "tiled": 2,
    "allocsim": 2,
    "event_seq": 3,
    "events": 3,
    "events_kbit": 3,
    "events_liger": 3,
    "kbit_layer": 3,
    "kbit_ops": 3,
    "layer_ops": 3,
    "llama_step": 3,
    "gemma_ops": 3,
    "gemma_layout": 3,
    "events_moe": 3,
    "moe_layout": 3,
    "param_wrapper": 3,
    "gpt_oss_ops": 3,
    "gpt_oss_layout": 3,
    "gpt_oss_pieces": 3,
    "gpt_oss_experts": 3,
    "sim_cache": 3,
    "simulated": 4,
    "estimate": 3,
    "verdict": 4,
    "fixes": 4,
    "plot": 4,
}

__all__ = [
    "GIB",
    "LAYERS",
    "Component",
    "MemoryEstimate",
    "ParamCount",
    "count_params",
    "estimate",
]
