"""GPU names: the table covers the GPUs people rent today, unknown names get the known list and
a did-you-mean, ambiguous ones (A100: 40 or 80 GB) ask which, with a fix for each choice."""

from __future__ import annotations

import pytest

from cfgcheck import check
from cfgcheck.memory import devices
from cfgcheck.schema.gpu import GpuConfig
from tests.conftest import CONF, run_cfgcheck


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("RTX3090", "RTX3090"),
        ("NVIDIA GeForce RTX 3090", "RTX3090"),
        ("A6000", "A6000"),
        ("NVIDIA RTX A6000", "A6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX6000-Ada"),
        ("L40S", "L40S"),
        ("NVIDIA L40S", "L40S"),
        ("A10", "A10"),
        ("NVIDIA A10G", "A10G"),
        ("H100", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("H100 SXM5 80GB", "H100"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("AMD Instinct MI300X", "MI300X"),
        ("MI250X", "MI250X"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ],
)
def test_names_people_write_and_drivers_report(name: str, expected: str) -> None:
    spec = devices.lookup(name)
    assert spec is not None and spec.name == expected


@pytest.mark.parametrize(
    ("name", "choices"),
    [
        ("A100", ("A100-40GB", "A100-80GB")),
        ("a100", ("A100-40GB", "A100-80GB")),
        ("V100", ("V100-16GB", "V100-32GB")),
        ("RTX 6000", ("Quadro-RTX6000", "RTX6000-Ada")),
    ],
)
def test_ambiguous_names_ask_which(name: str, choices: tuple[str, ...]) -> None:
    assert devices.lookup(name) is None
    with pytest.raises(devices.AmbiguousGpuError) as e:
        devices.declared_device(GpuConfig(name=name))
    assert e.value.choices == choices


def test_a100_never_silently_means_the_80_gb_card() -> None:
    result = check(CONF, "config", ["trainer.gpu.name=A100"])
    [f] = result.by_rule("gpu-name")
    assert f.severity == "error" and not result.by_rule("gpu-memory")
    assert [fix.overrides for fix in f.fixes] == [
        ("trainer.gpu.name=A100-40GB",),
        ("trainer.gpu.name=A100-80GB",),
    ]
    # With the memory declared, the name's variants share a capability: accepted.
    ok = check(CONF, "config", ["trainer.gpu.name=A100", "trainer.gpu.memory_gib=40"])
    assert not ok.by_rule("gpu-name")


def test_unknown_name_lists_the_known_ones_and_suggests() -> None:
    result = check(CONF, "config", ["trainer.gpu.name=RTX9090"])
    [f] = result.by_rule("gpu-name")
    assert "did you mean RTX5090" in f.hint and "MI300X" in f.hint and "L40S" in f.hint
    assert ("trainer.gpu.name=RTX5090",) in [fix.overrides for fix in f.fixes]


def test_capabilities_and_rocm() -> None:
    mi300x, t4, l40s = (devices.lookup(n) for n in ("MI300X", "T4", "L40S"))
    assert mi300x is not None and mi300x.rocm and mi300x.bf16 and mi300x.capability is None
    assert t4 is not None and not t4.bf16 and not t4.flash_attention
    assert l40s is not None and l40s.capability == (8, 9) and l40s.memory_mib == 46068
    # bf16 on a T4 is refused, on an MI300X it is not.
    assert check(CONF, "config", ["trainer.gpu.name=T4"]).by_rule("gpu-capability")
    assert not check(CONF, "config", ["trainer.gpu.name=MI300X"]).by_rule("gpu-capability")


def test_memory_command_refuses_an_unknown_gpu() -> None:
    proc = run_cfgcheck("memory", "trainer.gpu.name=RTX9090")
    assert proc.returncode == 1
    assert "gpu-name" in proc.stdout + proc.stderr
