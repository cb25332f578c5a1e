"""Per-layer saved-tensor exactness for every architecture cfgcheck builds, under every
setting of the hf stack.

The method of ``tests/test_memory_activations.py``: a tiny random transformers model, built
from cfgcheck's ``ModelConfig`` by :func:`cfgcheck.memory.hf_shapes.hf_config`, runs forward on
CPU under ``torch.autograd.graph.saved_tensors_hooks``; the unique storages it saves
(parameters excluded) are summed. An (n)-layer model minus an (n-1)-layer one must equal
cfgcheck's per-layer formula to the byte, and the whole model must equal the whole formula
(the final norm and the lm_head input) plus the few once-per-model tensors the estimate leaves
out (token ids, RoPE tables: :func:`once_per_model`).

Two CPU kernels keep something else than the CUDA kernels the formula models; each is
accounted for explicitly (:func:`cpu_minus_cuda`), from torch's source:

* dropout (aten/src/ATen/native/Dropout.cpp): ``is_fused_kernel_acceptable`` is true only on
  CUDA/XPU/lazy tensors, where ``native_dropout`` keeps a 1-byte bool mask; on CPU
  ``_dropout_impl`` multiplies by a ``noise`` tensor of the input's dtype, which ``mul`` keeps
  (PEFT's LoRA dropout runs on the adapter's fp32 cast of its input: 4 bytes where CUDA keeps 1);
* LayerNorm: the CPU kernel returns its mean and rstd in the input dtype (bf16 here: 2 + 2
  bytes per token), the CUDA kernel in the accumulate type (fp32: 4 + 4), as the formula counts.

GPT-2 keeps transformers' default dropout (0.1 after the embeddings, the attention and the
MLP, and on eager attention's probabilities), so its CPU noise tensors are accounted for the
same way; sdpa with dropout falls back to the math kernel on CPU (the CPU flash kernel has no
dropout) while CUDA's memory-efficient and flash kernels keep only an RNG seed and offset, so
GPT-2 under sdpa is built with ``attn_pdrop = 0``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from cfgcheck.memory import activations as act
from cfgcheck.memory import weights
from cfgcheck.memory.modules import architecture_of, block_linears
from cfgcheck.memory.params import adapted_modules
from cfgcheck.memory.stack import attention, sdpa_math, stack
from cfgcheck.schema import ModelConfig, TrainerConfig
from tests.saved_tensors import saved_storages

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WINDOW = 12  # a sliding window shorter than 32 tokens: transformers' masking_utils masks


@dataclass(frozen=True)
class Batch:
    """What the model gets: ``kind`` padded (the first row ends in 3 pad tokens), unpadded,
    or packed (samples of 8 tokens, position ids restarting, no attention mask)."""

    kind: str
    rows: int = 2
    seq: int = 32

    @property
    def tokens(self) -> int:
        return self.rows * self.seq


BASE: dict[str, Any] = {
    "name": "tiny",
    "block_size": 256,
    "vocab_size": 128,
    "n_embd": 64,
    "n_head": 4,
    "n_query_groups": 2,
    "head_size": 16,
    "intermediate_size": 176,
}
_LN = {"norm": "layernorm", "bias": True, "n_query_groups": 4, "intermediate_size": 256}
ARCHS: dict[str, dict[str, Any]] = {
    "llama": {"architecture": "llama"},
    "llama-bias-tied": {"architecture": "llama", "bias": True, "tie_embeddings": True},
    "mistral-window": {"architecture": "mistral", "sliding_window_size": WINDOW},
    "qwen2": {"architecture": "qwen2", "attn_bias": True},
    "qwen3": {"architecture": "qwen3", "norm_qk": True},
    "gemma": {"architecture": "gemma", "mlp": "geglu", "tie_embeddings": True},
    "gemma2": {
        "architecture": "gemma2",
        "mlp": "geglu",
        "tie_embeddings": True,
        "post_attention_norm": True,
        "post_mlp_norm": True,
        "sliding_window_size": WINDOW,
        "sliding_window_pattern": 2,
        "attention_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    "phi": {
        "architecture": "phi",
        "mlp": "gelu",
        **_LN,
        "shared_attention_norm": True,
        "parallel_residual": True,
        "lm_head_bias": True,
        "rotary_fraction": 0.5,
    },
    "phi3": {"architecture": "phi3"},  # GQA: repeat_kv copies under a mask
    "phi3-window": {"architecture": "phi3", "n_query_groups": 4, "sliding_window_size": WINDOW},
    "gpt2": {"architecture": "gpt2", "mlp": "gelu", **_LN},
}
# LoRA target sets by the architecture's real names: attention only, all block linears
ATTENTION_TARGETS = {"phi3": ["qkv_proj", "o_proj"], "gpt2": ["c_attn"]}
ALL_TARGETS = {
    "phi": ["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"],
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}
LLAMA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    """Tiny matmuls: one intra-op thread is several times faster on a shared box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def shape(arch: str, n_layer: int) -> ModelConfig:
    return ModelConfig.model_validate(BASE | ARCHS[arch] | {"n_layer": n_layer})


def family(arch: str) -> str:
    return arch.split("-")[0]


def trainer(
    precision: str,
    mode: str,
    attention_kind: str,
    targets: list[str] | None = None,
    rank: int = 8,
    dropout: float = 0.0,
    rows: int = 2,
) -> TrainerConfig:
    """``mode``: full, frozen (a LoRA run with no adapter: the frozen base alone) or lora."""
    lora = {"rank": rank, "targets": targets or [], "dropout": dropout}
    if mode != "lora":
        lora = {"rank": None, "targets": [], "dropout": 0.0}
    return TrainerConfig.model_validate(
        {
            "micro_batch_size": rows,
            "precision": precision,
            "finetuning": "full" if mode == "full" else "lora",
            "attention": attention_kind,
            "lora": lora,
        }
    )


def masked(m: ModelConfig, b: Batch) -> bool:
    """Whether the kernel gets a mask (padding, packing or a window shorter than the rows)."""
    return b.kind != "unpadded" or (m.sliding_window_size or b.seq) < b.seq


def saved_bytes(m: ModelConfig, t: TrainerConfig, b: Batch, reentrant: bool = False) -> int:
    """Unique storages autograd saves in one forward of the real model (parameters excluded;
    autocast's weight casts included); ``t.gradient_checkpointing``: transformers'
    ``gradient_checkpointing_enable`` with torch's reentrant or non-reentrant checkpoint."""
    from cfgcheck.memory.hf_shapes import hf_config

    cfg = hf_config(m)
    # the kernel cfgcheck says transformers runs; sdpa where it falls back to the math kernel
    cfg._attn_implementation = "sdpa" if sdpa_math(m, t) else attention(m, t)
    if architecture_of(m) == "gpt2" and attention(m, t) != "eager":
        cfg.attn_pdrop = 0.0  # module docstring: CPU sdpa with dropout is the math kernel
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    dtype = {"bf16-true": torch.bfloat16}.get(t.precision, torch.float32)
    model = model.to(dtype)
    model.config.use_cache = False  # as trainers set it (packing detection needs it)
    model.train()
    if t.gradient_checkpointing:
        kwargs_ = {"use_reentrant": reentrant}
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs_)
    if t.finetuning != "full":
        model.requires_grad_(False)
        # the embedding output needs a gradient, as with PEFT under checkpointing: every layer
        # then keeps what a layer behind a trained one keeps
        model.enable_input_require_grads()
        if t.lora.rank:
            peft = pytest.importorskip("peft")
            targets: Any = t.lora.targets
            if targets == ["all-linear"]:
                targets = "all-linear"
            config = peft.LoraConfig(
                r=t.lora.rank, lora_alpha=16, lora_dropout=t.lora.dropout, target_modules=targets
            )
            model = peft.get_peft_model(model, config)
            model.train()
    shape_ = (b.rows, b.seq)
    ids = torch.randint(0, m.rows, shape_, generator=torch.Generator().manual_seed(1))
    kwargs: dict[str, Any] = {"input_ids": ids}
    if b.kind == "packed":  # samples of 8 tokens, positions restarting (the packed collator)
        kwargs["position_ids"] = torch.arange(b.seq).remainder(8).unsqueeze(0).expand(*shape_)
    elif b.kind == "padded":
        mask = torch.ones(*shape_, dtype=torch.long)
        mask[0, -3:] = 0  # right padding
        kwargs["attention_mask"] = mask
    half = torch.float16 if t.precision == "16-mixed" else torch.bfloat16
    autocast = torch.autocast("cpu", dtype=half, enabled=t.precision.endswith("-mixed"))
    with saved_storages(model) as seen, autocast:
        model(**kwargs)
    return sum(seen.values())


def formula(m: ModelConfig, t: TrainerConfig, b: Batch) -> int:
    """cfgcheck's activations plus the 16-bit weight casts autograd keeps under autocast (a
    checkpointed layer saves none in the forward; whatever autocast's cache holds is no saved
    tensor: the estimate's ``autocast_copies``, not checked here)."""
    a = act.activation_bytes(m, t, b.rows, b.seq, masked=masked(m, b))
    casts = 0 if t.gradient_checkpointing else weights.autocast_copy_bytes(m, t)
    # saved_bytes enables input gradients (as checkpointing does); a LoRA run without
    # checkpointing has none, so the estimate leaves out what its first layer then does not
    # keep (activations.first_layer_without_grad, traced in tests/test_memory_tracer.py)
    a += act.first_layer_unsaved(m, t, masked(m, b)).bytes(b.tokens, b.seq)
    if casts:
        frozen = act.first_layer_frozen_linears(m, t)
        casts += 2 * sum(x.in_features * x.out_features for x in frozen)
    return a + casts


def cpu_minus_cuda(m: ModelConfig, t: TrainerConfig, b: Batch, layers: int, head: bool) -> int:
    """What the CPU kernels keep beyond the CUDA ones the formula models (module docstring):
    per layer, LoRA dropout's noise instead of a 1-byte mask, and LayerNorm's 16-bit
    statistics instead of fp32 ones; ``head``: the final LayerNorm too."""
    s = stack(m, t)
    tokens = b.tokens
    extra = 0
    if t.finetuning != "full" and t.lora.rank and t.lora.dropout > 0:
        adapted = adapted_modules(m, t.lora.targets).names
        widths = sum(x.in_features for x in block_linears(m) if x.name in adapted)
        # the noise is in the dropout input's dtype: the adapter's (PEFT casts to it first)
        extra += layers * (s.adapter - 1) * widths * tokens
    if m.norm == "layernorm" and s.residual == 2:
        n_norms = (1 if m.shared_attention_norm else 2) * layers + int(head)
        extra -= 4 * n_norms * tokens
    if architecture_of(m) == "gpt2":  # noise in the dropped tensor's dtype, not 1-byte masks
        extra += layers * 2 * (s.act - 1) * m.n_embd * tokens  # after c_proj: act's dtype
        if attention(m, t) == "eager":  # the probabilities, cast to v's dtype
            extra += layers * (s.act - 1) * m.n_head * b.seq * tokens
        if head:  # after the embeddings: the residual dtype
            extra += (s.residual - 1) * m.n_embd * tokens
    return extra


def once_per_model(m: ModelConfig, t: TrainerConfig, b: Batch) -> int:
    """Tensors saved once per model that the estimate leaves out (well under 0.1 % of any
    real run): the int64 token ids (kept by the embedding when its weight trains), RoPE's cos
    and sin tables in the residual dtype ((1, seq, rotary dims), per row when the batch
    carries position_ids), GPT-2's int64 position ids (kept by ``wpe`` when it trains; one
    row: the model's own arange, or the packed rows' expanded one) and Gemma's embedding
    scale (``GemmaTextScaledWordEmbedding``: a 0-d tensor, kept when the embedding trains).
    Gemma 2's final soft-capping keeps its tanh output: counted in ``act.logits_bytes``."""
    s = stack(m, t)
    full = t.finetuning == "full"
    arch = architecture_of(m)
    extra = 8 * b.tokens if full else 0
    rows = b.rows if b.kind == "packed" else 1
    if arch == "gpt2":
        extra += 8 * b.seq if full else 0
    else:
        rotary = int(m.head_dim * m.rotary_fraction)
        extra += 2 * s.residual * rotary * rows * b.seq
    if (arch or "").startswith("gemma") and full:
        extra += s.residual
    if m.final_logit_softcapping:
        extra += s.act * m.rows * b.tokens
    return extra


def layer_pair(arch: str) -> tuple[int, int]:
    """Layers of the two models: Gemma 2 alternates sliding and global layers, so two layers
    apart (one of each). The first layer keeps what the others keep: its input needs a
    gradient (a trained embedding, or ``enable_input_require_grads``)."""
    return (3, 1) if family(arch) == "gemma2" else (2, 1)


def check_per_layer(
    arch: str, t: TrainerConfig, b: Batch, mh: ModelConfig | None = None, reentrant: bool = False
) -> None:
    """``arch``'s shape (or ``mh``, the same layout), its layer pair, against the formula."""
    hi, lo = layer_pair(arch)
    mh = mh or shape(arch, hi)
    mh = mh.model_copy(update={"n_layer": hi})
    ml = mh.model_copy(update={"n_layer": lo})
    measured = saved_bytes(mh, t, b, reentrant) - saved_bytes(ml, t, b, reentrant)
    expected = formula(mh, t, b) - formula(ml, t, b)
    # the masks are per model: a pair with sliding and full layers against one with sliding
    # layers only holds one more (act._mask_kinds; alive at the peak of the whole step,
    # tests/test_memory_tracer_moe.py on gpt-oss), a layer input no saved-tensor hook packs
    mask = act.checkpoint_mask_bytes
    expected -= b.rows * (mask(mh, t, b.seq, masked(mh, b)) - mask(ml, t, b.seq, masked(ml, b)))
    if not t.gradient_checkpointing:  # else nothing of the layer's inside is kept
        expected += cpu_minus_cuda(mh, t, b, hi - lo, head=False)
    assert measured == expected, (measured, expected, measured - expected)


# --- the frozen/full matrix: every architecture, precision and fine-tuning mode, each with
# one kernel (eager and sdpa in turn, so each architecture and each setting meets both) and
# the batch layouts in turn (halved to keep the module near a minute on two loaded cores) ------

PRECISIONS = ("bf16-true", "32-true", "bf16-mixed")
BATCHES = ("padded", "unpadded", "packed")
KERNELS = ("eager", "sdpa")
MATRIX = [
    (arch, precision, mode, KERNELS[(i + j) % 2], BATCHES[(i + j) % 3])
    for i, arch in enumerate(ARCHS)
    for j, (precision, mode) in enumerate((p, mo) for p in PRECISIONS for mo in ("full", "frozen"))
]


@pytest.mark.parametrize(("arch", "precision", "mode", "kernel", "batch"), MATRIX)
def test_layer_bytes_equal_transformers(
    arch: str, precision: str, mode: str, kernel: str, batch: str
) -> None:
    check_per_layer(arch, trainer(precision, mode, kernel), Batch(batch))


# --- PEFT LoRA: a seeded sample of target sets, ranks, dropout, precision, batch, kernel ----


LoraCase = tuple[str, list[str], int, float, str, str, str]


def lora_cases(seed: int = 14, per_arch: int = 4) -> list[LoraCase]:
    rng = random.Random(seed)
    cases = []
    for arch in ARCHS:
        fam = family(arch)
        every = ALL_TARGETS.get(fam, LLAMA_ALL)
        sets = [
            ATTENTION_TARGETS.get(fam, ["q_proj", "v_proj"]),
            every,
            ["all-linear"],
            [*ATTENTION_TARGETS.get(fam, ["q_proj", "k_proj"]), "lm_head"],
        ]
        for targets in rng.sample(sets, per_arch):
            cases.append(
                (
                    arch,
                    targets,
                    rng.choice([4, 8, 16, 64]),
                    rng.choice([0.0, 0.1]),
                    rng.choice(PRECISIONS),
                    rng.choice(BATCHES),
                    rng.choice(["eager", "sdpa"]),
                )
            )
    return cases


@pytest.mark.parametrize(
    ("arch", "targets", "rank", "dropout", "precision", "batch", "kernel"), lora_cases()
)
def test_lora_layer_bytes_equal_peft(
    arch: str,
    targets: list[str],
    rank: int,
    dropout: float,
    precision: str,
    batch: str,
    kernel: str,
) -> None:
    peft = pytest.importorskip("peft")
    assert peft is not None
    t = trainer(precision, "lora", kernel, targets, rank, dropout)
    check_per_layer(arch, t, Batch(batch))


# --- one row: torch.matmul folds (1, heads) into a view, so eager keeps views too ----------


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("arch", ["llama", "phi3", "phi3-window", "gpt2"])
def test_single_row_layer_bytes_equal_transformers(arch: str, kernel: str) -> None:
    """A micro-batch of one row: eager attention's matmul keeps v as a view of Phi-3's fused
    ``qkv_proj`` output (without grouped heads), so the whole output stays alive."""
    t = trainer("bf16-true", "full", kernel, rows=1)
    check_per_layer(arch, t, Batch("padded", rows=1))


# --- gradient checkpointing: each layer keeps its input (in the residual dtype) -------------


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non-reentrant"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_checkpointed_layer_keeps_its_input(arch: str, reentrant: bool) -> None:
    """``act.checkpoint_bytes`` against transformers' checkpointed layers (torch's reentrant
    ``CheckpointFunction`` saves the layer inputs; the non-reentrant one keeps them too)."""
    i = list(ARCHS).index(arch) + int(reentrant)
    mode = ("full", "frozen", "lora")[i % 3]
    targets = ATTENTION_TARGETS.get(family(arch), ["q_proj", "v_proj"])
    t = trainer(PRECISIONS[i % 3], mode, KERNELS[i % 2], targets, dropout=0.1)
    if mode == "lora":
        pytest.importorskip("peft")
    t = t.model_copy(update={"gradient_checkpointing": True})
    check_per_layer(arch, t, Batch(BATCHES[i % 3]), reentrant=reentrant)


# --- other shapes: head counts, groups, head sizes, widths, rows and lengths, seeded ----------


def random_cases(
    seed: int = 1414, n: int = 12
) -> list[tuple[str, ModelConfig, TrainerConfig, Batch]]:
    """Shapes the fixed matrix does not use (head_size other than n_embd / n_head where the
    class allows it, other GQA ratios, partial rotary, windows, odd lengths), each with a
    random setting. At least two k/v heads: with one, repeat_kv is a view (docs/memory.md)."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        arch = list(ARCHS)[i % len(ARCHS)]
        fam = family(arch)
        heads = rng.choice([2, 4, 6, 8])
        groups = heads if fam == "gpt2" else rng.choice([g for g in (2, heads) if heads % g == 0])
        head_size = rng.choice([8, 16, 24])
        fixed_width = fam in ("qwen2", "phi", "phi3", "gpt2")  # head_size * n_head == n_embd
        # transformers' configs want n_embd divisible by n_head even with an explicit head_dim
        width = heads * head_size if fixed_width else rng.choice([w * heads for w in (4, 8, 12)])
        layout = dict(ARCHS[arch])
        if "sliding_window_size" in layout:
            layout["sliding_window_size"] = rng.choice([3, 5, 40])
        if fam == "phi":
            layout["rotary_fraction"] = rng.choice([0.25, 0.5, 1.0])
        values = BASE | layout
        values |= {"n_head": heads, "n_query_groups": groups, "head_size": head_size}
        values |= {"n_embd": width, "intermediate_size": rng.choice([40, 96]), "n_layer": 2}
        mode = rng.choice(["full", "frozen", "lora"])
        targets = rng.choice(
            [ATTENTION_TARGETS.get(fam, ["q_proj", "v_proj"]), ALL_TARGETS.get(fam, LLAMA_ALL)]
        )
        t = trainer(
            rng.choice([*PRECISIONS, "16-mixed"]),  # fp16 autocast: CPU autocast has it too
            mode,
            rng.choice(KERNELS),
            targets,
            rng.choice([4, 8]),
            rng.choice([0.0, 0.1]),
        )
        b = Batch(rng.choice(BATCHES), rng.choice([1, 2, 3]), rng.choice([9, 16, 33]))
        t = t.model_copy(update={"micro_batch_size": b.rows})
        cases.append((arch, ModelConfig.model_validate(values), t, b))
    return cases


@pytest.mark.parametrize(("arch", "m", "t", "b"), random_cases())
def test_other_shapes_layer_bytes_equal_transformers(
    arch: str, m: ModelConfig, t: TrainerConfig, b: Batch
) -> None:
    if t.lora.rank:
        pytest.importorskip("peft")
    check_per_layer(arch, t, b, m)


# --- the whole model: the once-per-model part (final norm, lm_head input) -------------------

WHOLE = [
    (arch, *(("full", "bf16-true"), ("lora", "32-true"), ("lora", "bf16-mixed"))[i % 3],
     BATCHES[i % 3], KERNELS[i % 2])
    for i, arch in enumerate(ARCHS)
]  # fmt: skip


@pytest.mark.parametrize(("arch", "mode", "precision", "batch", "kernel"), WHOLE)
def test_whole_model_bytes_equal_formula(
    arch: str, mode: str, precision: str, batch: str, kernel: str
) -> None:
    """All layers, the final norm, the lm_head input (trained: full, or a LoRA lm_head)."""
    fam = family(arch)
    targets = [*ATTENTION_TARGETS.get(fam, ["q_proj", "v_proj"]), "lm_head"]
    if mode == "lora":
        pytest.importorskip("peft")
    t = trainer(precision, mode, kernel, targets if mode == "lora" else None)
    m, b = shape(arch, 2), Batch(batch)
    measured = saved_bytes(m, t, b)
    expected = formula(m, t, b) + once_per_model(m, t, b)
    expected += cpu_minus_cuda(m, t, b, m.n_layer, head=True)
    assert measured == expected, (measured, expected, measured - expected)


def test_the_sample_covers_every_setting() -> None:
    """The seeded LoRA sample reaches each target kind, dropout, precision, batch, kernel."""
    cases = lora_cases()
    assert {len(c[1]) > 3 or c[1] == ["all-linear"] for c in cases} == {True, False}
    assert any("lm_head" in c[1] for c in cases)
    for i, values in ((3, {0.0, 0.1}), (4, set(PRECISIONS)), (5, set(BATCHES))):
        assert {c[i] for c in cases} == values
    assert {c[6] for c in cases} == {"eager", "sdpa"}


# --- parallel blocks read generically from their config.json (cfgcheck.models.generic) ------


def generic_shape(name: str, n_layer: int) -> ModelConfig:
    """The tiny Falcon-7B / GPT-J layouts of the tracer test, ``n_layer`` layers built."""
    from cfgcheck.models.generic import generic_model
    from tests.test_memory_tracer_moe import PARALLEL, SMALL

    data = {**SMALL, "intermediate_size": 96, **PARALLEL[name], "num_hidden_layers": n_layer}
    model = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    return ModelConfig.model_validate({"name": name, "vocab_size": 256, **model})


def generic_per_layer_extra(m: ModelConfig, t: TrainerConfig, b: Batch) -> int:
    """Per layer, what the estimate leaves out: GPT-J's sin and cos tables, made in each
    layer's attention and kept by ``apply_rotary_pos_emb`` for q and k (four (rows, seq, 1,
    rotary_dim) tensors in the residual dtype; one row unless the batch carries position ids;
    models/gptj/modeling_gptj.py lines 146-154), and Falcon's two int64 split indices (line
    272)."""
    if architecture_of(m) == "falcon":
        return 16
    rows = b.rows if b.kind == "packed" else 1
    rotary = int(m.head_dim * m.rotary_fraction)
    return 4 * stack(m, t).residual * rotary * rows * b.seq


GENERIC_MATRIX = [
    ("falcon-7b", "bf16-true", "full", "sdpa", "padded", None),
    ("falcon-7b", "bf16-mixed", "full", "sdpa", "unpadded", None),
    ("falcon-7b", "32-true", "frozen", "sdpa", "packed", None),
    ("falcon-7b", "bf16-true", "lora", "sdpa", "unpadded", ["query_key_value"]),
    ("falcon-7b", "bf16-mixed", "lora", "sdpa", "padded", ["query_key_value", "dense_4h_to_h"]),
    ("gpt-j", "bf16-true", "full", "sdpa", "padded", None),
    ("gpt-j", "bf16-mixed", "full", "eager", "unpadded", None),
    ("gpt-j", "32-true", "frozen", "eager", "packed", None),
    ("gpt-j", "bf16-true", "full", "eager", "packed", None),
    ("gpt-j", "bf16-true", "lora", "sdpa", "unpadded", ["q_proj", "v_proj", "fc_in"]),
]


@pytest.mark.parametrize(
    ("name", "precision", "mode", "kernel", "batch", "targets"), GENERIC_MATRIX
)
def test_parallel_block_layer_bytes_equal_transformers(
    name: str, precision: str, mode: str, kernel: str, batch: str, targets: list[str] | None
) -> None:
    """Falcon-7B (sdpa's math kernel: fp32 q, k, v broadcast to every head and the fp32
    softmax) and GPT-J (``rotary_dim``, ``gelu_new``'s four tensors, eager's fp32 q and k),
    one shared norm each: one layer's saved tensors to the byte. Falcon's eager attention is
    not here: it softmaxes in the compute dtype (line 352), counted in fp32 (over)."""
    t = trainer(precision, mode, kernel, targets)
    b = Batch(batch)
    mh, ml = generic_shape(name, 2), generic_shape(name, 1)
    measured = saved_bytes(mh, t, b) - saved_bytes(ml, t, b)
    expected = formula(mh, t, b) - formula(ml, t, b) + generic_per_layer_extra(mh, t, b)
    expected += cpu_minus_cuda(mh, t, b, 1, head=False)
    assert measured == expected, (measured, expected, measured - expected)
