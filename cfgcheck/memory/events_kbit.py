"""The step's allocations and frees under QLoRA as users run it (a 4-bit bitsandbytes base,
``prepare_model_for_kbit_training``, PEFT LoRA): the input of :mod:`cfgcheck.memory.allocsim`
for the runs :func:`cfgcheck.memory.events.step_events` leaves out.

Op by op, with the dense Llama layout's ops (:mod:`cfgcheck.memory.layer_ops`; the 4-bit linear
in :mod:`cfgcheck.memory.kbit_ops`): every tensor of the token dimension (hidden,
query/key/value, intermediate, rank-r), every dequantized weight and the attention mask, each
made and freed where the CPU trace of gpu_measure.py's loop makes and frees it
(tests/alloc_tracer.py with bitsandbytes 0.50's CPU backend; tests/test_memory_events_kbit.py
checks the sizes and their order, tests/test_alloc_identity.py which tensor each free undoes).
Left out: per-token statistics and scalars (norm variances, rotary tables, the loss), which the
small pool holds (``Ops.stats`` False).

The mechanisms, per source:

* the stream is fp32: ``prepare_model_for_kbit_training`` (peft src/peft/utils/other.py) casts
  the embedding, norms and lm_head to fp32; ``Linear4bit.forward`` (bitsandbytes
  nn/modules.py) casts its input to the compute dtype (bf16) and its output back
  (``.to(inp_dtype)``); LoRA keeps fp32 (its output added to PEFT's copy of the base output,
  ``result = result.clone()``, peft tuners/lora/bnb.py ``Linear4bit.forward``);
* ``MatMul4Bit`` (bitsandbytes autograd/_functions.py) saves nothing of its input; its
  backward dequantizes the weight (``F.dequantize_4bit``: with double quantization the fp32
  absmax first, ``dequantize_blockwise`` then ``absmax += offset``), ``matmul``s, frees it;
* on CUDA ``gemm_4bit`` above 1536 rows (``_gemm_4bit_custom_max_m``, backends/cuda/ops.py)
  runs ``_dequant_linear_fallback`` inside the op: the nested absmax (two fp32 vectors), the
  weight in the compute dtype, then ``F.linear``'s output, all but the output freed when it
  returns. A CPU trace cannot see it (one op): :func:`linear_forward` adds it for CUDA;
* the lm_head is fp32: the logits are fp32 and ``logits.float()`` (transformers
  ``ForCausalLMLoss``) makes no copy; nothing saves the final norm's output (frozen head);
* autograd frees each node's saved tensors once it ran (a recomputed one with the node's
  apply, before its incoming gradient: ``Ops.unpacked``); non-reentrant checkpointing
  recomputes a layer when its first saved tensor is unpacked and stops after the last one is
  packed (torch/utils/checkpoint.py, ``_StopRecomputationError``), dropping the rest;
* the optimizer: bitsandbytes' paged 8-bit AdamW keeps its states in managed memory (outside
  the caching allocator: ``F.get_paged``); in the allocator only its per-block fp32 absmax
  (``Optimizer8bit.init_state``, block 256, two per tensor of 4096 elements or more).
"""

from __future__ import annotations

from cfgcheck.memory.allocsim import END, REPEAT, Event
from cfgcheck.memory.event_seq import Seq, blas_workspace, one_plain_gpu
from cfgcheck.memory.kbit_layer import Layout, layer_backward, layer_forward, norm, norm_back
from cfgcheck.memory.kbit_ops import ATTN_IN, BLOCK, NESTED_BLOCK, KbitOps, Linear
from cfgcheck.memory.params import adapted_modules, block_linears, count_params
from cfgcheck.memory.stack import FOUR_BIT, sdpa_masked, stack
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

GEMM_4BIT_CUSTOM_MAX_M = 1536  # bitsandbytes backends/cuda/ops.py ``_gemm_4bit_custom_max_m``
OPT_BLOCK = 256  # bitsandbytes' blockwise 8-bit optimizer states


LLAMA_LINEARS = frozenset(
    {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
)


def kbit_covered(m: ModelConfig, t: TrainerConfig) -> bool:
    """QLoRA on a Llama-like decoder (RMSNorm, gated MLP with separate projections, no biases,
    full rotary, sdpa, a causal LM head) as gpu_measure.py runs it: transformers + PEFT +
    bitsandbytes, one GPU, adapters on the block's linears only."""
    if not (
        one_plain_gpu(t)
        and t.quantization in FOUR_BIT
        and t.finetuning in ("qlora", "lora")
        and t.precision == "bf16-true"
        and (t.lora.rank or 0) > 0
        and m.head == "causal_lm"
        and not (m.weight_format or m.hf_config or m.n_expert)
        and m.norm == "rmsnorm"
        and m.mlp == "swiglu"
        and m.rotary_fraction == 1.0
        and not (m.norm_qk or m.attention_logit_softcapping or m.final_logit_softcapping)
        and not (m.shared_attention_norm or m.post_attention_norm or m.post_mlp_norm)
        and not m.parallel_residual
        and {x.name for x in block_linears(m)} == LLAMA_LINEARS
        and not any(x.bias for x in block_linears(m))
        and t.attention == "sdpa"
        and t.optimizer in ("adamw", "sgd", "adamw_8bit", "paged_adamw_8bit")
        and t.loss_chunking == "none"
    ):
        return False
    adapted = adapted_modules(m, t.lora.targets, t.framework)
    if adapted.lm_head or adapted.embedding_rows or adapted.param_adapters:
        return False
    # without checkpointing the first layer's input needs no gradient: generated where an
    # attention input projection is adapted (the gradient then reaches the rest)
    return t.gradient_checkpointing or bool(set(ATTN_IN) & adapted.names)


def kbit_step_events(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, steps: int = 2, cuda: bool = True
) -> list[Event]:
    """The build (module order, then PEFT's fp32 adapters, then the batch), the reset, then
    ``steps`` optimizer steps of gpu_measure.py's loop under QLoRA. ``cuda``: with what a
    CPU trace cannot see (gemm_4bit's dequantized weight inside the op, cuBLAS's
    workspaces); False gives the CPU trace's sequence."""
    seq = Pipeline.from_data(d).memory_length()
    b = t.micro_batch_size
    T = b * seq
    h = m.n_embd
    ws = blas_workspace(t) if cuda else 0
    ev = Seq(workspace=ws)  # no biased linear (kbit_covered): no cuBLASLt workspace
    adapted = adapted_modules(m, t.lora.targets, t.framework).names
    rank = t.lora.rank or 0
    lin = {
        x.name: Linear(x.name, x.in_features, x.out_features, x.name in adapted)
        for x in block_linears(m)
    }
    load_quantized(ev, m, t.quantization)
    loras: list[dict[str, tuple[tuple[int, int], ...]]] = []
    trainable: list[tuple[int, int]] = []
    for _ in range(m.n_layer):
        layer = {}
        for x in lin.values():
            if x.adapted:
                sizes = (4 * rank * x.n_in, 4 * rank * x.n_out)
                layer[x.name] = tuple((ev.alloc(n), n) for n in sizes)
                trainable += layer[x.name]
        loras.append(layer)
    for _ in range(3 if b > 1 or d.collator != "packed" else 2):  # ids, mask / positions, labels
        ev.alloc(8 * T)
    ev.reset()
    s = stack(m, t)
    masked = sdpa_masked(m, d, t, s, seq)
    L = Layout(
        h=h,
        q=4 * T * m.n_head * m.head_dim,
        kv=4 * T * m.kv_heads * m.head_dim,
        mask=4 * b * seq * seq if masked else 0,
        inter=4 * T * m.mlp_width,
        lin=lin,
    )
    fallback = cuda and T > GEMM_4BIT_CUSTOM_MAX_M
    ckpt = t.gradient_checkpointing
    v = m.head_rows
    accum = t.gradient_accumulation_steps
    states_made = False
    for _ in range(steps):
        grads: dict[int, int] = {}
        for micro in range(min(accum, 2)):
            if micro == 1:  # the other micro-batches: the same allocations (see events.py)
                ev.mark((accum - 1, REPEAT))
                start = ev.next_id
            c = KbitOps(
                ev.alloc, ev.free, ev.matmul, p=4, b=b, s=seq, h=h * T, q=L.q // 4,
                kv=L.kv // 4, inter=L.inter // 4, head_dim=m.head_dim, n_head=m.n_head,
                vocab=v, mask=masked, kinds={x.name: x.kind for x in lin.values()},
                rank=rank, dropout=t.lora.dropout > 0, grads=grads, stats=False,
                fallback=fallback, nested=t.quantization == "nf4-dq",
            )  # fmt: skip
            hidden = ev.alloc(4 * h * T)  # the embedding's fp32 output
            inputs, saved = [hidden], []
            for i in range(m.n_layer):
                c.lora = loras[i]
                c.input_grad = i > 0 or ckpt  # see the backward below
                out, sv = layer_forward(c, L, keep=not ckpt)
                saved.append(None if ckpt else sv)
                inputs.append(out)
            normed = norm(c)
            if not ckpt:  # nothing saves the embedding's output: LlamaModel.forward returns
                ev.free(hidden)
            logits = ev.alloc(4 * v * T)  # fp32 head: logits.float() is the same tensor
            logp = ev.alloc(4 * v * T)
            ev.free(normed, logits)
            g_nll = ev.alloc(4 * v * T)
            g_ls = ev.alloc(4 * v * T)
            ev.free(g_nll, logp)
            g = ev.alloc(4 * h * T)  # the head's input gradient (its weight is frozen)
            ev.matmul("backward")
            ev.free(g_ls)
            g = norm_back(c, g, inputs[-1])
            for i in reversed(range(m.n_layer)):
                c.lora = loras[i]
                # the embedding's output: a leaf that needs its gradient under checkpointing
                # (``enable_input_require_grads``), held to the end; else none flows into it
                c.input_grad = i > 0 or ckpt
                c.unpacked = ckpt  # the saved tensors are recomputed ones
                gi = layer_backward(c, L, g, inputs[i] if i else 0, saved[i])
                g = gi or 0
            ev.free(*([g] if g else []), *([hidden] if ckpt else []))
            if micro == 1:
                ev.mark((0, END))
                ev.next_id = start
        if not states_made:
            states_made = True
            _optimizer_states(ev, t, trainable)
        if t.optimizer == "adamw":
            tmp = [ev.alloc(nb) for _, nb in trainable]  # _foreach_sqrt(exp_avg_sqs)
            ev.free(*reversed(tmp))  # CPython's list_dealloc: the last item first
        ev.free(*(grads[i] for i, _ in trainable if i in grads))  # zero_grad, in param order
    return ev.events


def load_quantized(ev: Seq, m: ModelConfig, quant: str) -> None:
    """The model as gpu_measure.py loads it onto the GPU: transformers 5's loader
    (core_model_loading.py ``convert_and_load_state_dict_in_model``: synchronous with
    on-the-fly quantization, keys in ``dot_natural_key`` order: lm_head, embedding, layer by
    layer, each layer's keys sorted, the final norm) materializes each bf16 tensor on the
    device; a 4-bit linear's is quantized (``Bnb4bitQuantize`` -> ``Params4bit._quantize`` ->
    ``quantize_4bit``: the fp32 absmax, the packed weight, the code; double quantization then
    ``absmax.mean()``, ``absmax - offset``, ``quantize_blockwise``'s absmax and uint8 output,
    the temporaries and the fp32 absmax freed) and the bf16 tensor freed. Then
    ``prepare_model_for_kbit_training`` casts each other parameter to fp32 in parameter order
    (``param.data = param.data.to(torch.float32)``: the fp32 copy, the bf16 one freed)."""
    h = m.n_embd
    linears = {x.path: x.in_features * x.out_features for x in block_linears(m)}
    bf16: dict[str, int] = {}  # the unquantized parameters: name -> id
    maps = False

    def plain(name: str, n: int) -> None:
        bf16[name] = ev.alloc(2 * n)

    if count_params(m).lm_head:
        plain("lm_head", m.head_rows * h)
    plain("embed", m.rows * h)
    for i in range(m.n_layer):
        for key in sorted([*linears, "input_layernorm", "post_attention_layernorm"]):
            if key not in linears:
                plain(f"{i}.{key}", h)
                continue
            n = linears[key]
            w = ev.alloc(2 * n)
            blocks = -(-n // BLOCK)
            absmax = ev.alloc(4 * blocks)
            ev.alloc((n + 1) // 2)
            ev.alloc(4 * 16)  # get_4bit_type's code
            if quant == "nf4-dq":
                ev.alloc(4)  # offset
                tmp = ev.alloc(4 * blocks)
                if not maps:  # quantize_blockwise's dynamic map, once per device
                    maps = True
                    ev.alloc(4 * 256)
                ev.alloc(4 * -(-blocks // NESTED_BLOCK))
                ev.alloc(blocks)
                ev.free(tmp, absmax)
            ev.free(w)
    plain("norm", h)
    order = ["embed"]
    order += [
        f"{i}.{k}"
        for i in range(m.n_layer)
        for k in ("input_layernorm", "post_attention_layernorm")
    ]
    order += ["norm", *(["lm_head"] if "lm_head" in bf16 else [])]
    for name in order:
        ev.alloc({"embed": 4 * m.rows * h, "lm_head": 4 * m.head_rows * h}.get(name, 4 * h))
        ev.free(bf16[name])


def _optimizer_states(ev: Seq, t: TrainerConfig, trainable: list[tuple[int, int]]) -> None:
    """The states the first step makes in the caching allocator: torch's AdamW two
    ``zeros_like``, SGD's momentum one; bitsandbytes' 8-bit AdamW per tensor (optim/
    optimizer.py ``Optimizer2State.init_state``): the two code maps once, then two states
    (uint8; fp32 below ``min_8bit_size`` 4096 elements; paged ones, from 1e5 elements, in
    managed memory: ``get_state_buffer``) and two fp32 block absmax vectors."""
    if t.optimizer in ("adamw", "sgd"):
        for _, nb in trainable:
            for _ in range(2 if t.optimizer == "adamw" else 1):
                ev.alloc(nb)
        return
    paged = t.optimizer.startswith("paged")
    maps = False
    for _, nb in trainable:
        n = nb // 4
        eight = n >= 4096
        if eight and not maps:
            maps = True
            ev.alloc(4 * 256)
            ev.alloc(4 * 256)
        if not paged or n < 100_000:
            for _ in range(2):
                ev.alloc(n if eight else 4 * n)
        if eight:
            for _ in range(2):
                ev.alloc(4 * -(-n // OPT_BLOCK))
