"""The builder of an allocation event sequence: ids for tensors made and freed in order
(:class:`Seq`), and the cuBLAS workspaces a CUDA step takes from the caching allocator. Shared
by every generator of a step's events (:mod:`cfgcheck.memory.events` for the dense step,
:mod:`cfgcheck.memory.events_kbit` for QLoRA, :mod:`cfgcheck.memory.events_liger` for Liger's
fused loss); it knows nothing of models, so they import it and not each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from cfgcheck.memory.allocsim import FREE, RESET, Event
from cfgcheck.memory.devices import lookup
from cfgcheck.schema.trainer import TrainerConfig

# cuBLAS's workspace, one per (handle, stream) and a handle per thread, taken from the caching
# allocator when a thread first runs a matmul and never given back (pytorch/pytorch
# aten/src/ATen/cuda/CublasHandlePool.cpp at 26a39059ec58: ``getCurrentCUDABlasHandle`` ->
# ``setWorkspaceForHandle`` -> ``getNewWorkspace``, ``CUDACachingAllocator::get()->allocate(
# getChosenWorkspaceSize())``; ``parseChosenWorkspaceSize``: "":4096:2:16:8 default, 32MiB for
# Hopper"", ``CUBLAS_WORKSPACE_CONFIG`` unset). The forward runs on the Python thread, the
# backward on autograd's device thread (``torch/csrc/autograd/engine.cpp``): two workspaces.
BLAS_WORKSPACE_SM90 = 4096 * 8 * 1024
BLAS_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
# a linear with a bias runs ``addmm`` through cuBLASLt (aten/src/ATen/native/cuda/Blas.cpp
# ``addmm_out_cuda_impl``, ``useLtInterface`` -> ``gemm_and_bias``), which takes its own
# workspace the same way (``getCUDABlasLtWorkspace``: ``parseCUDABlasLtWorkspaceSize``,
# "default size in KiB" 1024, at most the cuBLAS one); its backward runs plain matmuls
BLAS_LT_WORKSPACE = 1024 * 1024


def blas_workspace(t: TrainerConfig) -> int:
    """The cuBLAS workspace of the run's GPU: 32 MiB on sm90 (H100, H200), 8 MiB + 128 KiB on
    the others; a GPU not named (or not known) gets the larger one."""
    return _workspace_of(t.gpu.name if t.gpu is not None else None)


@lru_cache(maxsize=64)  # by the name alone; the table's look-up compares every alias
def _workspace_of(name: str | None) -> int:
    spec = lookup(name) if name else None
    if spec is not None and spec.capability is not None and spec.capability != (9, 0):
        return BLAS_WORKSPACE
    return BLAS_WORKSPACE_SM90


@dataclass(slots=True)
class Seq:
    events: list[Event] = field(default_factory=list)
    next_id: int = 1
    workspace: int = 0  # cuBLAS's workspace per thread (blas_workspace)
    lt_workspace: int = 0  # cuBLASLt's, taken by the forward's first biased linear
    threads: set[str] = field(default_factory=set)  # the threads that hold one

    def alloc(self, size: int) -> int:
        i = self.next_id
        self.next_id = i + 1
        if size > 0:
            self.events.append((i, size))
        return i

    def free(self, *ids: int) -> None:
        # a plain loop: cheaper than building a list (a comprehension is a call of its own
        # before Python 3.12) for the one to six ids of most calls
        events = self.events
        for i in ids:
            events.append((i, FREE))

    def reset(self) -> None:
        self.events.append((0, RESET))

    def mark(self, event: Event) -> None:
        self.events.append(event)

    def matmul(self, thread: str) -> None:
        """A matmul's output was just allocated on ``thread`` ("forward" or "backward"): its
        first one takes that thread's cuBLAS workspace (kept to the end). ``lt-backward``: a
        biased linear (``addmm``, cuBLASLt) on autograd's thread, a checkpoint's recomputation:
        its first takes that thread's cuBLASLt workspace."""
        if thread not in self.threads:
            self.threads.add(thread)
            if thread == "lt-backward":
                self.alloc(self.lt_workspace)
                return
            self.alloc(self.workspace)
            if thread == "forward":
                self.alloc(self.lt_workspace)


def one_plain_gpu(t: TrainerConfig) -> bool:
    """What every generated step assumes of the trainer: one GPU, one sequence per sample, no
    context parallelism, no activation or optimizer/parameter offload, no reference model
    (gpu_measure.py's loop; the generators add what they model beyond it)."""
    return (
        t.framework == "hf"
        and t.devices * t.num_nodes == 1
        and t.sequences_per_sample == 1
        and t.context_parallel == 1
        and not t.activation_offloading
        and not t.reference_model
        and t.offload.optimizer == "none"
        and t.offload.params == "none"
    )
