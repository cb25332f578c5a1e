"""Peak GPU memory of a training step, per GPU, by component.

The peak is the larger of two moments of a step:

* end of forward / start of backward: weights, autocast copies, optimizer states (kept from
  the previous step), gradients only when they persist (gradient accumulation), all
  activations, and the logits/loss peak (with checkpointing under autocast, the larger of
  the forward's log-softmax, while autocast's cache holds the trained weights' casts, and the
  start of backward, when only the lm_head's cast is saved);
* the optimizer step: weights, gradients, optimizer states and the step's temporaries;
* with gradient checkpointing, the recomputation of one layer during backward, with that
  layer's autocast casts.

Each moment is checked against a CPU trace of the real step (tests/test_memory_tracer.py).

``allocated`` is what ``torch.cuda.max_memory_allocated()`` reports; ``reserved`` adds what
the caching allocator holds but does not hand out (:mod:`cfgcheck.memory.allocator`);
``total`` adds the CUDA context (:data:`CUDA_CONTEXT_GIB`) and paged optimizer states, which
no torch counter sees but the GPU does.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from cfgcheck.memory import activations as act
from cfgcheck.memory import (
    allocator,
    attention_backward,
    coverage,
    expert_parallel,
    offload,
    rl,
    sharding,
    tiled,
    weights,
)
from cfgcheck.memory.allocator import rounding_bytes
from cfgcheck.memory.params import ParamCount, count_params
from cfgcheck.memory.recompute import backward_front, recompute_moment, softmax_own
from cfgcheck.memory.stack import as_built, attention, sdpa_masked, sdpa_math, stack
from cfgcheck.memory.stack import padded_batches as padded_batches  # moved down; re-exported
from cfgcheck.pipeline import Pipeline
from cfgcheck.reuse import ESTIMATES, Unkeyable, content_number, derived, fields_number, pinned
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

GIB = 1024**3
# CUDA context + cuBLAS workspaces + kernels loaded by a training step, outside torch's
# counters: NVML "used" minus torch's reserved at the end of each calibration run, 0.73 to
# 0.75 GiB on the H100 (torch 2.11, CUDA 13, lazy module loading; benchmarks/calibration/).
CUDA_CONTEXT_GIB = 0.75
CONTEXT_NOTE = "context + workspaces, measured on H100"


@dataclass(frozen=True)
class Component:
    key: str
    label: str
    bytes: int
    note: str = ""

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU peak memory. ``components`` sum to ``total_bytes``."""

    components: tuple[Component, ...]
    phase: str
    params: ParamCount
    trainable: int
    world_size: int
    seq_len: int
    notes: tuple[str, ...] = field(default=())
    # Relative error the estimate vouches for (calibrated settings), or the wider margin of a
    # setting the measurements do not cover; see :mod:`cfgcheck.memory.coverage`.
    margin: float = 0.10
    uncalibrated: tuple[str, ...] = field(default=())
    # A colocated vLLM engine's share of the GPU (memory/rl.py): known in bytes only on a GPU
    # (:meth:`with_vllm`); ``vllm_beside``: the bytes alive beside it when it sleeps through
    # the training step (None: it is held through the step's peak).
    vllm_share: float = 0.0
    vllm_beside: int | None = None
    # Host (CPU) memory the offload holds per process (memory/offload.py), and the processes
    # a node runs (trainer.devices): what runs out next when the GPU no longer does.
    host: tuple[Component, ...] = field(default=())
    processes_per_node: int = 1

    @property
    def host_bytes(self) -> int:
        return sum(c.bytes for c in self.host)

    @property
    def host_node_bytes(self) -> int:
        return self.host_bytes * self.processes_per_node

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes for c in self.components)

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    def get(self, key: str) -> int:
        return sum(c.bytes for c in self.components if c.key == key)

    @property
    def allocated_bytes(self) -> int:
        return (
            self.total_bytes
            - self.get("fragmentation")
            - self.get("cuda_context")
            - self.get("paged_states")
            - self.get("ep_buffer")
        )

    @property
    def upper_bytes(self) -> int:
        """The total with the stated margin: what a GPU needs for a safe "fits"."""
        return int(self.total_bytes * (1 + self.margin))

    @property
    def reserved_bytes(self) -> int:
        return self.allocated_bytes + self.get("fragmentation")

    @property
    def cache_floor(self) -> int:
        """The part of the allocator cache torch cannot free: block rounding and split
        remainders inside segments that hold live blocks (``release_cached_blocks`` returns
        only wholly free segments to the driver)."""
        return min(self.get("fragmentation"), rounding_bytes(self.allocated_bytes))

    def with_vllm(self, capacity: int) -> MemoryEstimate:
        """This estimate with a colocated vLLM engine's share of a GPU of ``capacity`` bytes
        (vLLM's ``gpu_memory_utilization`` is a share of the device's total memory): beside
        the step's peak, or, when it sleeps through the training step, beside the persistent
        state while it generates, whichever is larger."""
        if not self.vllm_share or any(c.key == "vllm" for c in self.components):
            return self
        share = int(self.vllm_share * capacity)
        vllm = Component("vllm", "vLLM engine", share, f"{self.vllm_share:g} of the GPU")
        if self.vllm_beside is None:
            return replace(self, components=(vllm, *self.components))
        if self.vllm_beside + share <= self.allocated_bytes:
            return self
        kept = tuple(c for c in self.components if c.key in PERSISTENT)
        context = tuple(c for c in self.components if c.key == "cuda_context")
        kept = (*kept, vllm, *context)
        return replace(self, components=kept, phase="generation (vLLM)")

    def on_gpu(self, capacity: int) -> MemoryEstimate:
        """This estimate on a GPU of ``capacity`` bytes: when the allocator's cache would take
        the device past its capacity, torch frees the unused cached segments and retries
        instead (``release_cached_blocks``, c10/cuda/CUDACachingAllocator.cpp), so the cache
        holds at most what is left; block rounding inside live blocks cannot be freed."""
        est = self.with_vllm(capacity)
        cache = est.get("fragmentation")
        floor = est.cache_floor
        room = max(floor, capacity - (est.total_bytes - cache))
        if room >= cache:
            return est
        comps = tuple(
            replace(c, bytes=room, note=c.note + ", capped: the GPU is full, torch frees it")
            if c.key == "fragmentation"
            else c
            for c in est.components
        )
        return replace(est, components=comps)

    def to_dict(self) -> dict[str, Any]:
        total = self.total_bytes
        return {
            "phase": self.phase,
            "params": self.params.total,
            "active_params": self.params.active,
            "trainable_params": self.trainable,
            "world_size": self.world_size,
            "seq_len": self.seq_len,
            "components": [
                {
                    "key": c.key,
                    "label": c.label,
                    "bytes": c.bytes,
                    "gib": round(c.gib, 3),
                    "share": round(c.bytes / total, 4) if total else 0.0,
                    "note": c.note,
                }
                for c in self.components
            ],
            "allocated_gib": round(self.allocated_bytes / GIB, 3),
            "reserved_gib": round(self.reserved_bytes / GIB, 3),
            "total_gib": round(self.total_gib, 3),
            "margin": self.margin,
            "upper_gib": round(self.upper_bytes / GIB, 3),
            "calibrated": not self.uncalibrated,
            "uncalibrated": list(self.uncalibrated),
            "notes": list(self.notes),
            "host": {
                "per_process_gib": round(self.host_bytes / GIB, 3),
                "per_node_gib": round(self.host_node_bytes / GIB, 3),
                "processes_per_node": self.processes_per_node,
                "components": [
                    {"key": c.key, "label": c.label, "bytes": c.bytes, "note": c.note}
                    for c in self.host
                ],
            }
            if self.host
            else None,
        }


# The components alive through a whole run (not only during one moment of a step).
PERSISTENT = frozenset(
    {
        "weights",
        "adapters",
        "reference_model",
        "optimizer_states",
        "sharding_buffers",
        "ep_buffer",
    }
)


def sequence_length(d: DataConfig) -> int:
    """Worst-case tokens per sample, as the pipeline feeds them (:mod:`cfgcheck.pipeline`):
    packed rows are ``max_seq_length``; otherwise the tokenizer's ``max_length`` (which may
    be above ``max_seq_length``) rounded up to ``pad_to_multiple_of``."""
    # a function of the data section alone (building the pipeline validates a trainer)
    return derived("sequence_length", d, (), lambda: Pipeline.from_data(d).memory_length())


# Trainer settings the estimate never reads (no module of cfgcheck/memory/ names them; a test
# checks the sources): left out of the cache key, so a learning-rate sweep shares estimates.
UNREAD_TRAINER_FIELDS = frozenset({"learning_rate", "gpu"})


def estimate(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> MemoryEstimate:
    """Per-GPU peak memory of a training step of ``m`` on ``d`` with ``t`` (see the module
    docstring). Results are cached by the sections' contents (:mod:`cfgcheck.reuse`)."""
    with pinned():  # the estimate never changes a section: each is keyed once
        try:
            key = _key(m, d, t)
        except Unkeyable:
            return _estimate(m, d, t)
        found: MemoryEstimate = ESTIMATES.get_or(key, lambda: _estimate(m, d, t))
        return found


def _key(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> Hashable:
    """The sections' contents by their content numbers (each stands for one content,
    process-wide), without the trainer fields the estimate never reads."""
    model, data = content_number(m), content_number(d)
    trainer = fields_number(t, UNREAD_TRAINER_FIELDS)
    if model is None or data is None or trainer is None:
        raise Unkeyable("section")
    return ("estimate", model, data, trainer)


def _estimate(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> MemoryEstimate:
    """Peak per-GPU memory of one training step of this model, data and trainer."""
    m = as_built(m, t)  # LitGPT unties the lm_head
    # context parallelism: each GPU holds its slice of every sequence (ring attention /
    # Ulysses keep activations and logits of the local tokens only)
    seq = -(-sequence_length(d) // t.context_parallel)
    # preference training runs chosen and rejected as one batch (trl DPOTrainer _compute_loss:
    # "batch is [chosen, rejected]")
    b = t.micro_batch_size * t.sequences_per_sample
    tokens = b * seq
    st = stack(m, t)
    masked = sdpa_masked(m, d, t, st, seq)
    div = sharding.divisors(t)
    # expert parallelism: the routed experts' part of each term divided further
    ep = expert_parallel.routed(m, t, weights.master_bytes(t))
    n_trainable = weights.trainable_params(m, t)

    def split(total: int, d: int, routed: int | None = None) -> int:
        part = ep.share(total, n_trainable) if routed is None else routed
        return expert_parallel.spread(total, part, d, expert_parallel.divisor(t, d))

    w = split(weights.weight_bytes(m, t), div.weights, ep.weights)
    lora = 0 if t.finetuning == "full" else n_trainable
    adapters = lora * weights.trainable_bytes(m, t) // div.weights
    auto = weights.autocast_copy_bytes(m, t) // div.weights
    all_grads = weights.gradient_bytes(m, t)
    grads = split(all_grads, div.gradients)
    states = split(weights.optimizer_state_bytes(m, t), div.optimizer)
    paged_states = split(weights.paged_state_bytes(m, t), div.optimizer)
    states -= paged_states
    step_tmp = split(weights.optimizer_step_bytes(m, t), div.optimizer)
    # CPU / NVMe offload: what it moves off the GPU (memory/offload.py)
    moved = offload.on_gpu(
        m, t, div, offload.Terms(w, adapters, auto, grads, states, paged_states, step_tmp)
    )
    w, adapters, auto, grads = moved.weights, moved.adapters, moved.autocast, moved.gradients
    states, paged_states, step_tmp = moved.states, moved.paged_states, moved.step
    buffers = sharding.buffer_bytes(m, t, all_grads - ep.share(all_grads, n_trainable))
    # FSDP / ZeRO-3 gather buffers live while units run, not at the optimizer step
    gather = buffers if sharding.gathers(t) else 0
    acts = act.activation_bytes(m, t, b, seq, masked=masked)
    # Axolotl tiled_mlp: the MLPs keep only their input; one slice is recomputed (tiled.py)
    mlp = tiled.mlp_kept(m, t) * tokens
    if not t.gradient_checkpointing:  # backward recomputes one slice of the last layer's
        acts -= m.n_layer * mlp - mlp // tiled.shards(t, seq)  # MLP, every layer still held
    logits = act.logits_bytes(m, t, b, seq)
    loss_note: str = t.loss_chunking
    if rl.applies(t):  # the trainer takes the scored tokens' log-probabilities itself
        logits = rl.logprob_bytes(m, t, b, seq)
        loss_note = f"{t.rl.logprobs} log-probabilities of {rl.scored(t, seq)} tokens a sequence"
    loss_phase = "forward"
    # persistent gradients of the previous micro-batches; without accumulation the first
    # gradient (the lm_head's) appears only after the loss buffers' peak: autograd runs the
    # NLL and log-softmax backward before the lm_head's matmul (CPU-traced)
    fwd_grads = grads if t.gradient_accumulation_steps > 1 else 0
    fwd_auto, fwd_logits = auto, logits
    if t.gradient_checkpointing and auto:
        # the checkpointed layers keep no weight casts: at the start of backward only the
        # lm_head's cast is saved; inside the forward (log-softmax of the loss) autocast's
        # cache still holds the casts of every weight that trains (torch caches casts of
        # leaves that require grad only: a frozen base's casts are transient)
        head_cast = 2 * m.head_rows * m.n_embd // div.weights
        cached = auto if t.finetuning == "full" else head_cast + 2 * lora // div.weights
        in_forward = cached + (logits if rl.applies(t) else act.logits_forward_bytes(m, t, b, seq))
        fwd_auto, fwd_logits = max((head_cast, logits), (cached, in_forward - cached), key=sum)
    if t.framework == "litgpt" and t.loss_chunking == "chunked":
        # LitGPT's loop holds the previous step's logits until this forward returns: at that
        # moment they, this step's logits and (bitsandbytes 0.41/0.42, stack.litgpt_layout) the
        # previous step's quantized-linear inputs, which its graph still holds, are alive; in
        # backward only this step's logits and their gradients are. The larger moment counts.
        prev = act.quantized_input_bytes(m, t, tokens)
        end = act.litgpt_forward_end_bytes(m, t, b, seq)
        if prev + end > fwd_logits:
            acts += prev
            fwd_logits, loss_note = end, "chunked; the previous step's logits still held"
            loss_phase = "forward (end)"
    # gpt-oss's eager attention: the last layer's scores held by its locals, with the masks
    attention_fwd = act.attention_forward_bytes(m, t, b, seq)
    if attention_fwd > fwd_logits:
        fwd_logits, loss_note = attention_fwd, f"{loss_note}; the last layer's eager attention"
    if not t.gradient_checkpointing and loss_phase == "forward":  # the last layer's backward
        backward = act.last_layer_backward_bytes(m, t, tokens) + weights.dequant_bytes(m, t, tokens)
        # or, with eager attention, its softmax's backward (attention_backward.py)
        backward = max(backward, attention_backward.last_layer_extra(m, t, b, seq, masked))
        # by then the lm_head's backward has made its gradient
        head_grad = 0
        if t.finetuning == "full" and t.gradient_accumulation_steps == 1:
            head_grad = m.head_rows * m.n_embd * weights.master_bytes(t) // div.gradients
        if backward + head_grad > fwd_logits:
            fwd_logits, loss_note = backward, f"{t.loss_chunking}; then the last layer's backward"
            fwd_grads += head_grad
            loss_phase = "backward (last layer)"
    forward = fwd_auto + fwd_grads + acts + fwd_logits
    # checkpointing: backward recomputes one layer while the layer inputs are still kept and
    # the gradient of the hidden states flows in and out of it (two hidden-size tensors)
    recompute = 0
    layer = 0
    dequant = 0
    auto_layer = 0
    if t.gradient_checkpointing:
        layer = act.layer_activations(m, t, masked).bytes(tokens, seq)
        layer -= mlp - mlp // tiled.shards(t, seq)
        hidden_grads = 2 * st.residual * m.n_embd * tokens
        # the recomputed layer's largest moment and the bnb buffers alive at it (recompute.py)
        moment = recompute_moment(m, t, tokens, weights.dequant_bytes(m, t, tokens))
        dequant = moment.dequant
        ckpts = act.checkpoint_bytes(m, t, tokens)
        held_grads, held_ckpts = grads, ckpts
        masks = b * act.checkpoint_mask_bytes(m, t, seq, masked)  # layer inputs
        eager_own = 0  # the layer's own gradients made by its softmax's backward, beyond own
        if (
            t.finetuning == "full"
            and t.gradient_accumulation_steps == 1
            and not t.strategy.startswith("zero")  # DeepSpeed's grad partitions: not modelled
        ):
            # one layer's gradients per GPU (its routed experts' divided by expert parallelism)
            mb = weights.master_bytes(t)
            layer_grads = split(
                count_params(m).per_block * mb,
                div.gradients,
                ep.trainable // max(m.n_layer, 1) * mb,
            )
            own = moment.own * mb // div.gradients  # the recomputed layer's, made by then
            front = backward_front(
                m, t, grads, layer_grads, own, ckpts, (masks, act._mask_kinds(m, seq))
            )
            held_grads, held_ckpts, masks = front.gradients, front.checkpoints, front.masks
            eager_own = max(0, softmax_own(m) * mb // div.gradients - own)
        # only the recomputed layer's 16-bit weight casts are alive (the forward's are freed
        # with its discarded activations; the recomputation casts again under autocast)
        auto_layer = weights.autocast_layer_bytes(m, t) // div.weights
        hidden_grads += act.dispatch_backward_bytes(m, t, tokens, seq)  # MoE: routed gradients
        hidden_grads += masks  # layer inputs
        hidden_grads += moment.extra  # the layer's backward (or 4-bit: see recompute.py)
        # eager attention: the layer at its softmax's backward, its MLP released by then
        eager = attention_backward.recompute_extra(m, t, b, seq, masked)
        if eager is not None:
            hidden_grads = max(hidden_grads, masks + eager + eager_own)
        recompute = auto_layer + held_grads + held_ckpts + layer + dequant + hidden_grads + gather
    step = grads + step_tmp
    base = [
        Component("weights", "weights", w, _weights_note(m, t, st.kbit_upcast)),
        Component("adapters", "LoRA adapters", adapters, f"{8 * st.adapter}-bit") if lora else None,
        Component("reference_model", "reference model", w, "frozen copy of the weights")
        if t.reference_model
        else None,
        Component("optimizer_states", "optimizer states", states, t.optimizer) if states else None,
        Component("sharding_buffers", "sharding buffers", buffers - gather, t.strategy)
        if buffers - gather
        else None,
    ]
    gathered = (
        Component("sharding_buffers", "sharding buffers", gather, f"{t.strategy} all-gather")
        if gather
        else None
    )
    forward += gather
    # an online trainer generating on the training GPU, between optimizer steps (memory/rl.py)
    generation = rl.generation_bytes(m, t, seq * t.context_parallel, div.weights)
    prompt = rl.prompt_note(t, seq * t.context_parallel)  # an online trainer's prompt bound
    parts: list[Component | None]
    if generation > max(forward, step, recompute):
        phase = "generation"
        kv = "; ".join(filter(None, ["KV cache, model.generate", prompt]))
        parts = [Component("generation", "generation", generation, kv)]
    elif forward >= max(step, recompute):
        phase = loss_phase
        parts = [
            Component("autocast_copies", "autocast 16-bit weight copies", fwd_auto)
            if fwd_auto
            else None,
            Component("gradients", "gradients", fwd_grads) if fwd_grads else None,
            Component("activations", "activations", acts, _act_note(m, t, masked, prompt)),
            Component("logits_loss", "logits and loss", fwd_logits, loss_note),
            gathered,
        ]
    elif recompute >= step:
        phase = "backward (recomputation)"
        parts = [
            Component("autocast_copies", "autocast 16-bit weight copies", auto_layer)
            if auto_layer
            else None,
            Component("gradients", "gradients", held_grads) if held_grads else None,
            Component(
                "activations",
                "activations",
                recompute - auto_layer - held_grads - dequant - gather,
                _act_note(m, t, masked, prompt) + ", one layer recomputed",
            ),
            Component("dequant", "bitsandbytes buffers", dequant, "dequantized weight, casts")
            if dequant
            else None,
            gathered,
        ]
    else:
        phase = "optimizer step"
        parts = [
            Component("gradients", "gradients", grads),
            Component("optimizer_step", "optimizer step temporaries", step_tmp),
        ]
    comps = [c for c in [*base, *parts] if c is not None]
    allocated = sum(c.bytes for c in comps)
    if t.gradient_checkpointing and not layer:
        layer = act.layer_activations(m, t, masked).bytes(tokens, seq)
    cache = allocator.cached_bytes(
        t,
        st,
        allocated,
        m.head_rows * tokens,
        layer,
        grads,
        step - recompute if phase == "optimizer step" and recompute else None,
    )
    comps.append(Component("fragmentation", "allocator cache", cache.bytes, cache.note))
    comps.append(
        Component("cuda_context", "CUDA context", int(CUDA_CONTEXT_GIB * GIB), CONTEXT_NOTE)
    )
    dispatch = expert_parallel.buffer_bytes(m, t)
    if dispatch:
        comps.append(
            Component(
                "ep_buffer",
                "expert-parallel dispatch buffer",
                dispatch,
                "DeepEP Buffer: cudaMalloc, outside torch's counters",
            )
        )
    if paged_states:
        comps.append(
            Component(
                "paged_states",
                "paged optimizer states",
                weights.managed_device_bytes(paged_states),
                "CUDA unified memory: outside torch's counters, in 128 MiB steps",
            )
        )
    cov = coverage.coverage(m, d, t)
    share, beside = 0.0, None
    if t.rl.generation == "vllm-colocate":
        share = t.rl.vllm_memory_share
        beside = sum(c.bytes for c in base if c is not None) if t.rl.vllm_sleeps else None
    return MemoryEstimate(
        components=tuple(comps),
        phase=phase,
        params=count_params(m),
        trainable=weights.trainable_params(m, t),
        world_size=t.world_size,
        seq_len=seq,
        notes=(*cov.notes, prompt) if prompt else cov.notes,
        margin=cov.margin,
        uncalibrated=cov.uncalibrated,
        vllm_share=share,
        vllm_beside=beside,
        host=tuple(
            Component(h.key, h.label, h.bytes, h.note) for h in offload.host_parts(m, t, div)
        ),
        processes_per_node=t.devices,
    )


def _weights_note(m: ModelConfig, t: TrainerConfig, upcast: bool) -> str:
    where = offload.placement(t)
    if where.params != "none" and t.finetuning == "full":
        return f"offloaded to {where.params}: only the gathered units stay"
    if where.optimizer != "none" and t.finetuning == "full":
        return f"16-bit; the fp32 master on {where.optimizer} (offload)"
    if weights.prequantized_bytes(m) is not None and t.quantization == "none":
        return f"{m.weight_format} block linears (the checkpoint's quantization_config)"
    if t.quantization != "none" and t.finetuning != "full":
        rest = ", the rest fp32 (prepare_model_for_kbit_training)" if upcast else ""
        return f"{t.quantization} block linears{rest}"
    return "fp32 master weights" if weights.master_bytes(t) == 4 else "16-bit"


def _act_note(m: ModelConfig, t: TrainerConfig, masked: bool, prompt: str = "") -> str:
    kernel = attention(m, t)  # the kernel that really runs (Gemma 2 under transformers: eager)
    mask = " with a mask" if masked and kernel == "sdpa" else ""
    ran = "" if kernel == t.attention else f" in place of {t.attention}"
    if sdpa_math(m, t):  # Falcon-7B's one k/v head: no fused kernel takes it
        kernel, mask, ran = "sdpa", "", " (torch's fp32 math kernel: one k/v head)"
    state = "checkpointed" if t.gradient_checkpointing else "all layers"
    return f"{kernel}{mask}{ran}, {state}" + (f"; {prompt}" if prompt else "")
