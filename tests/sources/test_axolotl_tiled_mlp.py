"""Axolotl's ``tiled_mlp`` (cfgcheck/memory/tiled.py): a CPU trace of a training step with
Axolotl's own TiledMLP in every MLP of a tiny Llama, against the same step untiled; the
estimate's saving is what the trace saves. And the ALST example's estimate with and without."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest

from tests.conftest import requires
from tests.sources.test_axolotl_memory_keys import ALST, _peak_gib

torch = pytest.importorskip("torch")
pytestmark = requires("torch", "transformers")


class TiledMLP(torch.autograd.Function):  # type: ignore[misc]
    """axolotl-ai-cloud/axolotl at 067b021c, src/axolotl/monkeypatch/tiled_mlp/base.py lines
    215-349, copied (Axolotl does not install here without changing pinned packages); the
    FSDP2 reshard deferral, a no-op without FSDP2, is a null context."""

    @staticmethod
    def forward(ctx: Any, fn: Any, self: Any, x: Any, shards: int, compute_params: Any) -> Any:
        ctx.fn = fn
        ctx.self = self
        ctx.shards = shards
        ctx.compute_params = [p for p in compute_params if p.requires_grad]
        ctx.save_for_backward(x)

        x_shards = list(torch.chunk(x, chunks=shards, dim=1))
        with torch.no_grad():
            output_shards = [fn(self, x_shard) for x_shard in x_shards]
        ctx.is_tuple_output = isinstance(output_shards[0], tuple)
        return torch.cat(output_shards, dim=1)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        fn = ctx.fn
        (x,) = ctx.saved_tensors
        self = ctx.self
        shards = ctx.shards
        compute_params = ctx.compute_params

        x_requires_grad = x.requires_grad
        x = x.detach()
        x.requires_grad_(x_requires_grad)

        incoming_grad = grads[0]
        x_grad = torch.zeros_like(x)
        x_shards = list(torch.chunk(x, chunks=shards, dim=1))
        prev_grads = {}
        accum_grads = {}
        for p in compute_params:
            prev_grads[p] = p.grad
            accum_grads[p] = torch.zeros_like(p, dtype=p.dtype)
            p.grad = None

        shard_step = x_shards[0].numel()
        with contextlib.nullcontext():
            for i, x_shard in enumerate(x_shards):
                x_shard.requires_grad_(x_requires_grad)
                shard_offset = i * shard_step
                x_shard.grad = (
                    x_grad.view(-1).narrow(0, shard_offset, x_shard.numel()).view_as(x_shard)
                )
                incoming_grad_shard = (
                    incoming_grad.view(-1).narrow(0, shard_offset, x_shard.numel()).view_as(x_shard)
                )
                with torch.enable_grad():
                    output = fn(self, x_shard)
                torch.autograd.backward(output, incoming_grad_shard)
                for p in compute_params:
                    if p.grad is not None:
                        accum_grads[p].add_(p.grad.detach())
                        p.grad = None

        for p in compute_params:
            tiled_contrib = accum_grads[p]
            p.grad = tiled_contrib if prev_grads[p] is None else prev_grads[p] + tiled_contrib
        return (None, None, x_grad, None, None)


SEQ, BATCH, LAYERS = 256, 2, 2


def _step_peak(tiled: bool, shards: int) -> tuple[int, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.alloc_tracer import AllocTracer

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=512,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    if tiled:  # patch.py tiled_mlp_forward with a fixed shard count
        for layer in model.model.layers:
            mlp = layer.mlp
            original = type(mlp).forward
            params = [p for p in mlp.parameters() if p.requires_grad]

            def forward(x: Any, mlp: Any = mlp, original: Any = original, ps: Any = params) -> Any:
                return TiledMLP.apply(original, mlp, x, shards, ps)

            mlp.forward = forward
    ids = torch.randint(3, 64, (BATCH, SEQ))
    tracer = AllocTracer()
    tracer.track_all([*model.parameters(), ids])
    kept = tracer.current
    tracer.reset_peak()
    with tracer:
        model(input_ids=ids, labels=ids).loss.backward()
    return tracer.peak.bytes - kept, cfg


@pytest.mark.parametrize("shards", [1, 4])
def test_tiled_mlp_saves_what_the_trace_saves(shards: int) -> None:
    from cfgcheck.memory import tiled
    from cfgcheck.models.hf import hf_model
    from cfgcheck.schema.model import ModelConfig
    from cfgcheck.schema.trainer import TrainerConfig

    untiled, cfg = _step_peak(False, shards)
    with_tiles, _ = _step_peak(True, shards)
    shape = {k: v.value for k, v in hf_model(cfg.to_dict(), "config.json").items()}
    m = ModelConfig.model_validate({"name": "tiny", **shape})
    t = TrainerConfig.model_validate(
        {"micro_batch_size": BATCH, "precision": "bf16-true", "tiled_mlp": True}
    )
    t = t.model_copy(update={"tiled_mlp_shards": shards})
    mlp = tiled.mlp_kept(m, t) * BATCH * SEQ
    # every layer's MLP intermediates are gone, and one slice of the last layer's is
    # recomputed while the backward reaches it, every other layer's activations still held
    modelled = LAYERS * mlp - mlp // tiled.shards(t, SEQ)
    saved = untiled - with_tiles
    assert math.isclose(saved, modelled, rel_tol=0.15), (saved, modelled)


def test_the_alst_example_counts_its_tiled_mlp() -> None:
    # 500k tokens over context_parallel_size 8: 62.5k a GPU, two 32k slices per recomputed MLP
    assert _peak_gib(ALST) < _peak_gib(ALST, ["tiled_mlp=false"]) - 2
