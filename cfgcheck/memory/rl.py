"""What an RL / preference trainer adds to a step's memory (``trainer.rl``), as TRL does it.

Log-probabilities (``rl.logprobs``):

* ``logits`` (GRPO before TRL 1.15: ``_get_per_token_logps``, trl/trainer/grpo_trainer.py of
  v0.18.0 lines 836-857): ``model(..., logits_to_keep=C + 1).logits`` holds the logits of the
  completion only (C = ``rl.scored_tokens`` per sequence), in the compute dtype; they are
  divided by the temperature (a copy) and ``selective_log_softmax`` (trl/trainer/utils.py,
  v0.18.0 lines 1718-1750) log-softmaxes them row by row, each row's output kept for
  backward. At most three such tensors are alive at once: the copy and the kept outputs in
  the forward plus, in 0.18's ``_compute_loss``, the reference model's own two (its forward
  runs while the policy's graph is held); in backward the kept outputs, the accumulated
  gradient of the logits and one row's ``select_backward`` zeros of the full shape.
* ``tiled`` (TRL 1.15 and later: ``add_fused_lm_head``, trl/trainer/utils.py, and
  ``ChunkedLogProbFunction``, trl/kernels/chunked_logprob.py of 1.16.0): the logits are never
  held; the LM head runs on ``[min(N, 4096), 32768]`` tiles (``TOKEN_CHUNK_SIZE``,
  ``_CHUNKED_LOGPROB_CHUNK_SIZE``) of the N scored tokens (on CUDA only the positions whose
  label is not -100: ``hidden_states[mask]``, a copy), and backward accumulates the hidden
  states' gradient, and a trained head's, in fp32.

Generation (``rl.generation``): ``transformers`` runs ``model.generate`` on the training GPU
between optimizer steps (gradients are gone, ``zero_grad(set_to_none=True)``): the KV cache of
``rl.generation_batch`` sequences of prompt + completion, one step's fp32 logits, and under
ZeRO-3 the whole model gathered (``unwrap_model_for_generation``, ``ds3_gather_for_generation``
defaults to True). ``vllm-colocate`` gives vLLM ``rl.vllm_memory_share`` of each GPU (vLLM's
``gpu_memory_utilization`` is a share of the device's total memory): held through the step, or
only while it generates when it sleeps (``vllm_enable_sleep_mode``); ``vllm-server`` runs on
other GPUs.

Prompt (``rl.prompt_tokens``, ``rl.prompt_bound``): an online trainer's sequence is the prompt,
left-padded to the longest of its batch, then the completion; ``data.max_seq_length`` counts
both, the prompt by the bound the source found (cfgcheck/sources/trl_prompt.py): the trainer's
truncation, vLLM's ``max_model_len``, or the worst case of the model's context minus the
completion. :func:`prompt_note` names it in the estimate.
"""

from __future__ import annotations

from cfgcheck.memory import weights
from cfgcheck.memory.stack import stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE; trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
TILE_TOKENS = 4096
TILE_VOCAB = 32768
# transformers' sampling step: the last position's logits in fp32 (``outputs.logits[:, -1, :]
# .to(torch.float32)``), the logits processors' output and the softmax probabilities
GENERATE_STEP_COPIES = 3


def applies(t: TrainerConfig) -> bool:
    return t.rl.logprobs != "loss"


def scored(t: TrainerConfig, seq: int) -> int:
    """Tokens per sequence whose log-probabilities are taken."""
    return min(seq, t.rl.scored_tokens) if t.rl.scored_tokens else seq


def logprob_bytes(
    m: ModelConfig, t: TrainerConfig, batch: int, seq: int, compact: bool = True
) -> int:
    """Peak bytes of the log-probabilities of ``batch`` sequences of ``seq`` tokens (see the
    module docstring). ``compact``: the tiled kernel scores only the scored tokens (CUDA);
    elsewhere it scores every position (``_use_triton`` is False on CPU) of a view."""
    s = stack(m, t)
    v, h = m.head_rows, m.n_embd
    if t.rl.logprobs == "logits":
        return 3 * s.act * v * batch * scored(t, seq)
    n = batch * (scored(t, seq) if compact else seq - 1)
    # mm_buf: (min(N, 4096), chunk_size) whatever the vocabulary (ChunkedLogProbFunction)
    tile = min(n, TILE_TOKENS) * TILE_VOCAB * s.act
    kept = n * h * s.residual if compact else 0  # hidden_states[mask]
    grad_hidden = 4 * n * h
    # the head's weight cast per vocabulary chunk when it is not in the compute dtype
    cast = min(v, TILE_VOCAB) * h * s.act if weights.master_bytes(t) != s.act else 0
    # a trained head: its fp32 gradient, then cast to the weight's dtype while it is alive
    w = weights.master_bytes(t)
    grad_head = (4 + (w if w != 4 else 0)) * v * h if t.finetuning == "full" else 0
    return tile + kept + grad_hidden + cast + grad_head


def generation_bytes(m: ModelConfig, t: TrainerConfig, seq: int, div_weights: int) -> int:
    """Bytes beyond the persistent state while ``model.generate`` runs on the training GPU
    (``rl.generation == "transformers"``): the KV cache of every layer for the generation
    batch at full length, one step's logits, and ZeRO-3's gathered weights."""
    if t.rl.generation != "transformers":
        return 0
    s = stack(m, t)
    batch = t.rl.generation_batch or t.micro_batch_size
    kv = 2 * m.n_layer * m.kv_heads * m.head_dim * s.act * batch * seq
    step = GENERATE_STEP_COPIES * 4 * m.head_rows * batch
    gathered = 0
    if t.strategy == "zero3" and div_weights > 1:
        full = weights.weight_bytes(m, t)
        gathered = full - full // div_weights
    return kv + step + gathered


PROMPT_BOUNDS = {
    "truncated": "truncated to it (max_prompt_length)",
    "vllm": "vLLM's max_model_len caps prompt + completion",
    "context": "nothing truncates prompts: the worst case, the model's context minus the "
    "completion",
}


def prompt_note(t: TrainerConfig, seq: int) -> str:
    """Which prompt length the sequence of an online trainer counts, and why ("" for others)."""
    r = t.rl
    if r.prompt_bound == "none":
        return ""
    if r.prompt_tokens is None:
        return f"sequence {seq} tokens: the completion only, the prompts' bound is unknown"
    return (
        f"sequence {seq} tokens: prompts up to {r.prompt_tokens} "
        f"({PROMPT_BOUNDS[r.prompt_bound]}) + completion {max(seq - r.prompt_tokens, 0)}"
    )


def prompt_is_worst_case(t: TrainerConfig) -> str:
    """What the sequence assumes when no bound of the config caps an online trainer's prompts
    (the model's context minus the completion), "" otherwise: the memory verdict is then
    conditional on the data, not certain."""
    r = t.rl
    if r.prompt_bound != "context" or not r.prompt_tokens:
        return ""
    return f"prompts of {r.prompt_tokens} tokens, the worst case: nothing truncates them"
