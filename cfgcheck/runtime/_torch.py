"""Lazy torch import: ``cfgcheck.runtime`` itself imports without torch installed."""

from __future__ import annotations

from types import ModuleType
from typing import Any

TORCH_EXTRA = "cfgcheck[torch]"


def require_torch() -> ModuleType:
    """The ``torch`` module, or an ImportError that names the extra to install."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"cfgcheck.runtime's collate functions need torch: install {TORCH_EXTRA} "
            f"(pip install torch==2.13.0 first for the CPU wheel, then "
            f"pip install '{TORCH_EXTRA}')"
        ) from e
    return torch


def default_collate() -> Any:
    """torch's ``default_collate``."""
    require_torch()
    from torch.utils.data import default_collate as collate

    return collate
