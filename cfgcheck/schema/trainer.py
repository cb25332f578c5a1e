"""The ``trainer`` section: batch sizes, parallelism, precision, optimizer, fine-tuning."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from cfgcheck.schema._base import Section
from cfgcheck.schema.bounds import Batch, Devices, Steps, Width
from cfgcheck.schema.gpu import GpuConfig
from cfgcheck.schema.rl import RlConfig

Strategy = Literal["single", "ddp", "fsdp", "zero1", "zero2", "zero3"]
Precision = Literal["32-true", "16-mixed", "bf16-mixed", "bf16-true"]
Optimizer = Literal["adamw", "adamw_8bit", "paged_adamw_8bit", "sgd", "adafactor"]
Finetuning = Literal["full", "lora", "qlora"]
Quantization = Literal["none", "int8", "nf4", "nf4-dq", "fp4"]
Attention = Literal["eager", "sdpa", "flash"]
LossChunking = Literal["none", "chunked", "fused"]
Framework = Literal["hf", "litgpt", "torchtune"]
OffloadDevice = Literal["none", "cpu", "nvme"]


class LoraConfig(Section):
    rank: Width | None = Field(None, description="LoRA rank r.")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha: updates are scaled by alpha / rank.")
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the adapters' input.")
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"],
        description="Modules that get adapters, by the architecture's real names as PEFT "
        "matches them (a module path ending with the name): Llama/Mistral/Qwen/Gemma: q_proj, "
        "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; Phi-1.5/2: q_proj, k_proj, "
        "v_proj, dense, fc1, fc2; Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj; GPT-2: "
        "c_attn, c_proj, c_fc; plus embed_tokens / lm_head. [all-linear]: every linear but "
        "the lm_head. With framework=litgpt: query, key, value, projection, mlp, head.",
    )
    target_parameters: list[str] = Field(
        default_factory=list,
        description="Parameters (not modules) that get adapters, as PEFT's LoraConfig "
        "target_parameters matches them: a parameter's full name equals the entry or ends "
        "with '.' + the entry, e.g. 7.mlp.experts.gate_up_proj (layer 7's fused experts) or "
        "mlp.experts.down_proj (every layer's). PEFT wraps each in lora.ParamWrapper: rank r "
        "per expert. framework=hf only.",
    )


class OffloadConfig(Section):
    optimizer: OffloadDevice = Field(
        "none",
        description="Where the optimizer states, the fp32 master weights and their gradients "
        "live, and where the optimizer step runs: on the GPU (none), in host memory (cpu: "
        "ZeRO-Offload, DeepSpeed zero_optimization.offload_optimizer.device), or on NVMe "
        "(ZeRO-Infinity, ZeRO-3 only). With fsdp it goes with the parameters.",
    )
    params: OffloadDevice = Field(
        "none",
        description="Where the sharded parameters live between uses: cpu / nvme (DeepSpeed "
        "ZeRO-3 offload_param.device) or cpu (torch FSDP CPUOffload(offload_params=True) / "
        "FSDP2 CPUOffloadPolicy, which moves the gradients and the optimizer step too); the "
        "GPU then keeps only the units being computed or prefetched.",
    )
    bucket_elements: int | None = Field(
        None,
        ge=0,
        le=10**12,
        description="Gradient elements DeepSpeed's reduce bucket holds on the GPU while the "
        "optimizer is offloaded (zero_optimization.reduce_bucket_size: 5e8 when the config "
        "does not set it); None: the HF integration's 'auto', hidden_size^2.",
    )


class TrainerConfig(Section):
    micro_batch_size: Batch = Field(description="Samples per device per forward pass.")
    gradient_accumulation_steps: Steps = Field(1, description="Micro batches per optimizer step.")
    global_batch_size: int | None = Field(
        None, gt=0, description="micro_batch_size * accumulation * devices * num_nodes."
    )
    devices: Devices = Field(1, description="GPUs per node.")
    num_nodes: Devices = Field(1, description="Machines.")
    strategy: Strategy = Field(
        "single",
        description="Parallelism: one device, data parallel (ddp), sharded (fsdp), or DeepSpeed "
        "ZeRO stage 1-3.",
    )
    precision: Precision = Field(
        "bf16-mixed",
        description="Lightning's names: *-mixed autocasts over fp32 weights, *-true keeps the "
        "weights in that type.",
    )
    optimizer: Optimizer = Field(
        "adamw", description="Optimizer; the 8-bit and paged ones are bitsandbytes'."
    )
    learning_rate: float = Field(3e-4, gt=0, description="Peak learning rate.")
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass instead of keeping them."
    )
    activation_offloading: bool = Field(
        False,
        description="With gradient_checkpointing, the checkpointed layer inputs are moved to "
        "CPU memory; the GPU keeps those of the layers in flight (Axolotl "
        "activation_offloading).",
    )
    tiled_mlp: bool = Field(
        False,
        description="Each MLP runs over slices of the sequence without keeping its "
        "intermediates, recomputing one slice at a time in backward (Axolotl tiled_mlp).",
    )
    tiled_mlp_shards: Batch | None = Field(
        None,
        description="Slices a tiled MLP cuts the sequence into; None: one per 32768 tokens "
        "(Axolotl tiled_mlp_num_shards).",
    )
    reference_model: bool = Field(
        False,
        description="A frozen second copy of the model, loaded as the trained one is, lives "
        "beside it (the reference model of DPO / KTO / IPO with full fine-tuning).",
    )
    sequences_per_sample: int = Field(
        1,
        ge=1,
        le=2,
        description="Sequences one sample puts through the model in one forward: 2 for "
        "preference training (DPO, IPO, ORPO: chosen and rejected concatenated into one batch).",
    )
    rl: RlConfig = Field(
        default_factory=RlConfig,
        description="What an RL trainer adds to a step: log-probabilities of the scored "
        "tokens only, generation on the training GPUs (TRL GRPO).",
    )
    shard_group: Devices | None = Field(
        None,
        description="GPUs fsdp / zero3 shard the weights, gradients and optimizer states "
        "over; None: every GPU (devices * num_nodes). Hybrid sharding (FSDP HYBRID_SHARD) "
        "shards within a node: devices.",
    )
    offload: OffloadConfig = Field(
        default_factory=OffloadConfig,
        description="What is moved off the GPU to host memory or NVMe (DeepSpeed ZeRO-Offload "
        "/ ZeRO-Infinity, FSDP CPU offload); the host memory it needs is reported beside the "
        "GPU estimate (docs/memory.md).",
    )
    context_parallel: Devices = Field(
        1,
        description="GPUs one sequence is split across (context / sequence parallelism): each "
        "holds max_seq_length / context_parallel tokens of activations and logits.",
    )
    expert_parallel_size: Devices = Field(
        1,
        description="GPUs the routed experts of a mixture-of-experts model are split across "
        "(expert parallelism): each GPU holds n_expert / expert_parallel_size experts of every "
        "MoE layer, with their gradients and optimizer states; shared experts, routers, "
        "attention and embeddings stay as strategy says. Must divide the number of experts and "
        "the world size (Axolotl expert_parallel_size, LLaMA-Factory dist_config.ep_size).",
    )
    expert_parallel_buffer_mib: int = Field(
        0,
        ge=0,
        le=1_048_576,
        description="Token dispatch buffer the expert-parallel backend allocates on each GPU "
        "outside torch's allocator, MiB (Axolotl's DeepEP backend: "
        "expert_parallel_num_nvl_bytes + expert_parallel_num_rdma_bytes, 256 MiB by default).",
    )
    finetuning: Finetuning = Field(
        "full",
        description="full trains every weight; lora and qlora train adapters (qlora over a "
        "4-bit quantized base).",
    )
    quantization: Quantization = Field("none", description="Weight quantization of the base.")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    attention: Attention = Field(
        "sdpa",
        description="Attention kernel: eager (plain matmuls), sdpa (torch's "
        "scaled_dot_product_attention), flash (flash-attn 2).",
    )
    loss_chunking: LossChunking = Field(
        "none",
        description="'none': full logits plus their fp32 upcast for the loss (transformers); "
        "'chunked': lm_head and loss in sequence chunks, no fp32 upcast (LitGPT); 'fused': "
        "a fused linear + cross-entropy kernel that never holds the full logits (Liger).",
    )
    framework: Framework = Field(
        "hf",
        description="Whose conventions the run follows: 'hf' (transformers / TRL / PEFT / "
        "bitsandbytes), 'litgpt' or 'torchtune'. Rules and the memory estimate model that "
        "stack's behaviour (see docs/memory.md).",
    )
    gpu: GpuConfig | None = Field(
        None, description="The GPU the run is meant for, used when no GPU is visible."
    )
    cuda_alloc_conf: str | None = Field(
        None,
        description="PYTORCH_CUDA_ALLOC_CONF the run sets, e.g. 'expandable_segments:True' "
        "or 'max_split_size_mb:128,garbage_collection_threshold:0.6': the allocator "
        "simulation of `cfgcheck memory` follows it (docs/memory.md).",
    )

    @field_validator("cuda_alloc_conf")
    @classmethod
    def _alloc_conf(cls, v: str | None) -> str | None:
        if v is not None:
            from cfgcheck.memory.allocconf import parse_alloc_conf

            parse_alloc_conf(v)  # AllocConfError is a ValueError: a validation error
        return v

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer step across all devices."""
        return self.micro_batch_size * self.gradient_accumulation_steps * self.world_size
