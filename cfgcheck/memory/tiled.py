"""Axolotl's ``tiled_mlp`` (axolotl-ai-cloud/axolotl at 067b021c,
src/axolotl/monkeypatch/tiled_mlp/base.py ``TiledMLP``): each MLP's forward runs under
``torch.no_grad`` over ``num_shards`` slices of the sequence and keeps only its input
(``ctx.save_for_backward(x)``); backward recomputes one slice at a time with grad enabled.
``num_shards`` is ``tiled_mlp_num_shards`` or ``ceil(seq / 32768)``
(monkeypatch/tiled_mlp/patch.py ``tiled_mlp_forward``: "Target ~32K tokens per shard").

So the MLP's own saved tensors (gate / up outputs, the activation, the down projection's
input) leave every layer's activations; when a layer is recomputed (gradient checkpointing)
only one slice of them is alive. The input stays: the layer keeps it either way.
"""

from __future__ import annotations

from cfgcheck.memory.stack import stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

TOKENS_PER_SHARD = 32768


def shards(t: TrainerConfig, seq: int) -> int:
    return t.tiled_mlp_shards or max(1, -(-seq // TOKENS_PER_SHARD))


def mlp_kept(m: ModelConfig, t: TrainerConfig) -> int:
    """Bytes per token an untiled MLP keeps for backward beyond its input: the gated pair and
    the activation (3 intermediate-wide tensors; a plain GELU MLP its pre-activation), and the
    down projection's input when its weight trains. 0 for mixture-of-experts layers (Axolotl
    tiles them only with ScatterMoE)."""
    if not t.tiled_mlp or m.n_expert:
        return 0
    s = stack(m, t)
    gated = m.mlp in ("swiglu", "geglu")
    kept = s.act * m.mlp_width * (3 if gated else s.gelu_saved)
    if t.finetuning == "full":
        kept += s.act * m.mlp_width
    return kept
