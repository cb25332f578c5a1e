"""The allocations and frees of two training steps, in the order the step runs, from the same
mechanisms the allocated estimate models: the input of :mod:`cfgcheck.memory.allocsim`.

Granularity (what this sequence is and is not): the tensors that decide the caching allocator's
segments, each with its real size and lifetime, in the order gpu_measure.py's loop makes them
(benchmarks/calibration/gpu_measure.py: the model built on the GPU, the peaks reset, then two
steps of forward, ``loss.backward()``, ``opt.step()``, ``zero_grad(set_to_none=True)``):

* the build: every parameter tensor (module order: embedding, each layer's linears and norms,
  final norm, lm_head), then PEFT's fp32 adapters, then the batch;
* forward: the embedding output, then per layer the tensors autograd saves
  (:func:`cfgcheck.memory.activations.layer_activations`, cut into tensors of one hidden-size
  row per token, the rest as one tensor); with checkpointing nothing is saved: the working set
  of the layer's ops comes and goes (:func:`_transient_forward`), its input kept; the head's
  saved tensors; the logits (compute dtype), their fp32 upcast and log-softmax, the upcast
  and the logits freed when the loss is returned (transformers' ``ForCausalLMLoss``);
* backward: the NLL and log-softmax gradients (fp32), the 16-bit logits gradient, the
  lm_head's gradient, then per layer in reverse (recomputed first under checkpointing) two
  intermediate-size gradient temporaries, the layer's parameter gradients, its saved tensors
  freed, the hidden-state gradient handed on; the embedding's gradient last (tied: summed out
  of place with the lm_head's, ``torch/csrc/autograd/input_buffer.cpp`` ``accumulate``); after
  the first micro-batch each gradient is a new tensor added into ``.grad`` and freed
  (``AccumulateGrad::accumulateGrad``);
* the optimizer step: on the first step the states (``zeros_like`` per parameter), then the
  foreach temporaries (:func:`cfgcheck.memory.weights.optimizer_step_bytes`, one list);
  ``zero_grad`` frees the gradients.

The per-op sequence (rotary tables, norm statistics, every autograd temporary) is not
generated: tests/test_allocsim_traced.py runs the simulator on the CPU trace of the real op
sequence instead, and tests/test_memory_events.py checks this sequence's live bytes at each
phase against that trace. Covered: transformers, dense models, 16/32-bit weights, full or
LoRA, with or without checkpointing, AdamW / SGD; :func:`step_events` returns None otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cfgcheck.memory import weights
from cfgcheck.memory.activations import checkpoint_bytes, head_activations, layer_activations
from cfgcheck.memory.allocsim import END, FREE, REPEAT, RESET, Event
from cfgcheck.memory.params import block_linears, count_params
from cfgcheck.memory.stack import sdpa_masked, stack
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass
class Seq:
    events: list[Event] = field(default_factory=list)
    next_id: int = 1

    def alloc(self, size: int) -> int:
        i = self.next_id
        self.next_id += 1
        if size > 0:
            self.events.append((i, size))
        return i

    def free(self, *ids: int) -> None:
        self.events.extend((i, FREE) for i in ids)

    def reset(self) -> None:
        self.events.append((0, RESET))

    def mark(self, event: Event) -> None:
        self.events.append(event)


def covered(m: ModelConfig, t: TrainerConfig) -> bool:
    """The settings :func:`step_events` generates: hf, dense, no quantization, no sharding,
    no offload."""
    return (
        t.framework == "hf"
        and t.quantization == "none"
        and not m.weight_format
        and not (m.n_expert or 0)
        and t.devices * t.num_nodes == 1
        and t.optimizer in ("adamw", "sgd")
        and t.loss_chunking == "none"
        and not t.precision.endswith("-mixed")
        and t.sequences_per_sample == 1
        and t.context_parallel == 1
        and not t.activation_offloading
        and not t.reference_model
        and t.offload.optimizer == "none"
        and t.offload.params == "none"
    )


def _param_tensors(m: ModelConfig) -> list[tuple[str, int]]:
    """(kind, elements) of every parameter in module order."""
    full = [("embedding", m.rows * m.n_embd)]
    per_layer: list[tuple[str, int]] = []
    for x in block_linears(m):
        per_layer.append(("linear", x.in_features * x.out_features))
        if x.bias:
            per_layer.append(("bias", x.out_features))
    norm = m.n_embd
    n_norms = (1 if m.shared_attention_norm else 2) + m.post_attention_norm + m.post_mlp_norm
    per_layer += [("norm", norm)] * (n_norms * (2 if m.norm == "layernorm" else 1))
    for _ in range(m.n_layer):
        full.extend(per_layer)
    full += [("norm", norm)] * (2 if m.norm == "layernorm" else 1)
    if count_params(m).lm_head:
        full.append(("head", m.head_rows * m.n_embd))
    return full


def _pieces(total: int, row: int, limit: int = 1 << 30) -> list[int]:
    """``total`` bytes as up to ``limit`` tensors of ``row`` bytes, the rest as one more."""
    if row <= 0 or total <= 0:
        return [total] if total > 0 else []
    n, rest = divmod(total, row)
    if n > limit:
        n, rest = limit, total - limit * row
    return [row] * n + ([rest] if rest else [])


def layer_tensors(
    m: ModelConfig, t: TrainerConfig, masked: bool, tokens: int, seq: int
) -> list[int]:
    """One layer's saved bytes (:func:`layer_activations`) as the tensors that hold them: the
    attention probabilities (eager: the fp32 softmax output, then its 16-bit copy), the MLP's
    intermediate-size tensors (gate, activation, up, and the down projection's input when it
    is kept), then hidden-size rows, the rest as one tensor."""
    s = stack(m, t)
    la = layer_activations(m, t, masked)
    out: list[int] = []
    scores = la.attention_scores
    if scores:
        a = m.n_head
        first = 4 * a if scores > 4 * a else scores
        out += [x * seq * tokens for x in (first, scores - first) if x]
    inter = s.act * m.mlp_width
    mlp = _pieces(la.per_token, inter, 4 if m.mlp in ("swiglu", "geglu") else 2)
    rest = mlp.pop() if mlp and mlp[-1] != inter else 0
    out += [x * tokens for x in mlp]
    out += [x * tokens for x in _pieces(rest, s.residual * m.n_embd)]
    if la.per_layer:
        out.append(la.per_layer)
    return out


def step_events(m: ModelConfig, d: DataConfig, t: TrainerConfig, steps: int = 2) -> list[Event]:
    """Build, reset, then ``steps`` optimizer steps (see the module docstring)."""
    s = stack(m, t)
    seq = Pipeline.from_data(d).memory_length()  # as estimate.sequence_length
    b = t.micro_batch_size
    tokens = b * seq
    p, res = s.act, s.residual
    master = weights.master_bytes(t)
    full = t.finetuning == "full"
    ev = Seq()
    # the build
    params = _param_tensors(m)
    param_ids = [ev.alloc(n * master) for _, n in params]
    trainable = list(zip(param_ids, (n * master for _, n in params), strict=True)) if full else []
    if not full:
        for numel, count in weights.trainable_tensors(m, t):
            for _ in range(count):
                nb = numel * s.adapter
                trainable.append((ev.alloc(nb), nb))
    for _ in range(3 if b > 1 or d.collator != "packed" else 2):  # ids, mask / positions, labels
        ev.alloc(8 * tokens)
    ev.reset()
    masked = sdpa_masked(m, d, t, s, seq)
    pieces = layer_tensors(m, t, masked, tokens, seq)
    row = res * m.n_embd * tokens
    n_norms = (1 if m.shared_attention_norm else 2) + m.post_attention_norm + m.post_mlp_norm
    ckpt = t.gradient_checkpointing
    ckpt_layer = checkpoint_bytes(m, t, tokens) // max(1, m.n_layer)
    v = m.head_rows
    states: list[int] = []
    per_layer_params = (len(params) - 2 - (1 if count_params(m).lm_head else 0)) // max(
        1, m.n_layer
    )
    for step in range(steps):
        grads: dict[int, int] = {}
        accum = t.gradient_accumulation_steps
        # the first micro-batch makes the gradients; the others add into them, the same
        # allocations each time: one block repeated (allocsim.simulate skips a repetition that
        # changes nothing), with the same ids
        for micro in range(min(accum, 2)):
            if micro == 1:
                ev.mark((accum - 1, REPEAT))
                start = ev.next_id
            # forward
            hidden = ev.alloc(row)
            saved: list[list[int]] = []
            for _ in range(m.n_layer):
                if ckpt:  # nothing is saved: each op's output goes once its consumer ran
                    _transient_forward(ev, m, p, tokens, n_norms)
                    ids = [ev.alloc(ckpt_layer)]
                else:
                    ids = _layer_forward(ev, pieces, n_norms, 4 * m.n_embd * tokens)
                saved.append(ids)
            head = ev.alloc(head_activations(m, t) * tokens)
            logits = ev.alloc(p * v * tokens)
            up = ev.alloc(4 * v * tokens)
            logp = ev.alloc(4 * v * tokens)
            ev.free(up, logits)  # the loss is returned: the upcast and the output object go
            # backward
            g_nll = ev.alloc(4 * v * tokens)
            g_ls = ev.alloc(4 * v * tokens)
            ev.free(g_nll, logp)
            g_logits = ev.alloc(p * v * tokens)
            ev.free(g_ls)
            tied = full and m.tie_embeddings and not count_params(m).lm_head
            if full and count_params(m).lm_head:
                _grad(ev, grads, param_ids[-1], v * m.n_embd * master)
            elif tied:  # the shared weight's first gradient waits in autograd's input buffer
                head_grad = ev.alloc(v * m.n_embd * master)
            g_hidden = ev.alloc(p * m.n_embd * tokens)
            ev.free(g_logits, head)
            for i in reversed(range(m.n_layer)):
                if ckpt:
                    saved[i] += _layer_forward(ev, pieces, n_norms, 4 * m.n_embd * tokens)
                # the MLP's gradients (intermediate size), then each norm's fp32 backward
                tmp = [ev.alloc(p * m.mlp_width * tokens) for _ in range(2)]
                ev.free(*tmp)
                for _ in range(n_norms):
                    tmp = [ev.alloc(4 * m.n_embd * tokens) for _ in range(3)]
                    ev.free(*tmp)
                if full:
                    first = 1 + i * per_layer_params
                    for j in range(first, first + per_layer_params):
                        _grad(ev, grads, param_ids[j], params[j][1] * master)
                else:
                    n_adapters = len(trainable) // max(1, m.n_layer)
                    for pid, nb in trainable[i * n_adapters : (i + 1) * n_adapters]:
                        _grad(ev, grads, pid, nb)
                ev.free(*saved[i])
                new = ev.alloc(p * m.n_embd * tokens)
                ev.free(g_hidden)
                g_hidden = new
            if tied:
                # the embedding's dense gradient, summed out of place with the lm_head's one in
                # the input buffer of the shared weight's AccumulateGrad (both freed), then
                # made ``.grad`` or added into it
                dense = ev.alloc(params[0][1] * master)
                total = ev.alloc(params[0][1] * master)
                ev.free(head_grad, dense)
                if param_ids[0] in grads:
                    ev.free(total)
                else:
                    grads[param_ids[0]] = total
            elif full:
                _grad(ev, grads, param_ids[0], params[0][1] * master)
                for j in range(1 + m.n_layer * per_layer_params, len(params)):
                    if params[j][0] == "norm":
                        _grad(ev, grads, param_ids[j], params[j][1] * master)
            elif not full:  # adapters outside the layers (embedding / lm_head adapters)
                rest = trainable[m.n_layer * (len(trainable) // max(1, m.n_layer)) :]
                for pid, nb in rest:
                    _grad(ev, grads, pid, nb)
            ev.free(g_hidden, hidden)
            if micro == 1:
                ev.mark((0, END))
                ev.next_id = start
        # optimizer step
        if step == 0:
            per = 2 if t.optimizer == "adamw" else 1
            states = [ev.alloc(nb) for _, nb in trainable for _ in range(per)]
        if t.optimizer == "adamw":
            tmp = [ev.alloc(nb) for _, nb in trainable]  # _foreach_sqrt(exp_avg_sqs)
            ev.free(*tmp)
        ev.free(*grads.values())  # zero_grad(set_to_none=True)
    del states
    return ev.events


def _layer_forward(ev: Seq, pieces: list[int], n_norms: int, norm_tmp: int) -> list[int]:
    """A layer's forward: each norm's fp32 temporaries (``x.pow(2)`` and ``x * rsqrt``,
    transformers' ``LlamaRMSNorm``) come and go, the saved tensors stay."""
    for _ in range(n_norms):
        a = ev.alloc(norm_tmp)
        ev.free(a)
        a = ev.alloc(norm_tmp)
        ev.free(a)
    return [ev.alloc(x) for x in pieces]


def _transient_forward(ev: Seq, m: ModelConfig, act: int, tokens: int, n_norms: int) -> None:
    """A layer's forward under non-reentrant checkpointing (torch/utils/checkpoint.py: the
    saved-tensor hooks keep no tensor): what is live at once is the working set of the ops,
    as transformers' ``LlamaDecoderLayer`` runs them: a norm's fp32 temporaries, its output;
    the attention's output and projection; the residual sum; then the MLP (gated: gate, its
    activation, up, their product) and the down projection."""
    row = act * m.n_embd * tokens
    inter = act * m.mlp_width * tokens
    norm_tmp = 4 * m.n_embd * tokens
    gated = m.mlp in ("swiglu", "geglu")
    for block in range(2):
        for _ in range(n_norms if block == 0 else 0):
            a = ev.alloc(norm_tmp)
            b = ev.alloc(norm_tmp)
            ev.free(a, b)
        x = ev.alloc(row)
        if block == 0:  # attention: its output, then the o projection
            y = ev.alloc(row)
            ev.free(x)
            out = ev.alloc(row)
            ev.free(y)
        else:
            first = ev.alloc(inter)
            second = ev.alloc(inter)
            ev.free(first)
            if gated:
                up = ev.alloc(inter)
                prod = ev.alloc(inter)
                ev.free(second, up)
                second = prod
            out = ev.alloc(row)
            ev.free(second, x)
        res = ev.alloc(row)  # the residual sum
        ev.free(out, res)


def _grad(ev: Seq, grads: dict[int, int], param: int, nbytes: int) -> None:
    if param not in grads:  # the first gradient becomes ``.grad``
        grads[param] = ev.alloc(nbytes)
    else:  # accumulation: a new gradient, added into ``.grad`` in place, then freed
        ev.free(ev.alloc(nbytes))
