"""The recomputed layer's largest moment (QLoRA as transformers + PEFT + bitsandbytes run it,
full fine-tuning) and what the rest of a checkpointed backward holds beside it.

Gradient checkpointing recomputes one layer at a time in backward; the estimate counts that
layer's saved tensors (:func:`activations.layer_activations`) and, on top, what its backward
holds at its largest moment. For a dense 16-bit stack that is the MLP's backward
(:func:`activations.recompute_backward_bytes`). A 4-bit base loaded as users run QLoRA
(``prepare_model_for_kbit_training``: an fp32 stream, :mod:`cfgcheck.memory.stack`) has three
candidate moments, and the bitsandbytes buffers (:func:`weights.dequant_bytes`) belong to only
one of them, so the peak is the largest moment, not their sum (CPU-traced on a tiny Llama with
bitsandbytes' CPU backend, tests/test_memory_tracer_bnb.py):

* **the recomputation's end.** ``torch.utils.checkpoint`` (non-reentrant, early stop) reruns
  the layer until its last saved tensor is packed: the down projection adapter's ``lora_B``
  input. Alive then besides the saved tensors: the down projection's input (the SwiGLU product,
  kept by the adapter only without dropout), the MLP's input (the second norm's output, held by
  the MLP's forward; kept by the gate/up adapters only without dropout) and the base output's
  copy PEFT makes (``result = result.clone()``, peft src/peft/tuners/lora/bnb.py
  ``Linear4bit.forward``, "for 4bit, we need to defensively clone here"). Without a down
  adapter the recomputation starts later, at ``MulBackward`` (the base's backward needs no
  saved tensor), with the product's gradient already made, and stops at its saved tensors.
* **the MLP's backward.** The down adapter's branch runs first (its nodes are younger), so
  its saved tensors (dropout output and mask, or its input) and the scaled gradient of its
  output (one of the two hidden-size gradients) are released before the down projection's
  input gradient is summed (LoRA's fp32 path + the base's, ``MatMul4Bit.backward``'s bf16
  ``grad_A`` cast back to fp32 by ``Linear4bit.forward``'s ``x.to(compute_dtype)``) and
  ``MulBackward`` makes the gate's and up's gradients: three intermediate-size fp32 tensors,
  while the gate, activation and up outputs are still kept.
* **a dequantized weight.** bitsandbytes ``gemm_4bit`` on CUDA above 1536 tokens dequantizes
  into a compute-dtype weight (backends/cuda/ops.py ``_dequant_linear_fallback``);
  ``MatMul4Bit.backward`` dequantizes again (bitsandbytes autograd/_functions.py). The largest
  is the down projection's forward in the recomputation: its input, the MLP's input and the
  buffers, before the down adapter has kept anything.

In each, the block's first norm's saved input is the layer's checkpoint itself (an fp32 stream:
``LlamaRMSNorm.forward``'s ``hidden_states.to(torch.float32)`` returns its input), which the
layer term counts once more. Blocks that end in a norm (OLMo 2, Gemma 2/3), mixtures of experts,
non-gated MLPs and int8 keep the dense terms (not traced here).

Full fine-tuning changes what is alive around the recomputed layer: which gradients exist and
which of its saved tensors its backward has released (:func:`full_finetuning_moments`,
:func:`backward_front`; docs/memory.md, "The backward front of checkpointed full
fine-tuning").
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory import activations as act
from cfgcheck.memory import mla as latent
from cfgcheck.memory import sharding, weights
from cfgcheck.memory.params import adapted_modules, block_linears, count_params, norm_params
from cfgcheck.memory.stack import FOUR_BIT, quantized, stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Moment:
    """Bytes the recomputed layer holds beyond its counted saved tensors and the two
    hidden-size gradients (less what it has released by then), the bitsandbytes buffers alive
    at that moment, and the parameters of that layer whose gradients exist by then (full
    fine-tuning: :func:`full_finetuning_moments`)."""

    name: str
    extra: int
    dequant: int
    own: int = 0


def fourbit_moments(
    m: ModelConfig, t: TrainerConfig, tokens: int, dequant: int
) -> list[Moment] | None:
    """The three moments of the module docstring, for ``tokens`` tokens; None where the dense
    terms apply (see the module docstring). ``dequant``: :func:`weights.dequant_bytes`."""
    s = stack(m, t)
    if not (
        t.gradient_checkpointing
        and s.kbit_upcast
        and quantized(t)
        and t.quantization in FOUR_BIT
        and m.mlp in ("swiglu", "geglu")
        and not m.n_expert
        and act.post_norm_backward_bytes(m, t, tokens) == 0
    ):
        return None
    linears = block_linears(m)
    downs = [x for x in linears if x.source == "mlp_act"]
    if len(downs) != 1:
        return None
    down = downs[0]
    a, h, i = s.act, m.n_embd, down.in_features
    rank = t.lora.rank or 0
    dropout = t.lora.dropout > 0
    adapted = adapted_modules(m, t.lora.targets, t.framework).names if rank else frozenset()
    # the MLP's input is counted when a gate/up adapter without dropout keeps it
    mlp_in_counted = not dropout and any(x.name in adapted for x in linears if x.source == "mlp_in")
    mlp_in = 0 if mlp_in_counted else s.residual * h
    dup = s.residual * h  # the first norm's saved input: the checkpoint
    if down.name in adapted:
        # what the down adapter keeps (layer_activations counts it), its input when shared
        kept, x_counted = act._adapter_bytes(s, i, rank, dropout)
        kept += a * i if x_counted else 0
        # its input, the MLP's input, PEFT's copy of the base output
        end = (0 if x_counted else a * i) + mlp_in + a * h
        backward = 3 * a * i - kept - a * h  # the scaled output gradient released
        forward = a * i + mlp_in - kept  # + the buffers, before the adapter keeps anything
    else:
        # the down projection's backward needs nothing recomputed (MatMul4Bit keeps its weight
        # as a ctx attribute): MulBackward starts the recomputation with the gradient of its
        # output (a * i) already made, and one hidden-size gradient is alive, not two
        end = 2 * a * i + mlp_in - a * h  # the product, the MLP's input, its gradient
        backward = 3 * a * i - a * h
        forward = mlp_in - a * h  # early stop: the down projection is not rerun
    return [
        Moment("recomputation end", (end - dup) * tokens, 0),
        Moment("MLP backward", (backward - dup) * tokens, 0),
        Moment("dequantized weight", (forward - dup) * tokens, dequant),
    ]


def full_finetuning_moments(
    m: ModelConfig, t: TrainerConfig, tokens: int, dequant: int
) -> list[Moment] | None:
    """The recomputed dense layer's largest moments under full fine-tuning, with what its own
    backward has done by then (docs/memory.md, "The backward front of checkpointed full
    fine-tuning"; CPU-traced on Llama, Granite, SmolLM3, Cohere, OLMo 2 and Gemma 3): autograd
    runs a node's ``AccumulateGrad`` as soon as its gradient is ready (its sequence number is
    ``UINT64_MAX``, first in the ready queue: torch/csrc/autograd/engine.h
    ``ReadyQueue::CompareNodeTaskTime``, node.h "NOTE [ Sequence Number]"), so a weight's
    gradient exists from the moment its linear's backward has run, and that node has released
    the tensors it saved (the recomputed ones are handed over once:
    torch/utils/checkpoint.py ``_checkpoint_hook.unpack_hook``, ``holder.handles[gid] = None``).

    * **the MLP's backward** (``MulBackward`` with three intermediate-size tensors, as in
      :func:`activations.recompute_backward_bytes`): the down projection's backward has run,
      its weight's (and bias's) gradient exists and its saved input, which the layer term
      counts, is freed (under autocast its weight's 16-bit cast too); a block ending in a
      norm has run that norm's backward too (its weight's gradient made, the normalized tensor
      it saved freed);
    * **the post-MLP norm's backward** (OLMo 2, Gemma 2/3: the block's first backward op,
      :func:`activations.post_norm_backward_bytes`): only that norm's weight gradient exists,
      and the normalized tensor its ``mul`` saved is freed.

    None where the other moments apply: LoRA (no weight gradients in the layer), mixtures of
    experts (their largest moment is the dispatch inside the recomputation or the experts'
    backward, before any of the layer's gradients is accumulated: traced on Mixtral, Qwen3-MoE,
    OLMoE, gpt-oss, Llama 4)."""
    if t.finetuning != "full" or not t.gradient_checkpointing or m.n_expert:
        return None
    downs = [x for x in block_linears(m) if x.source == "mlp_act"]
    if len(downs) != 1:
        return None
    down = downs[0]
    s = stack(m, t)
    k = 3 if m.mlp in ("swiglu", "geglu") or s.gelu_saved > 1 else 2
    mlp = k * s.act * m.mlp_width * tokens
    freed = s.act * down.in_features * tokens  # the down projection's saved input
    if weights.autocast_layer_bytes(m, t):  # and its weight's 16-bit cast (autocast)
        freed += 2 * down.in_features * down.out_features
    post = act.post_norm_backward_bytes(m, t, tokens)
    post_own = norm_params(m) if post else 0
    # the normalized tensor a trained RMSNorm weight multiplies (activations._norm_bytes);
    # LayerNorm's weight gradient comes from its own saved input and statistics
    post_freed = s.norm_out * m.n_embd * tokens if post and m.norm != "layernorm" else 0
    moments = [Moment("MLP backward", mlp - freed - post_freed, dequant, down.params + post_own)]
    if post:
        moments.append(Moment("post-MLP norm backward", post - post_freed, dequant, post_own))
    return moments


@dataclass(frozen=True)
class Front:
    """Gradients, layer checkpoints and attention masks alive while a layer is recomputed."""

    gradients: int
    checkpoints: int
    masks: int


def backward_front(
    m: ModelConfig,
    t: TrainerConfig,
    grads: int,
    per_layer: int,
    own: int,
    ckpts: int,
    masks: tuple[int, int],
) -> Front:
    """Full fine-tuning without accumulation: what the backward holds besides the recomputed
    layer, at the larger of the two ends of the backward (the sum is linear in the layer's
    index). Backward runs from the last layer to the first; each layer's gradients appear as
    its backward runs (``AccumulateGrad`` first in autograd's ready queue) and its checkpoint is
    freed when its last node has run. Recomputing layer ``i`` therefore holds ``i + 1``
    checkpoints, the masks of the kinds layers ``0..i`` use, the gradients of the lm_head and
    the final norm, of the layers after ``i``, and ``own`` bytes of layer ``i``'s (those made
    before its largest moment, :func:`full_finetuning_moments`). The token embedding's gradient
    is not among them: ``EmbeddingBackward`` is the graph's oldest node and runs after the
    first layer's backward; a tied embedding's lm_head part, made first, waits that long in its
    ``AccumulateGrad`` node's input buffer (the same bytes, counted). ``grads``: all
    gradients per GPU; ``per_layer``: one layer's; ``masks``: the bytes of the masks of every
    kind and their number of kinds (sliding and full layers: the first layer uses one)."""
    n = max(m.n_layer, 1)
    pc = count_params(m)
    late = pc.position_embedding + (pc.embedding if pc.lm_head else 0)
    late_bytes = late * weights.trainable_bytes(m, t) // sharding.divisors(t).gradients
    rest = max(0, grads - n * per_layer - late_bytes)  # the lm_head's and the final norm's
    every, kinds = masks
    first = Front(rest + own, ckpts, every)  # recomputing the last layer, first in backward
    # the other end: the first layer, or the first mixture-of-experts layer after DeepSeek's
    # dense ones (their recomputation is a dense layer's, smaller: mla.dense_layers)
    lead = min(latent.dense_layers(m), n - 1) if m.n_expert else 0
    masks_left = every // max(kinds, 1) if lead == 0 else every
    # one layer's input (activation offloading keeps two on the GPU: activations.checkpoint_bytes)
    one = ckpts // (min(n, 2) if t.activation_offloading else n)
    last = Front(rest + (n - 1 - lead) * per_layer + own, min(ckpts, one * (lead + 1)), masks_left)
    return max(first, last, key=lambda f: f.gradients + f.checkpoints + f.masks)


def softmax_own(m: ModelConfig) -> int:
    """Parameters of the recomputed layer whose gradients exist when backward reaches its eager
    attention's softmax: every one of the block's but the linears that read the attention
    norm's output (q/k/v and MLA's latent projections run before the softmax, so their
    backward comes after it) and that norm. The output projection, the MLP or the router and
    experts, and the second norm have run their backward (``AccumulateGrad`` first in
    autograd's ready queue, as in :func:`backward_front`)."""
    before = sum(x.params for x in block_linears(m) if x.source == "attn_in")
    return max(0, count_params(m).per_block - before - norm_params(m))


def recompute_moment(m: ModelConfig, t: TrainerConfig, tokens: int, dequant: int) -> Moment:
    """What the recomputed layer adds to its saved tensors and two hidden-size gradients at its
    largest moment: the 4-bit moments where they apply, the full fine-tuning moments of a
    dense layer (:func:`full_finetuning_moments`), else the dense MLP (or post-norm) backward
    with the bitsandbytes buffers on top (:func:`activations.recompute_backward_bytes`)."""
    moments = fourbit_moments(m, t, tokens, dequant)
    if moments is None:
        moments = full_finetuning_moments(m, t, tokens, dequant)
    if moments is None:
        return Moment("backward", act.recompute_backward_bytes(m, t, tokens), dequant)
    per_param, div = weights.trainable_bytes(m, t), sharding.divisors(t).gradients
    return max(moments, key=lambda x: x.extra + x.dequant + x.own * per_param // div)
