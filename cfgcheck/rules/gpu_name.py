"""``trainer.gpu.name``: a GPU cfgcheck knows, named without ambiguity."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.memory import devices
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig


def _name_fix(name: str) -> Fix:
    spec = devices.lookup(name)
    memory = f" ({spec.memory_gib:.0f} GiB)" if spec is not None else ""
    return Fix((f"trainer.gpu.name={name}",), f"the {name}{memory}")


@rule("gpu-name", requires=("trainer",))
def gpu_name(cfg: RunConfig) -> Iterator[Problem]:
    """trainer.gpu.name must name one GPU of the table (or come with trainer.gpu.memory_gib)."""
    gpu = cfg.trainer.gpu
    if gpu is None or gpu.name is None:
        return
    try:
        devices.declared_device(gpu)
    except devices.AmbiguousGpuError as e:
        yield Problem(
            "error",
            ("trainer.gpu.name",),
            f"trainer.gpu.name={e.name} names several GPUs with different memory or "
            f"capabilities ({', '.join(e.choices)}): the memory check cannot guess which",
            f"name the exact card: {' or '.join(f'trainer.gpu.name={c}' for c in e.choices)}",
            fixes=tuple(_name_fix(c) for c in e.choices),
        )
    except devices.UnknownGpuError as e:
        close = f"did you mean {' or '.join(e.choices)}? " if e.choices else ""
        yield Problem(
            "error",
            ("trainer.gpu.name",),
            f"trainer.gpu.name={e.name} is not a GPU cfgcheck knows, and "
            f"trainer.gpu.memory_gib is not set: its memory and capabilities are unknown",
            f"{close}Known GPUs: {', '.join(devices.known_names())}; or keep the name and set "
            f"trainer.gpu.memory_gib (the memory nvidia-smi reports, in GiB)",
            fixes=tuple(_name_fix(c) for c in e.choices),
        )
