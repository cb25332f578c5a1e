"""``trainer.rl``: what an RL / preference trainer adds to a training step's memory beyond the
model's own forward (read by :mod:`cfgcheck.memory.rl`). Native adapters set it from the
trainer's keys (TRL ``GRPOConfig``: ``max_completion_length``, ``use_vllm``, ``vllm_mode``,
``vllm_gpu_memory_utilization``); the defaults describe plain supervised training."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cfgcheck.schema._base import Section
from cfgcheck.schema.bounds import Batch, Tokens

LogProbs = Literal["loss", "logits", "tiled"]
Generation = Literal["none", "transformers", "vllm-colocate", "vllm-server"]
PromptBound = Literal["none", "truncated", "vllm", "context"]


class RlConfig(Section):
    logprobs: LogProbs = Field(
        "loss",
        description="How the loss gets its token log-probabilities: 'loss': the model's own "
        "loss over every token (trainer.loss_chunking decides its memory); 'logits': the "
        "trainer takes the logits of the scored tokens and log-softmaxes them row by row in "
        "the compute dtype (TRL's selective_log_softmax, GRPO before 1.15); 'tiled': TRL's "
        "fused LM head (trl/kernels/chunked_logprob.py, since 1.15), which never holds the "
        "logits.",
    )
    scored_tokens: Tokens | None = Field(
        None,
        description="Tokens at the end of each sequence whose log-probabilities are taken "
        "(TRL's logits_to_keep: GRPO scores the completion, max_completion_length); None: "
        "every token.",
    )
    generation: Generation = Field(
        "none",
        description="Where an online trainer generates its completions: 'transformers' "
        "(model.generate on the training GPU, with its KV cache), 'vllm-colocate' (a vLLM "
        "engine in the training process that takes vllm_memory_share of the GPU), "
        "'vllm-server' (other GPUs: nothing on the training ones).",
    )
    generation_batch: Batch | None = Field(
        None,
        description="Sequences one GPU generates at once (TRL GRPO: per_device_train_batch_size "
        "x steps_per_generation); None: micro_batch_size.",
    )
    vllm_memory_share: float = Field(
        0.3,
        gt=0,
        le=1,
        description="Share of each GPU's memory a colocated vLLM engine takes for its weights "
        "and KV cache (TRL vllm_gpu_memory_utilization, vLLM gpu_memory_utilization).",
    )
    vllm_sleeps: bool = Field(
        False,
        description="The colocated vLLM engine frees its memory during the training step "
        "(TRL vllm_enable_sleep_mode): it then counts only while it generates.",
    )
    prompt_tokens: int | None = Field(
        None,
        ge=0,
        description="Longest prompt an online trainer feeds before its completion, counted in "
        "data.max_seq_length (prompt + completion); None: not an online trainer, or the "
        "bound is not known (the model's context is unknown).",
    )
    prompt_bound: PromptBound = Field(
        "none",
        description="What bounds prompt_tokens: 'truncated' (the trainer truncates prompts: TRL "
        "GRPO max_prompt_length before 0.26, RLOO before 0.27), 'vllm' (vLLM's max_model_len, "
        "TRL vllm_max_model_length, caps prompt + completion: vLLM refuses a longer prompt), "
        "'context' (nothing truncates prompts: the worst case, the model's context minus the "
        "completion), 'none' (not an online trainer).",
    )
