"""``trainer.gpu``: the GPU a run is meant for, so memory can be checked without the device."""

from __future__ import annotations

from pydantic import Field

from cfgcheck.schema._base import Section


class GpuConfig(Section):
    name: str | None = Field(
        None,
        description="A known GPU (A10G, L4, L40S, RTX4090, A100-40GB, A100-80GB, H100, H200, "
        "T4, V100-16GB, V100-32GB); gives its memory and capabilities.",
    )
    memory_gib: float | None = Field(
        None, gt=0, description="Usable memory per GPU in GiB; overrides the named GPU's."
    )
