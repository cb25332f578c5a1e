"""DeepSeek-V2/V3's multi-head latent attention (MLA) and router, as transformers 5 runs them:
what autograd keeps between the attention's input and its output projection, per token.

transformers models/deepseek_v3/modeling_deepseek_v3.py (5.24; deepseek_v2 alike, line numbers
of v3 unless said) ``DeepseekV3Attention.forward``:

* q (l.438-443): ``q_proj(x)`` when ``q_lora_rank`` is None (DeepSeek-V2-Lite), else
  ``q_b_proj(q_a_layernorm(q_a_proj(x)))``: the RMSNorm keeps its fp32 input and one fp32
  statistic per token (l.47-52: ``hidden_states.to(torch.float32)``, ``pow``, ``rsqrt``) and,
  when its weight trains, the normalized tensor in the input dtype; ``q_b_proj`` keeps its
  input (``q_lora_rank`` wide) when its weight trains.
* k/v (l.445-450): ``kv_a_proj_with_mqa(x)`` split into the compressed kv (``kv_lora_rank``) and
  ``k_pe`` (``qk_rope_head_dim``); ``kv_a_layernorm`` on the compressed part keeps what the q
  norm keeps (an fp32 input is not copied by ``.to(float32)``: the norm then keeps a view of the
  whole projection output); ``kv_b_proj`` (l.416, ``expand_kv``) keeps its input when trained.
* rope on the ``qk_rope_head_dim`` slices (l.452-456; V2 ``apply_rotary_emb`` in complex fp32):
  the products keep only cos/sin (per position, not per token: left out), and ``torch.cat``
  keeps nothing.
* ``query_states = torch.cat((q_pass, q_rot))`` (l.462) and ``key_states`` written into a
  ``new_empty`` tensor (l.421-423): two fresh ``n_head x (qk_nope + qk_rope)`` tensors; the
  values are a view of ``kv_b_proj``'s output (``torch.split``, l.417), so a kernel that keeps
  them keeps the whole ``n_head x (qk_nope + v_head_dim)`` output.
* sdpa (integrations/sdpa_attention.py): q, k, that kv_b output, its output (``n_head x
  v_head_dim``) and a log-sum-exp per head; ``reshape(...).contiguous()`` before ``o_proj``
  (l.481) copies an output laid out like q, as the CPU kernel lays it (CUDA's memory-efficient
  kernel, the one that takes a v head dim other than q's, lays it out (batch, seq, heads, dim):
  counted on the safe side). Note: torch's CPU flash kernel needs one head dim for q, k and v;
  with ``v_head_dim != qk_nope + qk_rope`` CPU sdpa runs the fp32 math path, which CUDA does not,
  so the CPU trace of sdpa uses equal head dims (tests/test_memory_tracer_moe.py).
* flash_attention_2 (integrations/flash_attention.py l.62-97): v is padded to the q head dim
  (``F.pad``: a fresh ``n_head x qk_head_dim`` tensor the kernel keeps, kv_b's output is then
  freed), the output is ``qk_head_dim`` wide and cropped to ``v_head_dim`` (a view) before the
  copy into ``o_proj``'s input.
* eager (l.237-259): ``matmul`` keeps q and k, the fp32 softmax output and its 16-bit copy per
  head and key position, and v: ``torch.matmul`` folds (batch, heads) into one dimension, a copy
  of the non-contiguous split (``n_head x v_head_dim``) unless the batch is one row (then a view
  of kv_b's whole output).
* The softmax scale (``qk_head_dim ** -0.5`` with YaRN's mscale, l.405) is a scalar: nothing.

The router (``DeepseekV3TopkRouter.forward``, l.133-158): ``F.linear`` on the fp32 cast of the
input (kept when the router trains), ``sigmoid`` (V3, kept: fp32 ``n_routed_experts`` wide) or
``softmax`` (V2 ``DeepseekV2TopkRouter``, kept alike), ``+ e_score_correction_bias`` (a buffer:
nothing), the group-limited choice (``topk(2)`` per group and ``topk(topk_group)`` keep their
int64 indices, ``masked_fill`` its boolean mask; V2 with ``topk_method="group_limited_greedy"``:
``max`` per group and the same), ``topk`` and ``gather`` the int64 indices (one tensor), the
renormalisation (``norm_topk_prob``: the fp32 denominator and the weights). The routing weights
stay fp32, so the experts' weighted outputs are fp32 (``_weighted_bytes``).
``DeepseekV3MoE.forward`` (l.215-222) adds the shared experts (``DeepseekV3MLP`` of
``moe_intermediate_size * n_shared_experts``) to the routed output; the first
``first_k_dense_replace`` layers (l.493-496) have a dense ``DeepseekV3MLP`` of
``intermediate_size`` instead (:func:`dense_layers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cfgcheck.memory.traced import text_config
from cfgcheck.schema.model import ModelConfig


@dataclass(frozen=True)
class Mla:
    q_lora_rank: int  # 0: a plain q_proj
    kv_lora_rank: int
    rope: int  # qk_rope_head_dim
    nope: int  # qk_nope_head_dim
    v: int  # v_head_dim

    @property
    def qk(self) -> int:
        return self.nope + self.rope


def _int(cfg: Any, key: str) -> int:
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def mla(m: ModelConfig) -> Mla | None:
    """The latent attention's widths from the config.json (None: not MLA)."""
    if not m.hf_config:
        return None
    cfg = text_config(m.hf_config)
    kv = _int(cfg, "kv_lora_rank")
    if not kv:
        return None
    return Mla(_int(cfg, "q_lora_rank"), kv, _int(cfg, "qk_rope_head_dim"),
               _int(cfg, "qk_nope_head_dim"), _int(cfg, "v_head_dim"))  # fmt: skip


# the linears whose input is a latent (a norm's output), not the attention's input
LATENT_INPUTS = frozenset({"q_b_proj", "kv_b_proj"})


def latent_norms(x: Mla, p: int, trained: bool) -> int:
    """The q and kv latent RMSNorms, per token: the fp32 input (a copy of a 16-bit input; the
    projection's whole output when it is already fp32, ``.to`` then returns it), one fp32
    statistic, and the normalized tensor in ``p`` when the weight trains."""
    total = 0
    for width, whole in ((x.q_lora_rank, x.q_lora_rank), (x.kv_lora_rank, x.kv_lora_rank + x.rope)):
        if width:
            total += 4 * (whole if p == 4 else width) + 4 + (p * width if trained else 0)
    return total


def kernel_bytes(
    x: Mla, n_head: int, p: int, kernel: str, one_row: bool, softmax_fp32: bool = True
) -> tuple[int, int]:
    """Per token, and per token and key position, what the attention kernel keeps of MLA's q,
    k and v: (q + k + v + output + log-sum-exp, scores)."""
    q = k = p * n_head * x.qk
    kv_out = p * n_head * (x.nope + x.v)
    if kernel == "eager":
        v = eager_v_bytes(x, n_head, p, one_row)
        scores = n_head * (4 + (p if p == 2 else 0)) if softmax_fp32 else n_head * p
        return q + k + v, scores
    lse = 4 * n_head
    if kernel == "flash":  # v padded to the q head dim, the output as wide
        return q + k + 2 * p * n_head * x.qk + lse, 0
    return q + k + kv_out + p * n_head * x.v + lse, 0


def eager_v_bytes(x: Mla, n_head: int, p: int, one_row: bool) -> int:
    """Per token, what eager attention's second ``matmul`` keeps of v (see the module doc): a
    copy of the split, or with one row a view of kv_b's whole output."""
    return p * n_head * ((x.nope + x.v) if one_row else x.v)


def router_bytes(m: ModelConfig, full: bool) -> int:
    """DeepSeek's router, per token (see the module doc); 0 when it is not DeepSeek's."""
    if m.architecture not in ("deepseek_v2", "deepseek_v3") or not m.hf_config:
        return 0
    cfg = text_config(m.hf_config)
    e, k = m.n_expert or 0, m.n_expert_per_token or 0
    groups, top_groups = _int(cfg, "n_group") or 1, _int(cfg, "topk_group") or 1
    total = 4 * e + 8 * k + 4 * k  # sigmoid / softmax output; indices; the fp32 weights
    total += 4 * m.n_embd if full else 0  # the router's fp32 input cast, kept for its weight
    v3 = m.architecture == "deepseek_v3"
    if v3 or cfg.get("topk_method") == "group_limited_greedy":
        total += 8 * groups * (2 if v3 else 1) + 8 * top_groups + e  # group indices, the mask
    if v3 and cfg.get("norm_topk_prob", True):
        total += 4  # the denominator
    return total


def shared_experts_last(m: ModelConfig) -> bool:
    """DeepSeek's MoE runs its shared experts after the routed ones
    (``hidden_states + self.shared_experts(residuals)`` after ``self.experts(...)``,
    ``DeepseekV3MoE.forward`` l.215-222, ``DeepseekV2MoE.forward`` l.130-137): backward runs
    theirs first, so at the routed experts' backward their saved tensors are released, and a
    checkpointed layer's recomputation has not made them yet when it ends the routed experts
    (CPU-traced: 3 % over with them counted there)."""
    return m.architecture in ("deepseek_v2", "deepseek_v3") and bool(m.n_expert)


def dense_layers(m: ModelConfig) -> int:
    """Layers of a DeepSeek model with a dense MLP in place of the experts
    (``first_k_dense_replace``)."""
    if m.architecture not in ("deepseek_v2", "deepseek_v3") or not m.hf_config:
        return 0
    return min(m.n_layer, _int(text_config(m.hf_config), "first_k_dense_replace"))


def dense_width(m: ModelConfig) -> int:
    """The dense layers' MLP width (``intermediate_size``)."""
    return _int(text_config(m.hf_config or {}), "intermediate_size")
