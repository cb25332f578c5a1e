"""GPUs: a table of common ones, the live devices of this machine, and the one a run declares.

The live path never imports torch unless a GPU is plausibly there: no ``/dev/nvidia*`` and no
``/proc/driver/nvidia`` means no NVIDIA GPU, answered without any import. With a GPU, NVML
(``pynvml`` from nvidia-ml-py) is tried first, then ``torch.cuda``. ``CFGCHECK_NO_LIVE_GPU=1``
ignores live GPUs (reproducible CI and pre-commit runs use the declared ``trainer.gpu``).
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from cfgcheck.schema.gpu import GpuConfig

NO_LIVE_ENV = "CFGCHECK_NO_LIVE_GPU"
MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model: memory per device as the driver reports it (``nvidia-smi``'s
    ``memory.total`` in MiB; ``rocm-smi``'s VRAM total for AMD), and what it can run."""

    name: str
    memory_mib: int
    # CUDA compute capability; None for AMD GPUs (ROCm), whose bf16/flash support is listed.
    capability: tuple[int, int] | None
    aliases: tuple[str, ...] = ()
    rocm: bool = False
    note: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def bf16(self) -> bool:
        """bf16 tensor cores: NVIDIA Ampere (sm80) or newer; AMD CDNA2 (MI200) and CDNA3."""
        return self.rocm or (self.capability is not None and self.capability >= (8, 0))

    @property
    def flash_attention(self) -> bool:
        """FlashAttention-2 (and PyTorch's flash SDPA kernel) need Ampere (sm80) or newer on
        NVIDIA (Dao-AILab/flash-attention README); its ROCm build supports MI200 and MI300."""
        return self.rocm or (self.capability is not None and self.capability >= (8, 0))


# The GPUs people rent or own for fine-tuning today. Memory: the total the driver reports per
# device (what torch and the estimate can use is a little less); MI250/MI250X show up as two
# devices of 64 GiB each (one per GCD).
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("P100", 16280, (6, 0), ("tesla-p100", "p100-16gb")),
    GpuSpec("T4", 15360, (7, 5), ("tesla-t4",)),
    GpuSpec("V100-16GB", 16160, (7, 0), ("v100-sxm2-16gb", "v100-pcie-16gb")),
    GpuSpec("V100-32GB", 32510, (7, 0), ("v100-sxm2-32gb", "v100-pcie-32gb", "v100s")),
    GpuSpec("Quadro-RTX6000", 24576, (7, 5), ("quadro-rtx-6000",), note="Turing, 24 GB"),
    GpuSpec("A10", 23028, (8, 6), ("a10-24gb",)),
    GpuSpec("A10G", 23028, (8, 6), ("a10g-24gb",), note="AWS g5"),
    GpuSpec("L4", 23034, (8, 9)),
    GpuSpec("RTX3080", 10240, (8, 6), ("geforce-rtx-3080",)),
    GpuSpec("RTX3090", 24576, (8, 6), ("rtx-3090", "geforce-rtx-3090", "3090")),
    GpuSpec("RTX3090Ti", 24564, (8, 6), ("rtx-3090-ti", "geforce-rtx-3090-ti")),
    GpuSpec("RTX4080", 16376, (8, 9), ("geforce-rtx-4080",)),
    GpuSpec("RTX4090", 24564, (8, 9), ("rtx-4090", "geforce-rtx-4090", "4090")),
    GpuSpec("RTX5090", 32607, (12, 0), ("geforce-rtx-5090", "5090")),
    GpuSpec("A4000", 16376, (8, 6), ("rtx-a4000",)),
    GpuSpec("A5000", 24564, (8, 6), ("rtx-a5000",)),
    GpuSpec("A6000", 49140, (8, 6), ("rtx-a6000",), note="RTX A6000 (Ampere)"),
    GpuSpec("RTX6000-Ada", 49140, (8, 9), ("rtx-6000-ada", "rtx-6000-ada-generation")),
    GpuSpec("A40", 46068, (8, 6)),
    GpuSpec("L40", 46068, (8, 9)),
    GpuSpec("L40S", 46068, (8, 9), ("l40s-48gb",)),
    GpuSpec("A100-40GB", 40960, (8, 0), ("a100-sxm4-40gb", "a100-pcie-40gb")),
    GpuSpec("A100-80GB", 81920, (8, 0), ("a100-sxm4-80gb", "a100-pcie-80gb", "a100-80gb-pcie")),
    GpuSpec(
        "H100",
        81559,
        (9, 0),
        ("h100-80gb", "h100-sxm", "h100-sxm5", "h100-80gb-hbm3", "h100-pcie", "h100-sxm5-80gb"),
        note="80 GB, SXM or PCIe (same memory and capability)",
    ),
    GpuSpec("H100-NVL", 95830, (9, 0), ("h100-nvl-94gb",), note="94 GB"),
    GpuSpec("GH200", 97871, (9, 0), ("gh200-480gb",), note="96 GB HBM3 on the Grace Hopper"),
    GpuSpec("H200", 143771, (9, 0), ("h200-141gb", "h200-sxm", "h200-nvl")),
    GpuSpec("B200", 183359, (10, 0), ("b200-180gb",)),
    GpuSpec("MI250", 65536, None, ("instinct-mi250",), rocm=True, note="per GCD (2 per card)"),
    GpuSpec("MI250X", 65536, None, ("instinct-mi250x",), rocm=True, note="per GCD (2 per card)"),
    GpuSpec("MI300X", 196288, None, ("instinct-mi300x", "amd-instinct-mi300x"), rocm=True),
)

# Names that stand for GPUs with different memory or capabilities: cfgcheck asks which.
AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "a100": ("A100-40GB", "A100-80GB"),
    "v100": ("V100-16GB", "V100-32GB"),
    "rtx-6000": ("Quadro-RTX6000", "RTX6000-Ada"),
}


def _key(name: str) -> str:
    name = re.sub(r"^(nvidia|tesla|amd)[\s_-]*", "", name.strip().lower())
    return re.sub(r"[\s_]+", "-", name)


def _compact(name: str) -> str:
    return _key(name).replace("-", "")


def lookup(name: str) -> GpuSpec | None:
    """The table entry for a GPU name (``A100-80GB``, ``NVIDIA H100 80GB HBM3``, ``rtx4090``),
    or None for an unknown or an ambiguous one (see :func:`ambiguous`)."""
    if ambiguous(name):
        return None
    key = _key(name)
    for spec in GPUS:
        if key in {_key(spec.name), *(_key(a) for a in spec.aliases)}:
            return spec
    compact = _compact(name)
    for spec in GPUS:
        if compact in {_compact(spec.name), *(_compact(a) for a in spec.aliases)}:
            return spec
    return None


def ambiguous(name: str) -> tuple[str, ...]:
    """The table names an ambiguous ``name`` may mean (``A100`` -> 40 or 80 GB), else ()."""
    compact = _compact(name)
    for key, choices in AMBIGUOUS.items():
        if compact == key.replace("-", ""):
            return choices
    return ()


def suggestions(name: str, n: int = 3) -> list[str]:
    """Known names close to an unknown ``name``, best first."""
    names = {_compact(g.name): g.name for g in GPUS}
    for g in GPUS:
        names.update({_compact(a): g.name for a in g.aliases})
    close = difflib.get_close_matches(_compact(name), list(names), n=n * 2, cutoff=0.6)
    return list(dict.fromkeys(names[c] for c in close))[:n]


def ambiguous_names() -> list[str]:
    """Names that stand for several table entries (``A100``)."""
    return [key.upper() for key in AMBIGUOUS]


def known_names() -> list[str]:
    return [g.name for g in GPUS]


def describe_table() -> str:
    """One line per known GPU (for ``--help`` and the docs)."""
    lines = []
    for g in GPUS:
        what = "ROCm" if g.rocm else f"sm{g.capability[0]}{g.capability[1]}" if g.capability else ""
        caps = ", ".join(c for c, ok in (("bf16", g.bf16), ("flash", g.flash_attention)) if ok)
        note = f"; {g.note}" if g.note else ""
        lines.append(f"{g.name} {g.memory_gib:.1f} GiB, {what}{', ' + caps if caps else ''}{note}")
    return "\n".join(lines)


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


class GpuNameError(ValueError):
    """A declared GPU name cfgcheck cannot use: unknown, or ambiguous."""

    def __init__(self, name: str, choices: Sequence[str]) -> None:
        super().__init__(name)
        self.name = name
        self.choices = tuple(choices)  # the did-you-mean names, or the ambiguous name's choices


class UnknownGpuError(GpuNameError):
    """A declared GPU name that is not in the table and has no memory_gib."""


class AmbiguousGpuError(GpuNameError):
    """A name that stands for GPUs with different memory or capabilities (``A100``)."""


def declared_device(gpu: GpuConfig) -> Device | None:
    """The device a config declares, or None when it declares none. Raises
    :class:`AmbiguousGpuError` for a name such as ``A100`` (40 or 80 GB) and
    :class:`UnknownGpuError` for an unknown name without ``memory_gib``."""
    spec = lookup(gpu.name) if gpu.name else None
    if gpu.name and spec is None:
        choices = ambiguous(gpu.name)
        caps = {spec.capability for c in choices if (spec := lookup(c)) is not None}
        if choices and (gpu.memory_gib is None or len(caps) > 1):
            raise AmbiguousGpuError(gpu.name, choices)
        if choices:  # the memory is declared and every variant has the same capability
            spec = dataclasses.replace(lookup(choices[0]) or GPUS[0], name=gpu.name, aliases=())
        if gpu.memory_gib is None:
            raise UnknownGpuError(gpu.name, suggestions(gpu.name))
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
