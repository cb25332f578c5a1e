"""GPU table, declared devices, the live path with an injected provider, no-GPU fast path."""

from __future__ import annotations

import pytest

from cfgcheck.memory import devices
from cfgcheck.schema.gpu import GpuConfig

GIB = 1024**3


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("A10G", "A10G"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("a100-40gb", "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("rtx4090", "RTX4090"),
        ("L40S", "L40S"),
        ("L4", "L4"),
        ("H200", "H200"),
        ("Tesla T4", "T4"),
    ],
)
def test_lookup_known_gpus(name: str, expected: str) -> None:
    spec = devices.lookup(name)
    assert spec is not None and spec.name == expected


def test_unknown_name_and_capabilities() -> None:
    assert devices.lookup("GTX 480") is None
    t4, a10g = devices.lookup("T4"), devices.lookup("A10G")
    assert t4 is not None and not t4.bf16 and not t4.flash_attention
    assert a10g is not None and a10g.bf16 and a10g.memory_gib == pytest.approx(22.49, abs=0.01)


def test_declared_device() -> None:
    dev = devices.declared_device(GpuConfig(name="A100-80GB"))
    assert dev is not None and dev.total_bytes == 80 * GIB and dev.source == "declared"
    own = devices.declared_device(GpuConfig(name="A10G", memory_gib=20))
    assert own is not None and own.total_bytes == 20 * GIB
    assert devices.declared_device(GpuConfig()) is None
    with pytest.raises(devices.UnknownGpuError):
        devices.declared_device(GpuConfig(name="GTX 480"))


def fake(*free_gib: float) -> devices.DeviceProvider:
    return lambda: [
        devices.Device(i, "NVIDIA A100-SXM4-80GB", 80 * GIB, int(f * GIB), (8, 0), "live")
        for i, f in enumerate(free_gib)
    ]


def test_live_devices_take_precedence_and_the_smallest_free_counts() -> None:
    with devices.use_provider(fake(70, 30, 75)):
        avail = devices.available(GpuConfig(name="H200"), devices_per_node=2)
    assert avail is not None and avail.bytes == 30 * GIB and avail.device.source == "live"
    with devices.use_provider(fake()):
        declared = devices.available(GpuConfig(name="H200"), devices_per_node=1)
        assert declared is not None and declared.device.name == "H200"
        assert devices.available(None, 1) is None


def test_no_live_gpu_env_and_no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(devices.NO_LIVE_ENV, "1")
    assert devices.live_devices() == []
    monkeypatch.delenv(devices.NO_LIVE_ENV)
    monkeypatch.setattr(devices, "nvidia_present", lambda: False)
    assert devices.live_devices() == []


class FakeNvml:
    """Stands in for the pynvml module: one 80 GiB A100 with 60 GiB free."""

    class Mem:
        total, free = 80 * GIB, 60 * GIB

    def __init__(self) -> None:
        self.shutdown = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> FakeNvml.Mem:
        return self.Mem()

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (8, 0)


def test_nvml_probe_reads_free_total_and_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml = FakeNvml()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake_nvml)
    monkeypatch.delenv(devices.NO_LIVE_ENV, raising=False)
    monkeypatch.setattr(devices, "nvidia_present", lambda: True)
    (dev,) = devices.live_devices()
    assert (dev.name, dev.free_bytes, dev.total_bytes, dev.capability) == (
        "NVIDIA A100-SXM4-80GB",
        60 * GIB,
        80 * GIB,
        (8, 0),
    )
    assert fake_nvml.shutdown and devices.lookup(dev.name) is not None


def test_without_nvml_torch_cuda_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import fails
    monkeypatch.delenv(devices.NO_LIVE_ENV, raising=False)
    monkeypatch.setattr(devices, "nvidia_present", lambda: True)
    assert devices.live_devices() == []  # the CPU build of torch sees no CUDA device
