"""The allocations and frees of two training steps, in the order the step runs, from the same
mechanisms the allocated estimate models: the input of :mod:`cfgcheck.memory.allocsim`.

Granularity (what this sequence is and is not): the tensors that decide the caching allocator's
segments, each with its real size and lifetime, in the order gpu_measure.py's loop makes them
(benchmarks/calibration/gpu_measure.py: the model built on the GPU, the peaks reset, then two
steps of forward, ``loss.backward()``, ``opt.step()``, ``zero_grad(set_to_none=True)``):

* the build: every parameter tensor (module order: embedding, each layer's linears and norms,
  final norm, lm_head), a tied model's first lm_head weight made and freed
  (:func:`_untied_head_at_build`), then PEFT's fp32 adapters, then the batch;
* forward: the embedding output, then per layer the tensors autograd saves
  (:func:`cfgcheck.memory.activations.layer_activations`, cut into tensors of one hidden-size
  row per token, the rest as one tensor), each RMSNorm's fp32 temporaries, the down
  projection's input made and freed when nothing on it trains, each sub-block's output
  projection and residual sum made and freed; with checkpointing nothing is saved: the
  working set of the layer's ops comes and goes (:func:`_transient_forward`), its input kept;
  the final norm op by op (:func:`_final_norm`); the logits (compute dtype), their fp32
  upcast and log-softmax, the upcast, the logits and the unsaved norm output freed when the
  loss is returned (transformers' ``ForCausalLMLoss``);
* backward: the NLL and log-softmax gradients (fp32), the 16-bit logits gradient, the
  lm_head's gradient, then per layer in reverse (recomputed first under checkpointing) the
  MLP's backward node by node as autograd runs it (:func:`_mlp_backward`: each projection's
  weight gradient made while the intermediate-size tensors are live, each node's saved
  tensors freed after it), the norms' fp32 backward, the other parameters' gradients, the
  rest of the saved tensors freed, the hidden-state gradient handed on; the embedding's
  gradient last (tied: summed out of place with the lm_head's,
  ``torch/csrc/autograd/input_buffer.cpp`` ``accumulate``); after the first micro-batch
  each gradient is a new tensor added into ``.grad`` and freed
  (``AccumulateGrad::accumulateGrad``);
* cuBLAS's workspace (:func:`~cfgcheck.memory.event_seq.blas_workspace`) after the first
  matmul of the forward and of the backward (two threads), cuBLASLt's after the forward's
  first biased linear, kept;
* the optimizer step: on the first step the states (``zeros_like`` per parameter), then the
  foreach temporaries (:func:`cfgcheck.memory.weights.optimizer_step_bytes`, one list);
  ``zero_grad`` frees the gradients.

For transformers' Llama layout, checkpointed or not (:func:`cfgcheck.memory.layer_ops.exact`:
full fine-tuning in 16/32-bit weights or LoRA with q_proj) each micro-batch is generated op
by op by :mod:`cfgcheck.memory.layer_ops` (the mask, rotary tables, norm statistics, every
autograd temporary above; equal to the traced sequence above 1 MiB, tests/test_layer_ops.py),
and so are Gemma's and Gemma 3's (:mod:`cfgcheck.memory.gemma_ops`, tests/test_gemma_ops.py).
Elsewhere the per-op sequence is not generated: tests/test_allocsim_traced.py runs the
simulator on the trace of the real op sequence instead (at the H100 rows' full size on meta
tensors: their allocated peak to the byte), tests/test_memory_events.py checks this
sequence's simulated figures against that
trace, and benchmarks/allocator_sequence_diff.py shows where the two first part. Covered:
transformers, dense models, 16/32-bit weights, full or LoRA, with or without checkpointing,
AdamW / SGD, the full loss or Liger's fused one (:mod:`cfgcheck.memory.events_liger`); QLoRA
on Llama-like models is generated op by op by :mod:`cfgcheck.memory.events_kbit`
(:func:`step_events` hands it over); Mixtral's and Qwen3-MoE's sparse MoE block op by op by
:mod:`cfgcheck.memory.events_moe` in the Llama layer; :func:`covered` says which runs have a
sequence.
"""

from __future__ import annotations

from cfgcheck.memory import (
    events_moe,
    gemma_layout,
    gpt_oss_layout,
    gpt_oss_ops,
    layer_ops,
    llama_step,
    moe_layout,
    weights,
)
from cfgcheck.memory.activations import checkpoint_bytes, head_activations, layer_activations
from cfgcheck.memory.allocsim import END, REPEAT, Event
from cfgcheck.memory.event_seq import BLAS_LT_WORKSPACE, Seq, blas_workspace, one_plain_gpu
from cfgcheck.memory.events_liger import covered_fused, fused_loss
from cfgcheck.memory.modules import architecture_of
from cfgcheck.memory.params import adapted_modules, block_linears, count_params
from cfgcheck.memory.stack import sdpa_masked, stack
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


def covered(m: ModelConfig, t: TrainerConfig) -> bool:
    """The settings :func:`step_events` generates: hf, dense, no quantization, no sharding,
    no offload; QLoRA on Llama-like models (:mod:`cfgcheck.memory.events_kbit`); Mixtral,
    Qwen3-MoE and OLMoE with LoRA on attention and their experts or full fine-tuning
    (:mod:`cfgcheck.memory.events_moe`); gpt-oss with LoRA on attention and its experts
    (:mod:`cfgcheck.memory.gpt_oss_ops`)."""
    from cfgcheck.memory.events_kbit import kbit_covered

    return kbit_covered(m, t) or _dense_covered(m, t)


Order = tuple[bool, ...] | None


def orders(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> tuple[Order, ...]:
    """The ``type_order`` values whose events a run of these settings may make: both orders of
    Gemma 3's two attention types, which a process's string hashing picks
    (:func:`cfgcheck.memory.gemma_layout.type_orders`); ``(None,)`` where the events are one
    sequence."""
    from cfgcheck.memory.events_kbit import kbit_covered

    if kbit_covered(m, t) or not gemma_layout.exact(m, d, t):
        return (None,)
    found = gemma_layout.type_orders(m)
    return found if len(found) > 1 else (None,)


def _dense_covered(m: ModelConfig, t: TrainerConfig) -> bool:
    return (
        one_plain_gpu(t)
        and t.quantization == "none"
        and not m.weight_format
        and (not (m.n_expert or 0) or moe_layout.covered(m, t) or gpt_oss_layout.covered(m, t))
        and t.optimizer in ("adamw", "sgd")
        and (t.loss_chunking == "none" or covered_fused(m, t))
        and not t.precision.endswith("-mixed")
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
    if m.n_expert:  # a MoE layer's parameters in module order (router, experts among them)
        moe = moe_layout.layer_params(m)
        per_layer = [("norm" if x.endswith("norm") else "linear", n) for x, n in moe]
    for _ in range(m.n_layer):
        full.extend(per_layer)
    full += [("norm", norm)] * (2 if m.norm == "layernorm" else 1)
    if count_params(m).lm_head:
        full.append(("head", m.head_rows * m.n_embd))
    return full


def _untied_head_at_build(ev: Seq, m: ModelConfig, master: int) -> None:
    """The lm_head weight a tied model makes and drops while it is built: ``XForCausalLM.
    __init__`` makes ``nn.Linear(hidden, vocab)`` (its weight allocated and initialised on the
    build's device; transformers 5.24 ``models/llama/modeling_llama.py:422``,
    ``models/gemma/modeling_gemma.py:443``), then ``post_init`` -> ``init_weights`` ->
    ``tie_weights`` sets the embedding's parameter in its place (``modeling_utils.py:2624``
    ``setattr(parent, name, source_param)``) and the first weight is freed, its segment kept in
    the allocator's cache and counted in the reserved figure that ``reset_peak_memory_stats``
    keeps (traced on CPU in tests/test_memory_events.py). This is gpu_measure.py's
    build, ``AutoModelForCausalLM.from_config`` under ``torch.device("cuda")``, for a model
    named by its shape. A checkpoint (``model.pretrained``) is loaded with ``from_pretrained``,
    which builds the model on the meta device with its ties held back
    (``modeling_utils.py:3816`` ``init.no_tie_weights()``, ``:3840`` ``torch.device("meta")``)
    and materialises only the checkpoint's tensors: no such weight (traced too)."""
    if (
        m.pretrained is None
        and m.tie_embeddings
        and m.head == "causal_lm"
        and not count_params(m).lm_head
    ):
        ev.free(ev.alloc(m.head_rows * m.n_embd * master))


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
) -> tuple[list[int], slice]:
    """One layer's saved bytes (:func:`layer_activations`) as the tensors that hold them, in
    the order the layer's forward makes them: the attention probabilities (eager: the fp32
    softmax output, then its 16-bit copy), hidden-size rows (the norms' and the attention's
    tensors, made before the MLP runs; transformers' ``LlamaDecoderLayer.forward``), the
    rest of them as one tensor, then the MLP's intermediate-size tensors (gate, activation,
    up, and the down projection's input when it is kept; a negative size: a tensor made and
    freed). The slice picks the MLP's tensors among the kept (positive) ones."""
    s = stack(m, t)
    la = layer_activations(m, t, masked)
    out: list[int] = []
    scores = la.attention_scores
    if scores:
        a = m.n_head
        first = 4 * a if scores > 4 * a else scores
        out += [x * seq * tokens for x in (first, scores - first) if x]
    inter = s.act * m.mlp_width
    # the down projection keeps its input only when its weight or an adapter on it trains
    # (``MmBackward0`` saves ``self`` for the weight's gradient); else that input (the
    # activation's product, or the GELU's output) goes once the projection ran
    full = t.finetuning == "full"
    adapted = frozenset() if full else adapted_modules(m, t.lora.targets, t.framework).names
    kept = full or any(x.source == "mlp_act" and x.name in adapted for x in block_linears(m))
    gated = m.mlp in ("swiglu", "geglu")
    mlp = _pieces(la.per_token, inter, (3 if gated else 1) + kept)
    rest = mlp.pop() if mlp and mlp[-1] != inter else 0
    out += [x * tokens for x in _pieces(rest, s.residual * m.n_embd)]
    mlp_kept = slice(len(out), len(out) + len(mlp))
    out += [x * tokens for x in mlp]
    if not kept:
        out.append(-inter * tokens)  # made and freed
    if la.per_layer:
        out.append(la.per_layer)
    return out, mlp_kept


def step_events(
    m: ModelConfig,
    d: DataConfig,
    t: TrainerConfig,
    steps: int = 2,
    type_order: tuple[bool, ...] | None = None,
) -> list[Event]:
    """Build, reset, then ``steps`` optimizer steps (see the module docstring).
    ``type_order``: the order Gemma 3's per-attention-type tensors are made in (one of
    :func:`orders`; None: this process's)."""
    from cfgcheck.memory.events_kbit import kbit_covered, kbit_step_events

    if kbit_covered(m, t):
        return kbit_step_events(m, d, t, steps)
    s = stack(m, t)
    seq = Pipeline.from_data(d).memory_length()  # as estimate.sequence_length
    b = t.micro_batch_size
    tokens = b * seq
    p, res = s.act, s.residual
    master = weights.master_bytes(t)
    full = t.finetuning == "full"
    biased = any(x.bias for x in block_linears(m))
    ev = Seq(workspace=blas_workspace(t), lt_workspace=BLAS_LT_WORKSPACE if biased else 0)
    # the build
    params = _param_tensors(m)
    param_ids = [ev.alloc(n * master) for _, n in params]
    _untied_head_at_build(ev, m, master)
    trainable = list(zip(param_ids, (n * master for _, n in params), strict=True)) if full else []
    gemma = gemma_layout.exact(m, d, t)
    oss = gpt_oss_layout.experts(m, t)
    moe = events_moe.Moe.of(m, t) if m.n_expert and oss is None else None  # moe_layout.covered
    exact = gemma or layer_ops.exact(m, d, t) or moe is not None or oss is not None
    qk_w = gemma_layout.qk_norm_weights(ev.alloc, m, master) if gemma else []
    for nb in gemma_layout.outside_tensors(m, t, master, s.adapter) if gemma else []:
        ev.alloc(nb)
    if full:
        trainable += [p for x in qk_w for ps in x.values() for p in ps]
    adapters: list[dict[str, tuple[tuple[int, int], ...]]] = []
    if not full and exact:  # PEFT's lora_A and lora_B per adapted linear, in module order
        kinds = _kinds(m, t, gemma)
        experts = moe_layout.adapter_sizes(m, t)  # PEFT's ParamWrapper on expert parameters
        r = t.lora.rank or 0
        linears = block_linears(m)
        lora = [
            (x.name, (r * x.in_features * s.adapter, x.out_features * r * s.adapter))
            for x in linears
            if kinds[x.name] == "lora"
        ]
        for _ in range(m.n_layer):
            made: dict[str, tuple[tuple[int, int], ...]] = {x.name: () for x in linears}
            for name, sizes in lora:
                made[name] = tuple((ev.alloc(nb), nb) for nb in sizes)
                trainable += made[name]
            for name, *numels in experts:
                key = "experts." + name
                made[key] = tuple((ev.alloc(n * s.adapter), n * s.adapter) for n in numels)
                trainable += made[key]
            adapters.append(made)
    elif not full:
        for numel, count in weights.trainable_tensors(m, t):
            for _ in range(count):
                nb = numel * s.adapter
                trainable.append((ev.alloc(nb), nb))
    for _ in range(3 if b > 1 or d.collator != "packed" else 2):  # ids, mask / positions, labels
        ev.alloc(8 * tokens)
    ev.reset()
    masked = sdpa_masked(m, d, t, s, seq)
    # the saved tensors of a layer not generated op by op
    pieces, mlp_kept = ([], slice(0)) if exact else layer_tensors(m, t, masked, tokens, seq)
    gated = m.mlp in ("swiglu", "geglu")
    # each MLP linear's parameters (weight, bias) as offsets in a layer's parameters, the last
    # linear first: the order autograd reaches them
    mlp_offsets: list[list[int]] = []
    offset = 0
    for x in block_linears(m):
        if {"gate_proj", "up_proj", "down_proj"} & set(x.roles):
            mlp_offsets.insert(0, list(range(offset, offset + 1 + x.bias)))
        offset += 1 + x.bias
    row = res * m.n_embd * tokens
    n_norms = (1 if m.shared_attention_norm else 2) + m.post_attention_norm + m.post_mlp_norm
    norm_tmp = 4 * m.n_embd * tokens if m.norm == "rmsnorm" else 0
    ckpt = t.gradient_checkpointing
    # how an RMSNorm runs: fp32 weights need no fp32 copy; Gemma multiplies in fp32 first
    norm_kind = "fp32" if res == 4 else ("gemma" if s.norm_out == 4 else "llama")
    ckpt_layer = checkpoint_bytes(m, t, tokens) // max(1, m.n_layer)
    states: list[int] = []
    untied = bool(count_params(m).lm_head)  # else the lm_head is the embedding
    per_layer_params = (len(params) - 2 - (1 if untied else 0)) // max(1, m.n_layer)
    # the Llama layout op by op (cfgcheck/memory/layer_ops.py)
    ops = None
    if exact:
        hs = m.head_size or m.n_embd // m.n_head
        ops = layer_ops.Ops(
            ev.alloc, ev.free, ev.matmul, p=p, b=b, s=seq, h=m.n_embd * tokens,
            q=m.n_head * hs * tokens, kv=(m.n_query_groups or m.n_head) * hs * tokens,
            inter=m.mlp_width * tokens, head_dim=hs, n_head=m.n_head, vocab=m.head_rows,
            mask=masked, kinds=_kinds(m, t, gemma),
            rank=t.lora.rank or 0,
            dropout=bool(t.lora.dropout), packed=d.collator == "packed",
            window=m.sliding_window_size is not None,
            mask_first=architecture_of(m) in ("qwen2", *gemma_layout.GEMMA3),
            **(gemma_layout.layout(m, type_order) if gemma else {}),
        )  # fmt: skip
        sized = [(pid, n * master) for pid, (_, n) in zip(param_ids, params, strict=True)]
        frozen = (0, 0)
        layer_w: list[dict[str, tuple[tuple[int, int], ...]]] = []
        norms = gemma_layout.norm_names(m)
        names = [*layer_ops.LINEARS, *norms]
        if full and moe is not None:  # by name: the router and experts among them
            names = [x for x, _ in moe_layout.layer_params(m)]
        for i in range(m.n_layer):
            first = 1 + i * per_layer_params
            if full:
                layer_w.append({x: (sized[first + j],) for j, x in enumerate(names)})
            else:
                layer_w.append({**adapters[i], **dict.fromkeys(norms, (frozen,))})
            if qk_w:
                layer_w[-1].update(qk_w[i])
        exact_w = llama_step.Weights(
            layer_w,
            sized[-1 - untied] if full else frozen,
            sized[-1 if untied else 0] if full else None,
            sized[0] if full else None,
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
            if ops is not None:
                ops.grads = grads
                if oss is not None:  # gpt-oss (gpt_oss_ops.py)
                    gpt_oss_ops.micro_batch(ops, adapters, oss, t.gradient_checkpointing)
                else:
                    llama_step.micro_batch(
                        ops,
                        exact_w,
                        t.gradient_checkpointing,
                        moe,
                        qk_norm=m.norm_qk and moe is not None,
                    )
                if micro == 1:
                    ev.mark((0, END))
                    ev.next_id = start
                continue
            # forward
            hidden = ev.alloc(row)
            saved: list[list[int]] = []
            mlp_ids: list[list[int]] = []  # the MLP's saved tensors, per layer
            for _ in range(m.n_layer):
                if ckpt:  # nothing is saved: each op's output goes once its consumer ran
                    _transient_forward(ev, m, p, tokens, n_norms, norm_kind)
                    ids = [ev.alloc(ckpt_layer)]
                else:
                    ids = _layer_forward(ev, pieces, n_norms, norm_tmp, p * m.n_embd * tokens)
                saved.append(ids)
                mlp_ids.append([] if ckpt else ids[mlp_kept])
            head, later = _final_norm(ev, m, t, tokens)
            tied = full and m.tie_embeddings and not untied
            if t.loss_chunking == "fused":  # Liger's: no logits (events_liger.py)
                g_hidden = fused_loss(ev, m, t, tokens, later)
                ev.matmul("backward")  # the backward's first matmul comes later: moved here
                ev.free(*head)
            else:
                g_hidden, head_grad = _loss(ev, m, t, tokens, later, head, grads, param_ids)
            for i in reversed(range(m.n_layer)):
                if ckpt:
                    ids = _layer_forward(ev, pieces, n_norms, norm_tmp, p * m.n_embd * tokens)
                    saved[i] += ids
                    mlp_ids[i] = ids[mlp_kept]
                # the MLP's backward as autograd runs it, its weights' gradients made while
                # its intermediate-size tensors are live (:func:`_mlp_backward`); then each
                # norm's fp32 backward and the other parameters' gradients
                first = 1 + i * per_layer_params
                mlp_grads = [
                    [(param_ids[first + j], params[first + j][1] * master) for j in js]
                    for js in mlp_offsets
                ]
                g_mlp = _mlp_backward(
                    ev, grads, mlp_grads if full else [], mlp_ids[i], p * m.mlp_width * tokens,
                    p * m.n_embd * tokens, gated,
                )  # fmt: skip
                for _ in range(n_norms):
                    tmp = [ev.alloc(4 * m.n_embd * tokens) for _ in range(3)]
                    ev.free(*tmp)
                ev.free(g_mlp)
                if full:
                    done = {first + j for js in mlp_offsets for j in js}
                    for j in reversed(range(first, first + per_layer_params)):
                        if j not in done:
                            _grad(ev, grads, param_ids[j], params[j][1] * master)
                else:
                    n_adapters = len(trainable) // max(1, m.n_layer)
                    for pid, nb in trainable[i * n_adapters : (i + 1) * n_adapters]:
                        _grad(ev, grads, pid, nb)
                ev.free(*(x for x in saved[i] if x not in mlp_ids[i]))
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
            # the list goes when ``_multi_tensor_adamw`` returns: CPython's ``list_dealloc``
            # drops its items last first (Objects/listobject.c)
            ev.free(*reversed(tmp))
        # zero_grad(set_to_none=True): the parameters in their group's order
        ev.free(*(grads[pid] for pid, _ in trainable if pid in grads))
    del states
    return ev.events


def _loss(
    ev: Seq,
    m: ModelConfig,
    t: TrainerConfig,
    tokens: int,
    later: list[int],
    head: list[int],
    grads: dict[int, int],
    param_ids: list[int],
) -> tuple[int, int]:
    """The logits, their fp32 upcast and log-softmax, the loss's backward, the lm_head's
    gradients: returns the final norm output's gradient and, tied, the shared weight's first
    gradient (waiting in autograd's input buffer; 0 otherwise)."""
    s = stack(m, t)
    p, v = s.act, m.head_rows
    master = weights.master_bytes(t)
    full = t.finetuning == "full"
    head_grad = 0
    logits = ev.alloc(p * v * tokens)
    up = ev.alloc(4 * v * tokens)
    logp = ev.alloc(4 * v * tokens)
    ev.free(up, *later, logits)  # the loss is returned: the upcast and the output object go
    # backward
    g_nll = ev.alloc(4 * v * tokens)
    g_ls = ev.alloc(4 * v * tokens)
    ev.free(g_nll, logp)
    g_logits = ev.alloc(p * v * tokens)
    ev.free(g_ls)
    tied = full and m.tie_embeddings and not count_params(m).lm_head
    if full and count_params(m).lm_head:
        _grad(ev, grads, param_ids[-1], v * m.n_embd * master)
        ev.matmul("backward")  # the lm_head's weight gradient: the first matmul
    elif tied:  # the shared weight's first gradient waits in autograd's input buffer
        head_grad = ev.alloc(v * m.n_embd * master)
        ev.matmul("backward")
    g_hidden = ev.alloc(p * m.n_embd * tokens)
    ev.matmul("backward")
    ev.free(g_logits, *head)
    return g_hidden, head_grad


def _layer_forward(ev: Seq, pieces: list[int], n_norms: int, norm_tmp: int, row: int) -> list[int]:
    """A layer's forward: each RMSNorm's fp32 temporaries (``x.pow(2)`` and ``x * rsqrt``,
    transformers' ``LlamaRMSNorm``; ``norm_tmp`` 0 for LayerNorm, one kernel) come and go,
    the saved tensors stay."""
    for _ in range(n_norms if norm_tmp else 0):
        a = ev.alloc(norm_tmp)
        ev.free(a)
        a = ev.alloc(norm_tmp)
        ev.free(a)
    ids = []
    for x in pieces:
        if x < 0:  # a tensor the layer makes and frees (:func:`layer_tensors`)
            ev.free(ev.alloc(-x))
            continue
        ids.append(ev.alloc(x))
        ev.matmul("forward")  # the first layer's first projection (no-op after it)
    # the attention's and the MLP's output projections, each added to the residual stream and
    # freed; the sums go as the next ones are made (nothing saves them)
    sums = []
    for _ in range(2):
        out = ev.alloc(row)
        sums.append(ev.alloc(row))
        ev.free(out)
    ev.free(*sums)
    return ids


def _final_norm(
    ev: Seq, m: ModelConfig, t: TrainerConfig, tokens: int
) -> tuple[list[int], list[int]]:
    """The final norm op by op. ``LlamaRMSNorm`` (transformers): ``x.to(float32)`` (kept by
    ``pow`` and ``mul``; none for fp32 weights), ``pow(2)`` (gone after ``mean``),
    ``x * rsqrt(variance)``, its cast back (``GemmaRMSNorm`` multiplies by ``1 + weight`` in
    fp32 first), ``weight * ...``, the normalized tensor kept when the weight trains;
    ``LayerNorm``: one kernel (``native_layer_norm``). The output is kept when the lm_head
    trains, else it goes when the forward returns. Returns the ids kept for the backward (the
    rest of :func:`head_activations` as one more) and those freed with the logits."""
    s = stack(m, t)
    full = t.finetuning == "full"
    h = m.n_embd * tokens
    kept: list[int] = []
    used = 0  # bytes of head_activations that ``kept`` holds
    if m.norm == "rmsnorm":
        fp32 = s.residual == 4
        if not fp32:
            kept.append(ev.alloc(4 * h))
            used += 4 * h
        ev.free(ev.alloc(4 * h))  # pow(2)
        c = ev.alloc(4 * h)  # x * rsqrt(variance)
        if s.norm_out == 4 and not fp32:  # Gemma: c * (1 + weight.float()), then the cast
            prod = ev.alloc(4 * h)
            out = ev.alloc(s.residual * h)
            ev.free(prod)
            normalized = c
        else:
            normalized = c if fp32 else ev.alloc(s.norm_out * h)  # the cast back
            out = ev.alloc(s.residual * h)  # weight * normalized
            if normalized != c:
                ev.free(c)
        if full:
            kept.append(normalized)
            used += (4 if normalized == c else s.norm_out) * h
        else:
            ev.free(normalized)
    else:
        out = ev.alloc(s.residual * h)
    later: list[int] = []
    if full and not s.linear_cast:  # the lm_head's input
        kept.append(out)
        used += s.residual * h
    else:
        later.append(out)
    rest = head_activations(m, t) * tokens - used
    if rest > 0:
        kept.append(ev.alloc(rest))
    return kept, later


def _transient_forward(
    ev: Seq, m: ModelConfig, act: int, tokens: int, n_norms: int, norm_kind: str
) -> None:
    """A layer's forward under non-reentrant checkpointing (torch/utils/checkpoint.py: the
    saved-tensor hooks keep no tensor): what is live at once is the working set of the ops,
    as transformers' ``LlamaDecoderLayer`` runs them: each sub-block's norm op by op
    (:func:`_rms_norm`), its output; the attention's output and projection; the residual sum;
    then the MLP (gated: gate, its activation, up, their product) and the down projection."""
    row = act * m.n_embd * tokens
    inter = act * m.mlp_width * tokens
    gated = m.mlp in ("swiglu", "geglu")
    for block in range(2):
        # the norms before the sub-block (post-norms, Gemma 2, counted with them)
        k = n_norms - n_norms // 2 if block == 0 else n_norms // 2
        if m.norm == "rmsnorm" and k:
            for _ in range(k - 1):
                ev.free(_rms_norm(ev, norm_kind, m.n_embd * tokens, row))
            x = _rms_norm(ev, norm_kind, m.n_embd * tokens, row)
        else:
            x = ev.alloc(row)
        if block == 0:  # attention: its output, then the o projection
            y = ev.alloc(row)
            ev.matmul("forward")
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


def _rms_norm(ev: Seq, kind: str, h: int, row: int) -> int:
    """An RMSNorm whose outputs nothing saves (a checkpointed forward), op by op as the CPU
    trace of the step shows it: transformers' ``LlamaRMSNorm`` makes ``x.to(float32)``,
    ``pow(2)`` (freed after ``mean``), ``x * rsqrt(variance)`` (the copy freed), its cast back,
    ``weight * ...`` (the cast and the fp32 product freed); ``GemmaRMSNorm`` multiplies the
    fp32 product by ``1 + weight.float()`` before the cast; with fp32 weights there is no
    copy and no cast. Returns the output's id (``row`` bytes)."""
    copy = [] if kind == "fp32" else [ev.alloc(4 * h)]
    ev.free(ev.alloc(4 * h))  # pow(2)
    normed = ev.alloc(4 * h)  # x * rsqrt(variance)
    ev.free(*copy)
    if kind == "gemma":
        prod = ev.alloc(4 * h)  # * (1 + weight.float())
        ev.free(normed)
        out = ev.alloc(row)  # the cast back
        ev.free(prod)
    elif kind == "fp32":
        out = ev.alloc(row)  # weight * normed
        ev.free(normed)
    else:
        cast = ev.alloc(row)  # the cast back (the compute dtype)
        out = ev.alloc(row)  # weight * cast
        ev.free(cast, normed)
    return out


def _mlp_backward(
    ev: Seq,
    grads: dict[int, int],
    lin_grads: list[list[tuple[int, int]]],
    ids: list[int],
    inter: int,
    row: int,
    gated: bool,
) -> int:
    """The MLP's backward as autograd runs it, for its saved tensors ``ids`` (gated: gate,
    activation, up, and the down projection's input when kept; else the up projection's
    output, and the activation's when kept) and its linears' parameter gradients
    ``lin_grads`` (the down projection first; empty when nothing on them trains).

    Autograd runs a node once its gradient is complete, the node made last in the forward
    first (``ReadyQueue::CompareNodeTaskTime``: the higher ``sequence_nr``,
    torch/csrc/autograd/engine.h), and releases the node's saved tensors right after it ran
    (``Engine::evaluate_function``: ``call_function``, then ``fn.release_variables()`` unless
    ``keep_graph_``, torch/csrc/autograd/engine.cpp; e.g. ``MulBackward0::release_variables``
    resets ``self_`` and ``other_``, generated ``Functions.h``); torch 2.13.0, git
    cf30153c4c13, as installed and traced. So each projection's weight gradient is made while
    the MLP's intermediate-size tensors and gradients are still live, not after the layer:
    the down projection (``MmBackward0``: its weight's gradient, then its input's, as the
    step's CPU trace shows; the product freed), the product's ``MulBackward0`` (two
    intermediate-size gradients, ``other``'s first; the activation and up freed), the up
    projection, the activation's backward (the gate freed), the gate projection, the two
    input gradients summed. Under checkpointing the recomputation stops once it has made the
    last tensor the original forward saved (torch/utils/checkpoint.py
    ``_recomputation_hook``, ``_StopRecomputationError`` with ``early_stop``, the default of
    non-reentrant checkpointing): the MLP's product, so the same tensors are live. Returns the
    input gradient's id (freed by the caller after the norm's backward)."""
    own = list(ids)
    lin = [*lin_grads, [], [], []]

    def take(k: int) -> list[int]:
        return [own[k]] if k < len(own) else []

    for pid, nb in lin[0]:
        _grad(ev, grads, pid, nb)
    g_down = ev.alloc(inter)  # the down projection's input gradient
    if gated:
        ev.free(*take(3))  # the product
        g_up, g_act = ev.alloc(inter), ev.alloc(inter)
        ev.free(*take(1), *take(2), g_down)
        for pid, nb in lin[1]:
            _grad(ev, grads, pid, nb)
        g_in = ev.alloc(row)
        ev.free(g_up)
        g_gate = ev.alloc(inter)  # the activation's backward
        ev.free(*take(0), g_act)
        for pid, nb in lin[2]:
            _grad(ev, grads, pid, nb)
        g_in2 = ev.alloc(row)
        ev.free(g_gate)
        total = ev.alloc(row)
        ev.free(g_in, g_in2)
        return total
    ev.free(*take(1))  # the activation's output
    g_act = ev.alloc(inter)  # the activation's backward
    ev.free(*take(0), g_down)
    for pid, nb in lin[1]:
        _grad(ev, grads, pid, nb)
    g_in = ev.alloc(row)
    ev.free(g_act)
    return g_in


def _grad(ev: Seq, grads: dict[int, int], param: int, nbytes: int) -> None:
    if param not in grads:  # the first gradient becomes ``.grad``
        grads[param] = ev.alloc(nbytes)
    else:  # accumulation: a new gradient, added into ``.grad`` in place, then freed
        ev.free(ev.alloc(nbytes))


def _kinds(m: ModelConfig, t: TrainerConfig, gemma: bool) -> dict[str, str]:
    """Each adapted linear's kind, from the layout's own module."""
    if gemma:
        return gemma_layout.kinds(m, t) or {}
    return layer_ops.kinds(m, t) or moe_layout.kinds(m, t) or {}
