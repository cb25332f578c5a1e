"""Axolotl's expert-parallel sharding and mesh-size code, copied verbatim from
axolotl-ai-cloud/axolotl at 067b021c8b87a9e5e380b9173c704cf7340e30f5 (Axolotl does not install
here without changing pinned packages): ``src/axolotl/integrations/expert_parallel/shard.py``
lines 28-54 (``_replace_with_slice``) and 131-269 (``_detect_experts_modules``,
``shard_expert_weights``, ``_is_param_wrapper``), and ``src/axolotl/utils/distributed.py``
lines 320-382 (``_get_parallel_config_kwargs``). ``_scatter_expert_from_rank0`` (an NCCL scatter
on CUDA), ``get_world_size`` and ``dist`` are supplied by the test."""
# ruff: noqa
# fmt: off

import gc

import torch
import torch.distributed as dist


class _Log:
    def info(self, *a, **k): pass
    def debug(self, *a, **k): pass
    def warning(self, *a, **k): pass


LOG = _Log()


def get_world_size():  # replaced by the test
    raise NotImplementedError


def _scatter_expert_from_rank0(module, attr_name, e_local, dp_size):  # replaced by the test
    raise NotImplementedError


def _replace_with_slice(module, attr_name: str, start: int, end: int) -> None:
    """Replace `module.{attr_name}` with a fresh-allocation slice [start:end].

    `tensor[start:end]` on a contiguous storage returns a VIEW that shares the
    same underlying allocation. `.contiguous()` is a no-op on an already-
    contiguous view, so wrapping the view in a new Parameter does NOT release
    the original full-size storage — refcount on the storage stays >= 1 from
    the new view.

    `.clone()` forces a fresh allocation. After we drop the old Parameter,
    the original storage's refcount drops to zero and PyTorch's caching
    allocator reclaims the memory on the next `empty_cache()`.
    """
    old = getattr(module, attr_name)
    new_data = old.data[start:end].detach().clone().contiguous()
    requires_grad = old.requires_grad
    # Drop the old Parameter from the module's _parameters registry first so
    # nothing is holding a reference when we assign the new one.
    if attr_name in module._parameters:
        del module._parameters[attr_name]
    setattr(
        module,
        attr_name,
        torch.nn.Parameter(new_data, requires_grad=requires_grad),
    )
    # `old` goes out of scope on return.



def _detect_experts_modules(model):
    """Yield (name, module) pairs for every module that looks like an Experts class.

    Detection: 3D `gate_up_proj` and `down_proj` parameters with experts on dim 0.
    This is the canonical layout enforced by `@use_experts_implementation`.
    Mixtral's `ModuleList[MixtralBlockSparseTop2MLP]` does NOT match — out of scope
    for v1.
    """
    for name, module in model.named_modules():
        # A PEFT ParamWrapper delegates `gate_up_proj` to its `base_layer`, so it
        # would match too and double-count the experts (double grad-scale, redundant
        # fully_shard). Yield only the real experts module (the wrapped base_layer).
        if _is_param_wrapper(module):
            continue
        gp = getattr(module, "gate_up_proj", None)
        dp = getattr(module, "down_proj", None)
        if gp is None or dp is None:
            continue
        if not (
            isinstance(gp, torch.nn.Parameter) and isinstance(dp, torch.nn.Parameter)
        ):
            continue
        if gp.dim() != 3 or dp.dim() != 3:
            continue
        yield name, module


def shard_expert_weights(model, ep_group) -> int:
    """Slice expert weights along dim 0 per the EP rank.

    Args:
        model: A built (but not yet FSDP-wrapped) HuggingFace model.
        ep_group: `torch.distributed.ProcessGroup` for EP, or `None` for
            single-rank (no-op).

    Returns:
        Number of Experts modules sharded (0 if EP disabled or none found).

    Raises:
        ValueError: if any Experts module's `num_experts` is not divisible by
            the EP world size.

    DDP composition: the sharded params hold DIFFERENT content per rank, so we
    add their fully-qualified names to `model._ddp_params_and_buffers_to_ignore`
    to prevent the startup broadcast from copying rank 0's slice everywhere.
    FSDP composition is handled in `ExpertParallelPlugin.fully_shard_experts`.
    """
    if ep_group is None:
        return 0

    ep_size = dist.get_world_size(ep_group)
    if ep_size <= 1:
        return 0

    ep_rank = dist.get_rank(ep_group)
    sharded = 0
    ignore_names: list[str] = []

    for name, module in _detect_experts_modules(model):
        gp = module.gate_up_proj
        E = gp.shape[0]
        if E % ep_size != 0:
            raise ValueError(
                f"Expert module {name!r}: num_experts={E} not divisible by "
                f"ep_size={ep_size}. Adjust the model config or ep_size."
            )
        E_local = E // ep_size
        start = ep_rank * E_local

        # Scatter global rank-0's REAL experts to every rank's ep-group slice. Under
        # cpu_ram_efficient_loading only global rank 0 has data; plain-slicing (the old path) kept
        # only rank 0's own ep-group's slice and zeroed the rest, so ep-groups 1..N had dead experts.
        # dp_size>1 (EP×dp_shard / EP×cp) gives the dp ranks within an ep-group the same ep slice; the
        # FSDP dp-axis shards it across them afterwards. See _scatter_expert_from_rank0.
        dp_size = dist.get_world_size() // ep_size
        with torch.no_grad():
            _scatter_expert_from_rank0(module, "gate_up_proj", E_local, dp_size)
            _scatter_expert_from_rank0(module, "down_proj", E_local, dp_size)
            for bias_name in ("gate_up_proj_bias", "down_proj_bias"):
                bias = getattr(module, bias_name, None)
                if (
                    isinstance(bias, torch.nn.Parameter)
                    and bias.dim() >= 1
                    and bias.shape[0] == E
                ):
                    _scatter_expert_from_rank0(module, bias_name, E_local, dp_size)

        # Stash metadata the registered fn needs.
        module.local_expert_offset = start
        module.num_local_experts = E_local
        module.num_experts_global = E
        # Single global expert count for the cpu_ram_efficient load path (all routed-expert modules
        # share it); used to reshape the global expert-LoRA adapter when slicing per-rank shards.
        model._ep_num_experts_global = E
        # Override the kernel's view of num_experts for grouped_mm/scattermoe bucketing.
        module.num_experts = E_local

        # Mark sharded params as DDP-ignored — they hold rank-specific content
        # and must NOT be broadcast from rank 0 at DDP construction.
        ignore_names.append(f"{name}.gate_up_proj")
        ignore_names.append(f"{name}.down_proj")
        for bias_name in ("gate_up_proj_bias", "down_proj_bias"):
            if isinstance(getattr(module, bias_name, None), torch.nn.Parameter):
                ignore_names.append(f"{name}.{bias_name}")

        sharded += 1

    if sharded:
        # Drop refs to any leftover full-size storage and return cached memory
        # to the allocator. Without this, the original `from_pretrained`
        # allocations stay reserved and `memory_allocated()` doesn't drop.
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

        # Append (don't overwrite) — other systems may have set this too.
        existing = list(getattr(model, "_ddp_params_and_buffers_to_ignore", []))
        model._ddp_params_and_buffers_to_ignore = existing + ignore_names
        LOG.info(
            f"Sharded {sharded} Experts module(s) along the experts dim "
            f"(ep_rank={ep_rank}, ep_size={ep_size}). "
            f"Marked {len(ignore_names)} param(s) as DDP-ignored."
        )
    return sharded


def _is_param_wrapper(module) -> bool:
    """True for a PEFT ParamWrapper, including after ``fully_shard`` renames its class
    (e.g. ``FSDPParamWrapper``) — FSDP2 sets ``__class__`` to a subclass, so ``isinstance``
    still holds while a ``type(...).__name__ == 'ParamWrapper'`` check would miss it."""
    try:
        from peft.tuners.lora.layer import ParamWrapper

        if isinstance(module, ParamWrapper):
            return True
    except (ImportError, AttributeError):
        pass
    return "ParamWrapper" in type(module).__name__



def _get_parallel_config_kwargs(
    world_size: int,
    tensor_parallel_size: int = 1,
    context_parallel_size: int = 1,
    dp_shard_size: int | None = None,
    dp_replicate_size: int | None = None,
    is_fsdp: bool = False,
    expert_parallel_size: int | None = None,
):
    pc_kwargs = {}
    remaining_world_size = world_size

    # EP consumes part of world_size; subtract it up front so the auto-fill
    # below doesn't put EP ranks into `dp_replicate_size`.
    if expert_parallel_size and expert_parallel_size > 1:
        if remaining_world_size % expert_parallel_size != 0:
            raise ValueError(
                f"expert_parallel_size ({expert_parallel_size}) must divide "
                f"world_size ({world_size})."
            )
        remaining_world_size = remaining_world_size // expert_parallel_size

    if tensor_parallel_size and tensor_parallel_size > 1:
        pc_kwargs["tp_size"] = tensor_parallel_size
        remaining_world_size = remaining_world_size // tensor_parallel_size

    if context_parallel_size and context_parallel_size > 1:
        pc_kwargs["cp_size"] = context_parallel_size
        remaining_world_size = remaining_world_size // context_parallel_size

    if dp_shard_size is None and dp_replicate_size in (None, 1):
        if remaining_world_size > 1:
            pc_kwargs["dp_shard_size"] = remaining_world_size
            remaining_world_size = 1

    if dp_replicate_size and dp_replicate_size > 1:
        pc_kwargs["dp_replicate_size"] = dp_replicate_size
        remaining_world_size = remaining_world_size // dp_replicate_size

    if remaining_world_size > 1 and dp_shard_size and dp_shard_size > 1:
        if not is_fsdp:
            raise ValueError(
                "dp_shard_size was configured without a corresponding fsdp_config! "
                "Please ensure you have configured FSDP using fsdp_config."
            )
        pc_kwargs["dp_shard_size"] = dp_shard_size
        remaining_world_size = remaining_world_size // dp_shard_size
        if remaining_world_size > 1 and "dp_replicate_size" not in pc_kwargs:
            pc_kwargs["dp_replicate_size"] = remaining_world_size
            remaining_world_size = 1

    if remaining_world_size > 1:
        if "dp_shard_size" not in pc_kwargs and is_fsdp:
            pc_kwargs["dp_shard_size"] = remaining_world_size
            remaining_world_size = 1

    if remaining_world_size > 1:
        raise ValueError(
            f"The configured parallelisms are incompatible with the current world size ({get_world_size()})!\n"
            f"{pc_kwargs}"
        )

    return pc_kwargs
