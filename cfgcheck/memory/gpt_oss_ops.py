"""gpt-oss's forward op by op: the allocations and frees of transformers' ``GptOssModel`` as
the CUDA caching allocator sees them, for PEFT LoRA on the attention projections, eager
attention, 16-bit weights, no checkpointing (:func:`forward`). Not yet the backward: the step
stays on the pattern figure (:func:`cfgcheck.memory.events.covered` is false for gpt-oss);
tests/test_gpt_oss_ops.py checks this forward against transformers' own, traced on meta.

Sources (transformers 5.24 ``models/gpt_oss/modeling_gpt_oss.py``; line numbers of that file):

* ``GptOssModel.forward`` (l.435-480): ``create_causal_mask`` then
  ``create_sliding_window_causal_mask`` (eager: each a boolean mask made by ``and_masks``
  then ``where``'d into an additive mask in the compute dtype, both alive to the model's
  end); ``GptOssRotaryEmbedding.forward`` (l.186-192): ``freqs`` only half a head wide (no
  ``cat``), ``cos()``/``sin()`` times ``attention_scaling`` (YaRN), cast to the dtype.
* ``GptOssRMSNorm.forward`` (l.57-62): the weight multiplies the fp32 normalised tensor
  before the cast (``(self.weight * hidden_states).to(input_dtype)``), so both fp32 products
  are alive at the cast; the fp32 copy is kept when the input has a gradient.
* ``GptOssAttention.forward`` (l.288-329) with biased q/k/v/o (``addmm``);
  ``_apply_rotary_emb`` (l.205-213): ``chunk``, four half-width products, ``sub``, ``add``,
  ``cat``; ``eager_attention_forward`` (l.226-256): ``repeat_kv``'s copies, the scores'
  ``bmm``, ``* scaling``, ``+ attention_mask``, ``cat`` with the sinks (one column more),
  ``max`` (its int64 indices kept by ``MaxBackward``), the shifted logits, ``softmax`` in
  their own dtype (kept), the sink column dropped by a view, ``bmm`` with v, the transposed
  copy. The first ``bmm`` keeps the rotary q only when k has a gradient (``BmmBackward0``
  saves ``self`` for ``mat2``'s gradient).
* ``GptOssTopKRouter.forward`` (l.126-131): the biased linear, ``topk`` then ``softmax`` over
  the k values (their dtype); ``integrations/moe.py`` ``grouped_mm_experts_forward``
  (l.424-530): ``sort``, the routed copies, the bias gathers
  (``self.gate_up_proj_bias[expert_ids_g]``, l.480, alive until reassigned at l.508),
  ``_grouped_mm``, ``GptOssExperts._apply_gate`` (l.82-88: two clamps, ``gate * alpha``,
  ``sigmoid``, the product, ``up + 1``, the gated output; the clamped ``up`` a local), the
  down projection, the weighting, the un-permutation and the sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cfgcheck.memory.allocsim import Event
from cfgcheck.memory.layer_ops import Adapter, Ops, linear_forward
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Experts:
    """E experts, k per token, W one expert's width."""

    n_expert: int
    top_k: int
    width: int


@dataclass
class Layer:
    """What a gpt-oss layer keeps for its backward (ids; -1: not kept)."""

    norm1: int  # the fp32 copies (kept when the norm's input has a gradient)
    norm2: int
    q: int  # the rotary q (kept by the scores' bmm when k has a gradient)
    k: int  # repeat_kv's copies
    v: int
    max_idx: int
    probs: int
    out: int
    adapters: dict[str, Adapter] = field(default_factory=dict)
    moe: dict[str, int] = field(default_factory=dict)


def rotary_tables(o: Ops) -> tuple[int, int]:
    """``GptOssRotaryEmbedding.forward``: the position ids as float, ``freqs`` (half a head
    wide, fp32), cos and sin times ``attention_scaling``, cast; returns cos and sin."""
    half = o.s * o.head_dim // 2
    pos = o.alloc(4 * o.s)
    freqs = o.alloc(4 * half)
    o.free(pos)
    tables = []
    for _ in range(2):
        raw = o.alloc(4 * half)
        scaled = o.alloc(4 * half)
        o.free(raw)
        tables.append(scaled)
    cos, sin = o.alloc(o.p * half), o.alloc(o.p * half)
    o.free(freqs, *tables)
    return cos, sin


def masks(o: Ops) -> tuple[int, int]:
    """The full and the sliding additive masks (``where`` of the boolean ``and_masks``)."""
    ss, bss = o.s * o.s, o.b * o.s * o.s
    le = o.alloc(ss)
    causal = o.alloc(ss)
    o.free(le)
    both = o.alloc(bss)
    o.free(causal)
    full = o.alloc(o.p * bss)
    o.free(both)
    gt = o.alloc(ss)  # sliding_window_overlay and causal
    inner = o.alloc(ss)
    o.free(gt)
    le = o.alloc(ss)
    both = o.alloc(ss)
    o.free(le, inner)
    causal = o.alloc(ss)
    o.free(both)
    mask = o.alloc(bss)
    o.free(causal)
    sliding = o.alloc(o.p * bss)
    o.free(mask)
    return full, sliding


def norm(o: Ops, graph: bool) -> tuple[int, int]:
    """``GptOssRMSNorm`` on a 16-bit input: returns its output and the kept fp32 copy (-1)."""
    h4, small = 4 * o.h, 4 * o.tokens
    c = o.alloc(h4)
    pw = o.alloc(h4)
    mean = o.small(small)
    o.free(pw)
    add = o.small(small)
    r = o.small(small)
    o.drop(add)
    n = o.alloc(h4)
    if not graph:
        o.drop(r)
        o.free(c)
        c = -1
    wn = o.alloc(h4)  # self.weight * hidden_states, fp32
    out = o.alloc(o.p * o.h)
    o.free(wn, n)
    o.drop(mean)
    return out, c


def rotary(o: Ops, size: int) -> int:
    """``_apply_rotary_emb`` on a tensor of ``size`` bytes: returns the ``cat``."""
    half = size // 2
    m1, m2 = o.alloc(half), o.alloc(half)
    sub = o.alloc(half)
    o.free(m1, m2)
    m3, m4 = o.alloc(half), o.alloc(half)
    add = o.alloc(half)
    o.free(m3, m4)
    cat = o.alloc(size)
    o.free(sub, add)
    return cat


def layer_forward(o: Ops, x: int, graph: bool, mask: int, ex: Experts, free_input: bool) -> Layer:
    """``GptOssDecoderLayer.forward`` on ``x`` (``graph``: it has a gradient); ``mask``: the
    layer's additive mask."""
    kd, qb, kvb, hd = o.kinds, o.p * o.q, o.p * o.kv, o.h
    ad: dict[str, Adapter] = {}

    def linear(name: str, nin: int, nout: int, g: bool) -> int:
        out, saved = linear_forward(o, kd[name], nin, nout, g)
        if saved is not None:
            ad[name] = saved
        return out

    n1, c1 = norm(o, graph)
    qm = linear("q_proj", hd, o.q, graph)
    km = linear("k_proj", hd, o.kv, graph)
    vm = linear("v_proj", hd, o.kv, graph)
    q = rotary(o, qb)
    k = rotary(o, kvb)
    o.free(qm, km)
    kk, vv = o.alloc(qb), o.alloc(qb)  # repeat_kv
    k_grad = graph or kd["k_proj"] != "frozen"
    sc = o.p * o.b * o.n_head * o.s * o.s
    rows = o.b * o.n_head * o.s
    scores = o.alloc(sc)
    scaled = o.alloc(sc)
    o.free(scores)
    masked = o.alloc(sc)
    o.free(scaled)
    cat = o.alloc(sc + o.p * rows)
    values, idx = o.alloc(o.p * rows), o.alloc(8 * rows)
    shifted = o.alloc(sc + o.p * rows)
    o.free(values, cat)
    probs = o.alloc(sc + o.p * rows)
    o.free(masked)
    av = o.alloc(qb)
    attn = o.alloc(qb)  # transpose(1, 2).contiguous()
    o.free(av, shifted)
    out = linear("o_proj", o.q, hd, True)
    if kd["o_proj"] == "frozen":
        o.free(attn)
    if not k_grad:
        o.free(q)
        q = -1
    o.free(k, vm)
    if kd["q_proj"] == "frozen" or o.dropout:  # nothing but the adapters' copies kept it
        o.free(n1)
    r1 = o.alloc(o.p * hd)
    o.free(out)
    n2, c2 = norm(o, True)
    moe = experts_forward(o, n2, ex)
    o.free(n2)  # a frozen router keeps not its input
    r2 = o.alloc(o.p * hd)
    o.free(moe.pop("out"), r1)
    if free_input:
        o.free(x)
    return Layer(c1, c2, q, kk, vv, idx, probs, r2, ad, moe)


def experts_forward(o: Ops, x: int, ex: Experts) -> dict[str, int]:
    """``GptOssMLP.forward``: the router, then ``grouped_mm_experts_forward`` with the
    experts' biases and the clamped SwiGLU; returns the kept tensors and ``out``."""
    p, t, e, k, w = o.p, o.tokens, ex.n_expert, ex.top_k, ex.width
    h, s = o.h // t, t * k
    logits = o.alloc(p * t * e)  # F.linear(hidden_states, weight, bias)
    top_v, top_i = o.alloc(p * s), o.alloc(8 * s)
    scores = o.alloc(p * s)  # softmax over the k values, their dtype
    o.free(top_v)
    sort_v, perm = o.alloc(8 * s), o.alloc(8 * s)
    token_idx = o.alloc(8 * s)  # perm // top_k
    routed = o.alloc(p * s * h)
    weights_g = o.alloc(p * s)
    hist_in = o.alloc(4 * s)
    hist = o.alloc(4 * e)
    offsets = o.alloc(4 * e)
    bias_up = o.alloc(p * s * 2 * w)  # self.gate_up_proj_bias[expert_ids_g]
    gate_up = o.alloc(p * s * 2 * w)  # _grouped_mm, the bias added in place
    gate = o.alloc(p * s * w)  # gate.clamp(max=limit)
    up = o.alloc(p * s * w)  # up.clamp(-limit, limit)
    ga = o.alloc(p * s * w)  # gate * alpha
    sig = o.alloc(p * s * w)
    o.free(ga)
    glu = o.alloc(p * s * w)
    up1 = o.alloc(p * s * w)  # up + 1
    prod = o.alloc(p * s * w)
    o.free(up)  # _apply_gate returns: its local
    bias_down = o.alloc(p * s * h)  # self.down_proj_bias[expert_ids_g]
    o.free(bias_up)
    down = o.alloc(p * s * h)
    o.free(prod)  # a frozen down projection keeps not its input
    weighted = o.alloc(p * s * h)
    inv_perm = o.alloc(8 * s)
    o.free(o.alloc(8 * s))  # arange
    unperm = o.alloc(p * s * h)
    o.free(weighted)
    out = o.alloc(p * t * h)  # sum over top_k
    o.free(sort_v, routed, hist_in, hist, bias_down, unperm, logits)
    return {"out": out, "scores": scores, "top_i": top_i, "perm": perm, "token_idx": token_idx,
            "weights_g": weights_g, "offsets": offsets, "gate_up": gate_up, "gate": gate,
            "sig": sig, "glu": glu, "up1": up1, "down": down, "inv_perm": inv_perm}  # fmt: skip


def forward(o: Ops, layers: int, ex: Experts) -> list[Layer]:
    """``model(**batch).loss`` with a frozen lm_head: the embedding, the masks, the rotary
    tables, each layer (alternating sliding and full masks, ``layer_types``), the final norm,
    ``GptOssModel.forward``'s locals going (the masks, the embedding's output), the logits,
    their fp32 copy and ``log_softmax`` (``ForCausalLMLoss``); the log-probabilities stay,
    kept by the loss. Returns the layers' kept tensors."""
    emb = o.alloc(o.p * o.h)
    full, sliding = masks(o)
    rotary_tables(o)
    out: list[Layer] = []
    x = emb
    for i in range(layers):
        mask = sliding if i % 2 == 0 else full
        lay = layer_forward(o, x, i > 0, mask, ex, free_input=i > 0)
        out.append(lay)
        x = lay.out
    final, _ = norm(o, True)
    o.free(x, full, sliding, emb)
    v = o.vocab * o.tokens
    logits = o.alloc(o.p * v)
    up = o.alloc(4 * v)
    o.alloc(4 * v)  # log_softmax, kept by nll_loss
    o.free(up, final, logits)
    return out


def forward_events(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> list[Event]:
    """The reset, then one micro-batch's forward and loss (:func:`forward`) of a gpt-oss run
    with LoRA on the attention projections, not checkpointed."""
    from cfgcheck.memory.event_seq import BLAS_LT_WORKSPACE, Seq, blas_workspace
    from cfgcheck.memory.events_moe import kinds
    from cfgcheck.memory.modules import traced
    from cfgcheck.memory.stack import stack

    tr = traced(m)
    if tr is None or not tr.experts or t.gradient_checkpointing or t.finetuning != "lora":
        raise ValueError("gpt_oss_ops: LoRA on gpt-oss's attention, not checkpointed")
    seq = Pipeline.from_data(d).memory_length()
    hs = m.head_size or m.n_embd // m.n_head
    tokens = t.micro_batch_size * seq
    ev = Seq(workspace=blas_workspace(t), lt_workspace=BLAS_LT_WORKSPACE)
    ev.reset()
    o = Ops(
        ev.alloc, ev.free, ev.matmul, p=stack(m, t).act, b=t.micro_batch_size, s=seq,
        h=m.n_embd * tokens, q=m.n_head * hs * tokens,
        kv=(m.n_query_groups or m.n_head) * hs * tokens, inter=m.mlp_width * tokens,
        head_dim=hs, n_head=m.n_head, vocab=m.head_rows, mask=True,
        kinds=kinds(m, t) or {}, rank=t.lora.rank or 0, dropout=bool(t.lora.dropout),
    )  # fmt: skip
    e = tr.experts[0]
    forward(o, m.n_layer, Experts(e.n_expert, e.top_k, e.width))
    return ev.events
