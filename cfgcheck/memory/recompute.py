"""The recomputed layer's largest moment under QLoRA as transformers + PEFT + bitsandbytes run it.

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
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory import activations as act
from cfgcheck.memory.params import adapted_modules, block_linears
from cfgcheck.memory.stack import FOUR_BIT, quantized, stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Moment:
    """Bytes the recomputed layer holds beyond its counted saved tensors and the two
    hidden-size gradients, and the bitsandbytes buffers alive at that moment."""

    name: str
    extra: int
    dequant: int


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


def recompute_moment(m: ModelConfig, t: TrainerConfig, tokens: int, dequant: int) -> Moment:
    """What the recomputed layer adds to its saved tensors and two hidden-size gradients at its
    largest moment: the 4-bit moments where they apply, else the dense MLP (or post-norm)
    backward with the bitsandbytes buffers on top (:func:`activations.recompute_backward_bytes`)."""
    moments = fourbit_moments(m, t, tokens, dequant)
    if moments is None:
        return Moment("backward", act.recompute_backward_bytes(m, t, tokens), dequant)
    return max(moments, key=lambda x: x.extra + x.dequant)
