"""A CPU ground truth for ``torch.cuda.max_memory_allocated()`` of a whole training step.

:class:`AllocTracer` is a ``TorchDispatchMode``: every aten op (forward, autograd's backward
ops, checkpoint recomputation, the optimizer's foreach kernels) passes through it, and it
records the untyped storage of each op output, keyed by the storage itself, with a
``weakref`` whose callback fires when the storage is freed (torch preserves a storage's Python
object for as long as its C++ ``StorageImpl`` lives, so the callback fires when autograd, a
checkpoint or the optimizer drops the last reference, not when the Python wrapper goes out of
scope). The running sum of live bytes and its maximum, with the phase of the loop it happened
in, is the tensor-level analogue of the CUDA caching allocator's allocated counter (the same
method as torch's own ``torch/distributed/_tools/mem_tracker.py``).

What it does not see, by construction: temporaries inside one kernel (freed before the op
returns), cuBLAS workspaces and the 512-byte block rounding of the CUDA allocator
(``cuda_rounded`` gives the rounded figure).

:func:`traced_step` runs the loop of ``benchmarks/calibration/gpu_measure.py`` (the method that
measured the H100 rows) on CPU under the tracer: the same model build (``hf_config`` of that
script), PEFT LoRA, autocast for ``-mixed``, non-reentrant checkpointing, gradient
accumulation, two optimizer steps with ``zero_grad(set_to_none=True)``, the same batches.
Differences from CUDA are set explicitly: ``foreach=True`` for the torch optimizers (CUDA's
default; CPU's is the per-parameter loop).
"""

from __future__ import annotations

import importlib.util
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ROOT = Path(__file__).resolve().parent.parent
CUDA_BLOCK = 512  # the CUDA caching allocator rounds every allocation up to 512 bytes


@dataclass
class Peak:
    bytes: int = 0
    rounded: int = 0  # with CUDA's 512-byte rounding of each storage
    phase: str = ""
    op: str = ""
    per_phase: dict[str, int] = field(default_factory=dict)


class AllocTracer(TorchDispatchMode):
    """Live storage bytes over time; ``peak`` is the maximum since :meth:`reset_peak`."""

    def __init__(self, snapshot: bool = False) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # StorageImpl address -> bytes
        self.origin: dict[int, str] = {}  # StorageImpl address -> "phase:op" that made it
        self.snapshot = snapshot  # keep what is live at the peak (slow: for diagnosis)
        self.at_peak: list[tuple[str, int]] = []
        self._refs: dict[int, weakref.ref[Any]] = {}
        self.current = 0
        self.current_rounded = 0
        self.phase = "setup"
        self.peak = Peak()
        self.allocs = 0
        # every allocation and free in order: (storage id, bytes) / (storage id, -1), with the
        # phase:op that made it (the simulator's input, cfgcheck/memory/allocsim.py)
        self.record = False
        self.events: list[tuple[int, int]] = []
        self.event_ops: list[str] = []
        self._last: tuple[str, int | None] = ("", None)  # the last op and its output's storage

    # -- bookkeeping ------------------------------------------------------------------------
    def _free(self, key: int, _ref: object) -> None:
        n = self.live.pop(key, None)
        self._refs.pop(key, None)
        self.origin.pop(key, None)
        if n is not None:
            self.current -= n
            self.current_rounded -= _round(n)
            if self.record:
                self.events.append((key, -1))
                self.event_ops.append("setup:free" if self.phase == "setup" else "free")

    def track(self, t: object, op: str = "") -> None:
        """Count the storage of ``t`` (a tensor) if it is new or has grown."""
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse / wrapper tensors
            return
        n = st.nbytes()
        key = st._cdata
        old = self.live.get(key)
        if old == n:
            return
        if old is None:
            if n == 0:
                return
            self._refs[key] = weakref.ref(st, partial(self._free, key))
            self.allocs += 1
            self.origin[key] = f"{self.phase}:{op}"
            old = 0
        elif self.record:  # a storage that grows: freed and allocated again
            self.events.append((key, -1))
            self.event_ops.append("setup:free" if self.phase == "setup" else "free")
        if self.record:
            self.events.append((key, n))
            self.event_ops.append(f"{self.phase}:{op}")
        self.live[key] = n
        self.current += n - old
        self.current_rounded += _round(n) - _round(old)
        self._note(op)

    def _note(self, op: str) -> None:
        p = self.peak
        p.per_phase[self.phase] = max(p.per_phase.get(self.phase, 0), self.current)
        if self.current > p.bytes:
            p.bytes, p.phase, p.op = self.current, self.phase, op
            if self.snapshot:
                self.at_peak = [(self.origin.get(k, "?"), n) for k, n in self.live.items()]
        p.rounded = max(p.rounded, self.current_rounded)

    def reset_peak(self) -> None:
        """Like ``torch.cuda.reset_peak_memory_stats()``: the peak restarts at what is live."""
        self.peak = Peak(self.current, self.current_rounded, self.phase, "reset")

    def track_all(self, tensors: Any) -> None:
        for t in tree_flatten(tensors)[0]:
            self.track(t)

    @contextmanager
    def in_phase(self, name: str) -> Iterator[None]:
        self.phase = name
        yield

    # -- the dispatch hook --------------------------------------------------------------------
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = str(func.overloadpacket.__name__)
        if self._index_backward(func, args, kwargs):
            # autograd's index_backward fills its zeros in place outside a dispatch mode
            out = torch.ops.aten._index_put_impl_(*args[:3], accumulate=True, unsafe=True)
        else:
            out = func(*args, **(kwargs or {}))
        made = out.untyped_storage()._cdata if isinstance(out, torch.Tensor) else None
        self._last = (name, made)  # no reference kept: it would delay the free
        for t in tree_flatten(out)[0]:
            self.track(t, name)
        if name.endswith("_") or "out" in (kwargs or {}):  # in place: a storage may grow
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata in self.live:
                    self.track(t, name)
        return out

    def _index_backward(self, func: Any, args: tuple[Any, ...], kwargs: Any) -> bool:
        """Whether ``func`` is the out-of-place ``index_put`` autograd's ``index_backward`` runs
        only under a dispatch mode: ``index_backward(grad.new_zeros(...), indices, grad)``
        (tools/autograd/derivatives.yaml, ``index.Tensor``) accumulates into its zeros in place
        (``at::_index_put_impl_``) unless ``areAnyTensorSubclassLike`` is true, which it is
        whenever a ``TorchDispatchMode`` is active (ATen/TensorSubclassLikeUtils.h
        ``isTensorSubclassLike``: ``if (c10::impl::dispatch_mode_enabled()) return true``), so
        a trace would count a copy CUDA never allocates (torch.profiler, no mode: the
        ``new_zeros`` and nothing for ``_index_put_impl_``). Recognised by its shape: an
        accumulating ``index_put`` run by the autograd engine whose target the previous op
        made with ``new_zeros``."""
        if func is not torch.ops.aten.index_put.default:
            return False
        if torch._C._current_graph_task_id() == -1:  # not inside autograd's backward
            return False
        accumulate = (kwargs or {}).get("accumulate", args[3] if len(args) > 3 else False)
        op, made = self._last
        target = args[0]
        return (
            bool(accumulate)
            and op == "new_zeros"
            and isinstance(target, torch.Tensor)
            and made == target.untyped_storage()._cdata
        )


def _round(n: int) -> int:
    return -(-n // CUDA_BLOCK) * CUDA_BLOCK if n else 0


# -- gpu_measure.py's loop on CPU ---------------------------------------------------------------


def gpu_measure() -> Any:
    """``benchmarks/calibration/gpu_measure.py`` as a module (its ``hf_config``)."""
    path = ROOT / "benchmarks" / "calibration" / "gpu_measure.py"
    spec = importlib.util.spec_from_file_location("cfgcheck_gpu_measure", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class StepResult:
    peak: Peak
    at_peak: list[tuple[str, int]]  # (phase:op that made it, bytes) live at the peak
    baseline: int  # live bytes when the peak was reset (weights, batch)
    params: int
    trainable: int
    # with ``record``: every allocation / free of the build's tensors and the steps, in order
    events: list[tuple[int, int]] = field(default_factory=list)
    event_ops: list[str] = field(default_factory=list)


def make_optimizer(name: str, params: list[Any]) -> Any:
    """gpu_measure.py's optimizers, with CUDA's default multi-tensor (foreach) path."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, foreach=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9, foreach=True)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-5, foreach=True)
    raise ValueError(f"optimizer {name} has no CPU path (bitsandbytes)")


def build(m: dict[str, Any], t: dict[str, Any], gm: Any) -> Any:
    """The model as gpu_measure.py builds it; a quantized run needs bitsandbytes (its CPU
    backend runs 4-bit layers: :func:`build_quantized`)."""
    import transformers as tf

    prec = t["precision"]
    wdtype = torch.bfloat16 if prec == "bf16-true" else torch.float32
    torch.manual_seed(0)
    if m.get("hf_config"):  # a family cfgcheck reads generically: its own config.json
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        hf = m["hf_config"]
        cfg = CONFIG_MAPPING[hf["model_type"]].from_dict(dict(hf))
    else:
        cfg = gm.hf_config(m)
    if t.get("quantization", "none") != "none":
        return build_quantized(cfg, t)
    model = tf.AutoModelForCausalLM.from_config(
        cfg, dtype=wdtype, attn_implementation=t["attention"]
    )
    model.config.use_cache = False
    if t["finetuning"] == "lora":
        import peft

        lc = t["lora"]
        model = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=lc["rank"],
                lora_alpha=lc["alpha"],
                lora_dropout=lc["dropout"],
                target_modules=lc["targets"],
                target_parameters=lc.get("target_parameters") or None,
                task_type="CAUSAL_LM",
            ),
        )
    if t["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if t["finetuning"] == "lora":
            model.enable_input_require_grads()
    model.train()
    return model


def build_quantized(cfg: Any, t: dict[str, Any]) -> Any:
    """QLoRA as gpu_measure.py runs it, on CPU: the random bf16 checkpoint saved and reloaded
    with a ``BitsAndBytesConfig`` (compute dtype bf16), ``peft.prepare_model_for_kbit_training``
    (fp32 non-quantized parameters, non-reentrant checkpointing), then LoRA."""
    import tempfile

    import peft
    import transformers as tf

    quant = t["quantization"]
    with tempfile.TemporaryDirectory() as path:
        tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(path)
        bnb_cfg = tf.BitsAndBytesConfig(
            load_in_4bit=quant in ("nf4", "nf4-dq", "fp4"),
            load_in_8bit=quant == "int8",
            bnb_4bit_quant_type="fp4" if quant == "fp4" else "nf4",
            bnb_4bit_use_double_quant=quant == "nf4-dq",
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        model = tf.AutoModelForCausalLM.from_pretrained(
            path,
            quantization_config=bnb_cfg,
            dtype=torch.bfloat16,
            device_map={"": "cpu"},
            attn_implementation=t["attention"],
        )
    model = peft.prepare_model_for_kbit_training(
        model,
        use_gradient_checkpointing=t["gradient_checkpointing"],
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    model.config.use_cache = False
    lc = t["lora"]
    model = peft.get_peft_model(
        model,
        peft.LoraConfig(
            r=lc["rank"],
            lora_alpha=lc["alpha"],
            lora_dropout=lc["dropout"],
            target_modules=lc["targets"],
            target_parameters=lc.get("target_parameters") or None,
            task_type="CAUSAL_LM",
        ),
    )
    model.train()
    return model


class CudaDropout(torch.nn.Module):
    """CUDA's dropout on CPU: ``torch.native_dropout`` keeps a 1-byte mask (CUDA's fused kernel;
    CPU's ``F.dropout`` keeps an input-sized noise tensor instead)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.native_dropout(x, self.p, self.training)[0]


def cuda_dropout(model: Any) -> None:
    """Give every LoRA dropout of ``model`` CUDA's saved tensors (:class:`CudaDropout`)."""
    for module in model.modules():
        drops = getattr(module, "lora_dropout", None)
        if isinstance(drops, torch.nn.ModuleDict):
            for name, d in list(drops.items()):
                if isinstance(d, torch.nn.Dropout):
                    drops[name] = CudaDropout(d.p)


def quant_state_tensors(model: Any) -> list[torch.Tensor]:
    """The tensors of each bitsandbytes weight's quantization state (absmax, code, nested
    state): allocated with the weights, but neither parameters nor buffers."""
    found: list[torch.Tensor] = []

    def collect(state: Any) -> None:
        for value in vars(state).values():
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif hasattr(value, "absmax"):  # the nested state of double quantization
                collect(value)

    for p in model.parameters():
        state = getattr(p, "quant_state", None)
        if state is not None:
            collect(state)
    return found


def batch(m: dict[str, Any], t: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """gpu_measure.py's batch: padded rows (sample 0 ends in 8 pad positions) or packed rows."""
    b, s = t["micro_batch_size"], d["max_seq_length"]
    if d.get("pad_to_multiple_of"):
        k = d["pad_to_multiple_of"]
        s = (s + k - 1) // k * k
    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, m["vocab_size"], (b, s), generator=g)
    kwargs: dict[str, Any] = {"input_ids": ids}
    labels = ids.clone()
    if d.get("collator") == "packed":
        pos = torch.arange(s).remainder(max(1, s // 4)).unsqueeze(0).expand(b, s).contiguous()
        kwargs["position_ids"] = pos
    else:
        mask = torch.ones_like(ids)
        if b > 1:
            mask[0, -8:] = 0
            labels[0, -8:] = -100
        kwargs["attention_mask"] = mask
    kwargs["labels"] = labels
    return kwargs


def traced_step(
    spec: dict[str, Any],
    steps: int = 2,
    snapshot: bool = False,
    record: bool = False,
    cuda_dropout_masks: bool = False,
) -> StepResult:
    """Peak live bytes of gpu_measure.py's loop for a resolved run (``model``, ``trainer``,
    ``data`` dicts as in ``benchmarks/calibration/runs.json``), measured like the script: the
    peak is reset after the build, with the weights and the batch live.
    ``cuda_dropout_masks``: LoRA dropouts keep CUDA's 1-byte masks (:func:`cuda_dropout`)."""
    m, t, d = spec["model"], spec["trainer"], spec["data"]
    gm = gpu_measure()
    tracer = AllocTracer(snapshot)
    tracer.record = record
    if t.get("quantization", "none") == "none":
        # the build is traced too: what it frees stays in the CUDA allocator's cache, so in
        # the reserved figure gpu_measure.py's reset keeps (e.g. the lm_head weight that
        # nn.Linear makes before transformers ties it to the embedding, which
        # cfgcheck/memory/events.py _untied_head_at_build generates)
        with tracer:
            model = build(m, t, gm)
    else:  # bitsandbytes' CPU quantization is not traced: only what the build keeps is counted
        model = build(m, t, gm)
    if cuda_dropout_masks:
        cuda_dropout(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(t["optimizer"], params)
    kwargs = batch(m, t, d)
    accum = t["gradient_accumulation_steps"]
    autocast = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(t["precision"])
    tracer.track_all(
        [list(model.parameters()), list(model.buffers()), quant_state_tensors(model), kwargs]
    )
    tracer.reset_peak()
    baseline = tracer.current
    with tracer:
        for _ in range(steps):
            for _ in range(accum):
                with tracer.in_phase("forward"):
                    if autocast is not None:
                        with torch.autocast(device_type="cpu", dtype=autocast):
                            loss = model(**kwargs).loss
                    else:
                        loss = model(**kwargs).loss
                with tracer.in_phase("backward"):
                    (loss / accum).backward()
                    del loss
            with tracer.in_phase("optimizer step"):
                opt.step()
            with tracer.in_phase("zero_grad"):
                opt.zero_grad(set_to_none=True)
    return StepResult(
        peak=tracer.peak,
        at_peak=tracer.at_peak,
        baseline=baseline,
        params=sum(p.numel() for p in model.parameters()),
        trainable=sum(p.numel() for p in params),
        events=tracer.events,
        event_ops=tracer.event_ops,
    )


# the aten ops that run a cuBLAS matmul (aten/src/ATen/native/cuda/Blas.cpp)
BLAS_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot"})


def cuda_events(
    r: StepResult, workspace: int, lt_workspace: int = 1024 * 1024
) -> list[tuple[int, int]]:
    """The recorded step as the CUDA caching allocator sees it: the peaks reset after the build
    (``(0, allocsim.RESET)``, where gpu_measure.py resets them), and cuBLAS's workspace of
    ``workspace`` bytes (``cfgcheck.memory.events.blas_workspace``) taken once per thread right
    after the first matmul's output, never freed: the forward's on the Python thread, the
    backward's on autograd's device thread (``CublasHandlePool.cpp`` ``setWorkspaceForHandle``:
    one per handle and stream, a handle per thread). A linear with a bias (``addmm``) runs
    through cuBLASLt, whose own workspace of ``lt_workspace`` bytes is taken the same way
    (``getCUDABlasLtWorkspace``, 1 MiB by default). A CPU run has no such allocation."""
    n = sum(1 for op in r.event_ops if op.startswith("setup"))
    out: list[tuple[int, int]] = [*r.events[:n], (0, -2)]  # (0, allocsim.RESET)
    threads: set[str] = set()
    for (key, size), op in zip(r.events[n:], r.event_ops[n:], strict=True):
        out.append((key, size))
        phase, _, name = op.partition(":")
        thread = "backward" if phase == "backward" else "main"
        if name in BLAS_OPS and thread not in threads:
            threads.add(thread)
            out.append((-len(threads), workspace))
        if name == "addmm" and "lt-" + thread not in threads:
            threads.add("lt-" + thread)
            out.append((-len(threads), lt_workspace))
    return out


def traced(fn: Callable[[], Any], keep: Any = ()) -> Peak:
    """Peak live bytes while ``fn`` runs; ``keep`` (tensors) counts as live from the start."""
    tracer = AllocTracer()
    tracer.track_all(keep)
    tracer.reset_peak()
    with tracer:
        fn()
    return tracer.peak


# -- random runs over gpu_measure.py's space (no bitsandbytes: quantization and 8-bit optimizers
# have no CPU path) ----------------------------------------------------------------------------

FAMILIES = ("llama", "qwen2", "mistral", "gemma", "phi")
PRECISIONS = ("bf16-true", "32-true", "bf16-mixed", "16-mixed")
OPTIMIZERS = ("adamw", "sgd", "adafactor")
TARGETS = {
    "gated": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "phi": ["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"],
}


def random_run(seed: int, small: bool = False) -> dict[str, dict[str, Any]]:
    """A tiny run with the proportions that decide which moment peaks: a vocabulary 16 to 64
    times the hidden size, several layers, GQA, MLP 2.5-4x wide; settings drawn uniformly.
    ``small``: hidden size 64 (80 for Phi) and sequences up to 64, for the test suite."""
    import random

    r = random.Random(seed)
    fam = FAMILIES[seed % len(FAMILIES)]
    n_head = 4 if small else r.choice([4, 8])
    head = 16 if small else r.choice([16, 32])
    h = n_head * head
    groups = r.choice([g for g in (1, 2, n_head) if n_head % g == 0])
    model: dict[str, Any] = {
        "name": f"mistral-tiny-{seed}" if fam == "mistral" else f"{fam}-tiny-{seed}",
        "block_size": 512,
        "vocab_size": min(8192, h * r.choice([16, 32, 64])),
        "n_layer": r.choice([2, 3, 4]),
        "n_embd": h,
        "n_head": n_head,
        "n_query_groups": groups,
        "head_size": head,
        "intermediate_size": int(h * r.choice([2.5, 3, 4])) // 8 * 8,
    }
    if fam == "qwen2":
        model.update(attn_bias=True, tie_embeddings=r.random() < 0.5)
    elif fam == "gemma":
        model.update(mlp="geglu", tie_embeddings=True)
    elif fam == "phi":  # the rotary dimensions must be even
        head, frac = r.choice([(20, 0.4), (16, 0.5)])  # phi-2 80 x 0.4, phi-1.5 64 x 0.5
        h = n_head * head
        model.update(
            mlp="gelu",
            norm="layernorm",
            bias=True,
            lm_head_bias=True,
            parallel_residual=True,
            shared_attention_norm=True,
            rotary_fraction=frac,
            n_query_groups=n_head,
            head_size=head,
            n_embd=h,
            intermediate_size=4 * h,
            vocab_size=h * r.choice([16, 32]),
        )
    finetuning = r.choice(["full", "lora", "lora"])
    names = TARGETS["phi" if fam == "phi" else "gated"]
    trainer: dict[str, Any] = {
        "micro_batch_size": r.choice([1, 2, 4]),
        "gradient_accumulation_steps": r.choice([1, 1, 2]),
        "precision": r.choice(PRECISIONS),
        "optimizer": r.choice(OPTIMIZERS),
        "gradient_checkpointing": r.random() < 0.4,
        "finetuning": finetuning,
        "attention": r.choice(["sdpa", "sdpa", "eager"]),
        "lora": {
            "rank": r.choice([4, 8, 16]),
            "alpha": 16.0,
            "dropout": 0.0,  # CPU dropout keeps an input-sized noise tensor, CUDA a 1-byte mask
            "targets": r.sample(names, r.randint(1, len(names))),
        },
    }
    data: dict[str, Any] = {"max_seq_length": r.choice([32, 64] if small else [32, 64, 96])}
    if r.random() < 0.25:
        data["collator"] = "packed"
    elif r.random() < 0.25:
        data["pad_to_multiple_of"] = r.choice([16, 64])
    return {"model": model, "trainer": trainer, "data": data}


def describe(run: dict[str, dict[str, Any]]) -> str:
    m, t, d = run["model"], run["trainer"], run["data"]
    parts = [
        m["name"].split("-tiny")[0].replace("-", ""),
        t["finetuning"]
        + (
            f"(r{t['lora']['rank']}x{len(t['lora']['targets'])})"
            if t["finetuning"] == "lora"
            else ""
        ),
        t["precision"],
        t["optimizer"],
        t["attention"],
        f"b{t['micro_batch_size']}s{d['max_seq_length']}",
    ]
    if t["gradient_checkpointing"]:
        parts.append("ckpt")
    if t["gradient_accumulation_steps"] > 1:
        parts.append(f"acc{t['gradient_accumulation_steps']}")
    if d.get("collator") == "packed":
        parts.append("packed")
    if d.get("pad_to_multiple_of"):
        parts.append(f"pad{d['pad_to_multiple_of']}")
    return " ".join(parts)


@dataclass(frozen=True)
class Comparison:
    run: dict[str, dict[str, Any]]
    traced: StepResult
    estimated: int
    phase: str

    @property
    def error(self) -> float:
        return (self.estimated - self.traced.peak.bytes) / self.traced.peak.bytes


def compare(run: dict[str, dict[str, Any]], cuda_dropout_masks: bool = False) -> Comparison:
    """cfgcheck's allocated peak against the traced step of the same run."""
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

    m = ModelConfig(**run["model"])
    t = TrainerConfig(**run["trainer"])
    d = DataConfig(**run["data"])
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    est = estimate(m, d, t)
    traced = traced_step(spec, cuda_dropout_masks=cuda_dropout_masks)
    return Comparison(run, traced, est.allocated_bytes, est.phase)
