"""What autograd saves for backward during a forward, counted on CPU: the unique storages
packed by ``torch.autograd.graph.saved_tensors_hooks``, parameters excluded. Each packed
tensor is held until the block ends, so no storage is freed and its address reused while
the forward runs (two different tensors never count as one)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def saved_storages(model: Any) -> Iterator[dict[int, int]]:
    """``with saved_storages(model) as seen: model(...)``; then ``sum(seen.values())`` is the
    bytes saved for backward (storage address -> bytes)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    keep: list[Any] = []

    def pack(x: Any) -> Any:
        st = x.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
            keep.append(x)
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        yield seen
