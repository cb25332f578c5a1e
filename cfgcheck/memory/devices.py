"""GPUs: a table of common ones, the live devices of this machine, and the one a run declares.

The live path never imports torch unless a GPU is plausibly there: no ``/dev/nvidia*`` and no
``/proc/driver/nvidia`` means no NVIDIA GPU, answered without any import. With a GPU, NVML
(``pynvml`` from nvidia-ml-py) is tried first, then ``torch.cuda``. ``CFGCHECK_NO_LIVE_GPU=1``
ignores live GPUs (reproducible CI and pre-commit runs use the declared ``trainer.gpu``).
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cfgcheck.schema.gpu import GpuConfig

NO_LIVE_ENV = "CFGCHECK_NO_LIVE_GPU"
MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model: memory as the driver reports it (nvidia-smi MiB), compute capability."""

    name: str
    memory_mib: int
    capability: tuple[int, int]
    aliases: tuple[str, ...] = ()

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def flash_attention(self) -> bool:
        """FlashAttention-2 (and PyTorch's flash SDPA kernel) need Ampere (sm80) or newer."""
        return self.capability >= (8, 0)


GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("T4", 15360, (7, 5), ("tesla-t4",)),
    GpuSpec("V100-16GB", 16384, (7, 0), ("v100",)),
    GpuSpec("V100-32GB", 32768, (7, 0)),
    GpuSpec("A10G", 23028, (8, 6)),
    GpuSpec("L4", 23034, (8, 9)),
    GpuSpec("RTX4090", 24564, (8, 9), ("rtx-4090", "geforce-rtx-4090", "4090")),
    GpuSpec("L40S", 46068, (8, 9)),
    GpuSpec("A100-40GB", 40960, (8, 0), ("a100-sxm4-40gb", "a100-pcie-40gb")),
    GpuSpec("A100-80GB", 81920, (8, 0), ("a100", "a100-sxm4-80gb", "a100-pcie-80gb")),
    GpuSpec("H100", 81559, (9, 0), ("h100-80gb", "h100-sxm", "h100-80gb-hbm3", "h100-pcie")),
    GpuSpec("H200", 143771, (9, 0), ("h200-141gb",)),
)


def _key(name: str) -> str:
    name = re.sub(r"^(nvidia|tesla)[\s_-]*", "", name.strip().lower())
    return re.sub(r"[\s_]+", "-", name)


def lookup(name: str) -> GpuSpec | None:
    """The table entry for a GPU name (``A100-80GB``, ``NVIDIA H100 80GB HBM3``, ``rtx4090``)."""
    key = _key(name)
    for spec in GPUS:
        if key in {_key(spec.name), *(_key(a) for a in spec.aliases)}:
            return spec
    compact = key.replace("-", "")
    for spec in GPUS:
        if compact == _key(spec.name).replace("-", ""):
            return spec
    return None


def known_names() -> list[str]:
    return [g.name for g in GPUS]


@dataclass(frozen=True)
class Device:
    """A GPU the run may use: total and free memory, capability when known."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    capability: tuple[int, int] | None
    source: str  # "live" or "declared"

    @property
    def bf16(self) -> bool | None:
        return None if self.capability is None else self.capability >= (8, 0)

    @property
    def flash_attention(self) -> bool | None:
        return None if self.capability is None else self.capability >= (8, 0)


DeviceProvider = Callable[[], list[Device]]


def nvidia_present() -> bool:
    """Cheap test, no import: an NVIDIA driver exposes device nodes or /proc/driver/nvidia."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.isdir("/proc/driver/nvidia/gpus")


def _nvml_devices() -> list[Device]:
    import pynvml  # type: ignore[import-not-found, unused-ignore]

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            cc = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append(Device(i, name, int(mem.total), int(mem.free), (cc[0], cc[1]), "live"))
        return out
    finally:
        pynvml.nvmlShutdown()


def _torch_devices() -> list[Device]:
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(i)
        props = torch.cuda.get_device_properties(i)
        out.append(Device(i, props.name, int(total), int(free), (props.major, props.minor), "live"))
    return out


def live_devices() -> list[Device]:
    """The visible NVIDIA GPUs, or ``[]`` (no GPU, ``CFGCHECK_NO_LIVE_GPU`` set, or no NVML and
    no torch). Never raises."""
    if os.environ.get(NO_LIVE_ENV, "") not in ("", "0") or not nvidia_present():
        return []
    for probe in (_nvml_devices, _torch_devices):
        try:
            return probe()
        except Exception:
            continue
    return []


_provider: DeviceProvider = live_devices


def current_devices() -> list[Device]:
    """Live devices from the active provider (tests inject one with :func:`use_provider`)."""
    return _provider()


@contextmanager
def use_provider(provider: DeviceProvider) -> Iterator[None]:
    """Replace the live-device provider for the duration of a ``with`` block."""
    global _provider
    saved, _provider = _provider, provider
    try:
        yield
    finally:
        _provider = saved


class UnknownGpuError(ValueError):
    """A declared GPU name that is not in the table and has no memory_gib."""


def declared_device(gpu: GpuConfig) -> Device | None:
    """The device a config declares, or None when it declares none. Raises
    :class:`UnknownGpuError` for an unknown name without ``memory_gib``."""
    spec = lookup(gpu.name) if gpu.name else None
    if gpu.name and spec is None and gpu.memory_gib is None:
        raise UnknownGpuError(gpu.name)
    if spec is None and gpu.memory_gib is None:
        return None
    gib = gpu.memory_gib or (spec.memory_gib if spec else 0)
    total = int(min(gib, 1e9) * GIB) if math.isfinite(gib) else int(1e9 * GIB)
    name = spec.name if spec else (gpu.name or f"{gpu.memory_gib:g} GiB GPU")
    return Device(0, name, total, total, spec.capability if spec else None, "declared")


@dataclass(frozen=True)
class Available:
    """The memory one GPU of the run can use, and where the figure came from."""

    device: Device
    bytes: int
    where: str


def available(gpu: GpuConfig | None, devices_per_node: int) -> Available | None:
    """Live GPUs first (the smallest free memory among the ``devices_per_node`` the run uses),
    else the declared ``trainer.gpu``, else None."""
    live = current_devices()
    if live:
        used = live[: max(1, devices_per_node)]
        dev = min(used, key=lambda d: d.free_bytes)
        return Available(dev, dev.free_bytes, f"free memory of live GPU {dev.index} ({dev.name})")
    if gpu is None:
        return None
    dev_d = declared_device(gpu)
    if dev_d is None:
        return None
    return Available(dev_d, dev_d.total_bytes, f"declared trainer.gpu ({dev_d.name})")
