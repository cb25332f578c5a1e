"""QLoRA's recomputed layer: cfgcheck's allocated peak against a CPU trace with bitsandbytes.

bitsandbytes 0.50 runs 4-bit layers on CPU (its CPU backend: ``quantize_4bit``, ``gemm_4bit``,
``dequantize_4bit``), so ``tests/alloc_tracer.py`` traces the loop of
``benchmarks/calibration/gpu_measure.py`` for QLoRA as users run it: a bf16 checkpoint loaded
with a ``BitsAndBytesConfig`` (nf4, compute dtype bf16), ``prepare_model_for_kbit_training``
with non-reentrant checkpointing (an fp32 stream), PEFT LoRA, LoRA dropout with CUDA's 1-byte
masks (``alloc_tracer.CudaDropout``), gradient accumulation, two steps. The estimate's moments
of the recomputed layer (cfgcheck/memory/recompute.py) are checked on the proportions of the
H100 row ``l2-7b-qlora-nf4-ckpt-b4`` (MLP 2.69 x the hidden size, a small vocabulary so that
the recomputation, not the loss, is the peak).

What CPU cannot show: ``gemm_4bit``'s forward dequantizes inside one op on CUDA (a weight-sized
buffer the trace does not see); at these sizes that moment is below the other two.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes", reason="the bnb extra installs bitsandbytes")

from cfgcheck.memory.estimate import estimate  # noqa: E402
from cfgcheck.memory.recompute import fourbit_moments  # noqa: E402
from cfgcheck.memory.weights import dequant_bytes  # noqa: E402
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig  # noqa: E402
from tests.alloc_tracer import compare  # noqa: E402

pytestmark = pytest.mark.tracer

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# the trace against the estimate: what a tiny model adds that the estimate leaves out (RoPE
# tables, the boolean mask, scalars) is well below this
TOLERANCE = 0.02


def run(dropout: float, targets: list[str], quant: str = "nf4") -> dict[str, dict[str, Any]]:
    """Llama-2-7B's proportions (MLP 11008 / 4096), 256 hidden, four layers."""
    model = {
        "name": "llama-tiny-qlora",
        "block_size": 512,
        "vocab_size": 256,
        "n_layer": 4,
        "n_embd": 256,
        "n_head": 4,
        "n_query_groups": 4,
        "head_size": 64,
        "intermediate_size": 688,
    }
    trainer = {
        "micro_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "precision": "bf16-true",
        "optimizer": "sgd",
        "gradient_checkpointing": True,
        "finetuning": "qlora",
        "quantization": quant,
        "attention": "sdpa",
        "lora": {"rank": 1, "alpha": 2.0, "dropout": dropout, "targets": targets},
    }
    return {"model": model, "trainer": trainer, "data": {"max_seq_length": 64}}


@pytest.mark.parametrize(
    ("dropout", "targets", "quant"),
    [
        (0.05, ALL, "nf4"),  # the H100 row's settings: the recomputation's end peaks
        (0.0, ALL, "nf4"),  # the down adapter keeps its input: the MLP's backward peaks
        (0.05, ["q_proj", "v_proj"], "nf4-dq"),  # no MLP adapter
    ],
)
def test_qlora_recomputation_matches_the_trace(
    dropout: float, targets: list[str], quant: str
) -> None:
    torch.set_num_threads(1)
    r = run(dropout, targets, quant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(r, cuda_dropout_masks=True)
    label = (
        f"traced {c.traced.peak.bytes} at {c.traced.peak.phase}/{c.traced.peak.op}, estimate "
        f"{c.estimated} at {c.phase} ({100 * c.error:+.2f}%)"
    )
    assert c.phase == "backward (recomputation)", label
    assert c.traced.peak.phase == "backward", label
    print(label)
    assert abs(c.error) <= TOLERANCE, label


def test_the_bnb_buffers_are_not_alive_at_the_mlp_backward() -> None:
    """At the H100 row's size the recomputed layer peaks at a moment without the dequantized
    weight (the recomputation's end): the dense term plus the buffers over-counts both."""
    m = ModelConfig.model_validate(
        {
            "name": "llama-2-7b-shape",
            "block_size": 4096,
            "vocab_size": 32000,
            "n_layer": 32,
            "n_embd": 4096,
            "n_head": 32,
            "n_query_groups": 32,
            "head_size": 128,
            "intermediate_size": 11008,
        }
    )
    t = TrainerConfig.model_validate(run(0.05, ALL)["trainer"] | {"micro_batch_size": 4})
    tokens = 4 * 1024
    dq = dequant_bytes(m, t, tokens)
    moments = fourbit_moments(m, t, tokens, dq)
    assert moments is not None
    peak = max(moments, key=lambda x: x.extra + x.dequant)
    assert peak.dequant == 0 and peak.name == "recomputation end"
    # the down projection's forward in the recomputation holds the buffers, and is smaller
    dequantized = next(x for x in moments if x.dequant)
    assert dequantized.extra + dequantized.dequant < peak.extra
    est = estimate(m, DataConfig(max_seq_length=1024), t)
    assert est.get("dequant") == 0
