"""``PYTORCH_CUDA_ALLOC_CONF`` as PyTorch reads it (pytorch/pytorch c10/core/AllocatorConfig.cpp,
commit 065861fba759, ``AllocatorConfig::parseArgs``): the settings the allocator simulation
(:mod:`cfgcheck.memory.allocsim`) honours. Plain Python: the trainer schema validates
``trainer.cuda_alloc_conf`` with it."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
K_LARGE_BUFFER = 20 * MIB  # kLargeBuffer (CUDACachingAllocator.cpp): the floor of the *_mb options
NO_LIMIT = 2**64 - 1  # std::numeric_limits<size_t>::max(), max_split_size's default


@dataclass(frozen=True)
class AllocConf:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` options the simulation honours (AllocatorConfig.cpp
    ``parseArgs``); ``memory_fraction`` is ``torch.cuda.set_per_process_memory_fraction``,
    without which ``garbage_collection_threshold`` does nothing (``malloc`` and
    ``get_free_block`` test ``set_fraction && garbage_collection_threshold() > 0.0``)."""

    expandable_segments: bool = False
    max_split_size: int = NO_LIMIT  # bytes
    max_non_split_rounding: int = K_LARGE_BUFFER  # bytes (max_non_split_rounding_mb)
    garbage_collection_threshold: float = 0.0
    memory_fraction: float | None = None


class AllocConfError(ValueError):
    pass


def parse_alloc_conf(text: str) -> AllocConf:
    """``PYTORCH_CUDA_ALLOC_CONF`` as AllocatorConfig.cpp ``parseArgs`` reads it: ``key:value``
    pairs separated by commas, spaces ignored (``lexArgs``); unknown keys are an error there too.
    Options that do not change the reserved figure are accepted and ignored."""
    conf: dict[str, object] = {}
    for item in text.replace(" ", "").split(","):
        if not item:
            continue
        key, sep, value = item.partition(":")
        if not sep or not value:
            raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: {item!r} is not key:value")
        try:
            if key == "expandable_segments":
                if value not in ("True", "False"):  # parseArgs: exactly True / False
                    raise AllocConfError("expandable_segments takes True or False")
                conf["expandable_segments"] = value == "True"
            elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
                mb = int(value)
                # parseMaxSplitSize / parseMaxNonSplitRoundingSize: ">= kLargeBuffer / kMB"
                if mb < K_LARGE_BUFFER // MIB:
                    raise AllocConfError(f"{key} must be >= {K_LARGE_BUFFER // MIB}")
                name = "max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding"
                conf[name] = mb * MIB
            elif key == "garbage_collection_threshold":
                v = float(value)
                if not 0.0 < v < 1.0:  # parseGarbageCollectionThreshold
                    raise AllocConfError("garbage_collection_threshold must be in (0.0, 1.0)")
                conf["garbage_collection_threshold"] = v
            elif key in (
                "backend",
                "roundup_power2_divisions",
                "release_lock_on_cudamalloc",
                "pinned_use_cuda_host_register",
                "pinned_num_register_threads",
                "pinned_use_background_threads",
            ):
                pass
            else:
                raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: unknown option {key!r}")
        except ValueError as e:
            if isinstance(e, AllocConfError):
                raise
            raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: {item!r}: {e}") from e
    return AllocConf(**conf)  # type: ignore[arg-type]
