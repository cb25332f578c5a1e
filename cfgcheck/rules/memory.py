"""GPU memory: the estimated per-GPU peak against the live or declared GPU, and GPU
capabilities (bf16, FlashAttention) against the config."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.fixcheck import expressible_filter
from cfgcheck.memory import devices, rl
from cfgcheck.memory.estimate import GIB, MemoryEstimate, estimate
from cfgcheck.memory.fixes import fixes
from cfgcheck.memory.verdict import decide
from cfgcheck.reuse import Scope, current_scope, derived
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.schema.trainer import TrainerConfig

PATHS = ("trainer.micro_batch_size", "data.max_seq_length", "model.name", "trainer.gpu")


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _saved(peak: int, after: int) -> str:
    """``peak - after`` as the difference of the two rounded figures shown, so they add up."""
    return f"{round(peak / GIB, 1) - round(after / GIB, 1):.1f} GiB"


def _breakdown(e: MemoryEstimate) -> str:
    top = sorted(e.components, key=lambda c: -c.bytes)[:4]
    return ", ".join(f"{c.label} {_gib(c.bytes)}" for c in top)


def _fixes(cfg: RunConfig, budget: int) -> tuple[str, tuple[Fix, ...]]:
    # candidates by the estimate's verdict (no replay each): every fix offered is then checked
    # with this rule, the simulation's verdict included (cfgcheck/fixcheck.py drops it if the
    # fixed run still does not fit)
    found = fixes(
        cfg.model, cfg.data, cfg.trainer, budget, allowed=expressible_filter(), exact=False
    )
    if not found:
        return (
            "no single change or pair of changes fits: use a GPU with more memory "
            "(H100 80 GB, H200 141 GB) or a smaller model",
            (),
        )
    hint = (
        "each fix below is re-estimated on this GPU: what it saves of the peak above, and "
        "the new per-GPU peak"
    )
    objs = tuple(
        Fix(
            overrides=f.overrides,
            summary=f"{f.summary}: saves {_saved(f.total_bytes + f.saved_bytes, f.total_bytes)} "
            f"(-> {_gib(f.total_bytes)} per GPU, fits)",
        )
        for f in found
    )
    return hint, objs


def _live(scope: Scope) -> bool:
    """Whether live GPUs are visible, probed once per shared scope (a sweep): every point is
    checked against the machine as the sweep found it, as the rule findings it shares
    between points already are (a probe lists /dev: ~0.2 ms)."""
    if "live gpus" not in scope.facts:
        scope.facts["live gpus"] = bool(devices.current_devices())
    return bool(scope.facts["live gpus"])


def _available(cfg: RunConfig) -> tuple[devices.Available | None, Problem | None]:
    gpu, per_node = cfg.trainer.gpu, cfg.trainer.devices
    try:
        scope = current_scope()
        if scope is None or _live(scope):  # live GPUs' free memory: asked every time
            return devices.available(gpu, per_node), None
        if gpu is None:  # no live GPU and none declared
            return None, None
        # the declared GPU: a function of trainer.gpu's contents (a table lookup by name)
        found = derived("available", gpu, per_node, lambda: devices.available(gpu, per_node))
        return found, None
    except devices.GpuNameError:
        # An unknown or ambiguous trainer.gpu.name: the gpu-name rule reports it (with the
        # known names and a did-you-mean); there is nothing to check memory against.
        return None, _NAME_REPORTED


_NAME_REPORTED = Problem("info", (), "", "")


@rule("gpu-memory", requires=("model", "data", "trainer"))
def gpu_memory(cfg: RunConfig) -> Iterator[Problem]:
    """The estimated peak memory per GPU must fit the GPU: error when the estimate exceeds it,
    warning when the estimate plus its stated margin does ("may not fit")."""
    avail, problem = _available(cfg)
    if problem is not None:
        return
    est = estimate(cfg.model, cfg.data, cfg.trainer)
    t = cfg.trainer
    what = (
        f"{cfg.model.name}, {t.finetuning}, micro_batch_size={t.micro_batch_size}, "
        f"seq {est.seq_len}, {t.precision}"
    )
    if avail is None:
        yield Problem(
            "info",
            ("trainer.gpu",),
            f"could not check GPU memory: no GPU is visible and trainer.gpu is not set; the "
            f"estimated peak is {_gib(est.total_bytes)} per GPU ({what})",
            "set trainer.gpu.name (e.g. trainer.gpu.name=A100-80GB) or trainer.gpu.memory_gib, "
            "or run on the training machine; `cfgcheck memory` shows the breakdown",
        )
        return
    dec = decide(cfg.model, cfg.data, cfg.trainer, avail.bytes, est)
    v = dec.verdict
    if v == "fits":
        return
    cache = est.get("fragmentation")
    est = est.on_gpu(avail.bytes)  # the figures on this GPU, as `cfgcheck memory` shows them
    simulated = dec.basis == "simulation"
    peak = dec.peak if simulated else est.total_bytes
    share = peak / avail.bytes if avail.bytes > 0 else float("inf")
    margin = f"+/-{est.margin:.0%}" + (
        ""
        if not est.uncalibrated
        else ", not calibrated on measured runs: " + ", ".join(est.uncalibrated)
    )
    hint, fix_objs = _fixes(cfg, avail.bytes)
    # an online trainer whose prompts nothing bounds: the estimate is the worst case (rl.py)
    worst = v == "does not fit" and bool(rl.prompt_is_worst_case(t))
    if worst:
        tail = (
            f": the run fails with CUDA out of memory if a batch's prompts come near that "
            f"length ({rl.prompt_is_worst_case(t)}); shorter prompts may fit"
        )
    elif v == "does not fit" and simulated:
        tail = (
            ": replayed through PyTorch's caching allocator, the step runs out of memory even "
            "after freeing its cache: the run will fail with CUDA out of memory"
        )
    elif v == "does not fit":
        tail = ": the run will fail with CUDA out of memory"
    elif simulated and dec.retry:
        tail = (
            ": replayed through PyTorch's caching allocator, the step completes only by "
            "freeing its cache and retrying cudaMalloc, so it may not fit"
        )
    elif not simulated and est.get("fragmentation") < cache:
        tail = (
            f": only the allocator cache ({_gib(cache)} on a roomier GPU) is over, which torch "
            "frees and retries before it fails, so it may not fit"
        )
    else:
        tail = (
            f": with the estimate's stated margin ({margin}) it may need up to "
            f"{_gib(dec.upper if simulated else est.upper_bytes)}, so it may not fit"
        )
    what_peak = "simulated peak" if simulated else "estimated peak"
    yield Problem(
        "error" if v == "does not fit" and not worst else "warning",
        PATHS,
        f"{what_peak} {_gib(peak)} per GPU ({what}: {_breakdown(est)}) is "
        f"{share:.0%} of {_gib(avail.bytes)}, the {avail.where}{tail}",
        hint,
        fixes=fix_objs,
    )


def _fp16_fixes(t: TrainerConfig) -> tuple[Fix, ...]:
    """fp16 instead of bf16; fp16 mixed precision keeps fp32 master weights, so the same run
    may need less activation memory to fit (candidates: each is checked before it is shown)."""
    from cfgcheck.rules.batching import with_micro_batch

    fp16 = "trainer.precision=16-mixed"
    ckpt = "trainer.gradient_checkpointing=true"
    return (
        Fix((fp16,), "fp16 mixed precision with loss scaling"),
        Fix((fp16, ckpt), "fp16 mixed precision, with activation checkpointing to fit"),
        Fix(
            (fp16, ckpt, *with_micro_batch(t, 1)),
            "fp16 mixed precision, activation checkpointing and one sample per micro batch",
        ),
        Fix(("trainer.precision=32-true",), "fp32 (twice the activation memory)"),
    )


@rule("gpu-capability", requires=("trainer",))
def gpu_capability(cfg: RunConfig) -> Iterator[Problem]:
    """bf16 needs compute capability 8.0+; so does FlashAttention."""
    avail, problem = _available(cfg)
    if avail is None or problem is not None or avail.device.capability is None:
        return
    dev = avail.device
    t = cfg.trainer
    cc = ".".join(map(str, dev.capability or ()))
    if t.precision.startswith("bf16") and dev.bf16 is False:
        yield Problem(
            "error",
            ("trainer.precision", "trainer.gpu"),
            f"trainer.precision={t.precision} on {dev.name} (compute capability {cc}): bf16 "
            f"needs compute capability 8.0 (Ampere) or newer",
            "set trainer.precision=16-mixed (fp16 with loss scaling) or 32-true, or use an "
            "Ampere+ GPU (A10G, L4, A100, H100)",
            fixes=_fp16_fixes(t),
        )
    if t.attention == "flash" and dev.flash_attention is False:
        yield Problem(
            "error",
            ("trainer.attention", "trainer.gpu"),
            f"trainer.attention=flash on {dev.name} (compute capability {cc}): FlashAttention-2 "
            f'needs compute capability 8.0+ ("FlashAttention only supports Ampere GPUs or newer")',
            "set trainer.attention=sdpa (PyTorch picks the memory-efficient kernel), or use an "
            "Ampere+ GPU",
            fixes=(Fix(("trainer.attention=sdpa",), "PyTorch SDPA (memory-efficient kernel)"),),
        )
