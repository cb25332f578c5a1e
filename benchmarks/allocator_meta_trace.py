"""The real op sequence of the H100 calibration runs, at their real sizes, replayed through the
allocator simulation: where the generated event sequence (cfgcheck/memory/events.py) and the
measurement part, this says which side is wrong.

gpu_measure.py's loop (tests/alloc_tracer.py ``traced_step``, ``record=True``) runs on *meta*
tensors: every aten op of transformers' model, autograd's backward, the non-reentrant
checkpoint's recomputation and AdamW's foreach kernels runs with its real output shapes and
no data, so a 3-billion-parameter step takes seconds on a CPU. Two things are set as on CUDA:

* attention: ``scaled_dot_product_attention`` on meta would take the math path (a
  batch x heads x seq x seq score tensor); on an H100 a masked training call runs the
  memory-efficient kernel, so it is called here (``aten._scaled_dot_product_efficient_attention``,
  output plus an fp32 log-sum-exp), with the boolean mask made an additive bias padded to 16
  columns as ``convert_boolean_attn_mask`` / ``preprocess_mask`` do
  (pytorch/pytorch ``aten/src/ATen/native/transformers/attention.cpp``);
* dropout: CUDA's fused ``native_dropout`` (a one-byte mask), not the noise tensor of the
  input's dtype that ``at::dropout`` makes on other devices (``Dropout.cpp``,
  ``is_fused_kernel_acceptable``);
* data-dependent checks (``.item()`` on a meta tensor) answer 0: the padded batch's
  ``attention_mask.all()`` is false, as for gpu_measure.py's padded batches of several rows.

cuBLAS's two workspaces (one per thread that runs a matmul) are added where CUDA takes them
(tests/alloc_tracer.py ``cuda_events``). What it cannot see: the CUDA kernels' own temporaries
(the embedding backward's sort, attention backward workspaces) and runs whose kernel choice
differs from CPU's elsewhere. Needs torch, transformers, peft.

    python benchmarks/allocator_meta_trace.py [run-id ...]
"""

from __future__ import annotations

import statistics
import sys
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # PYTHONPATH first
GIB = 1024**3


def install_meta_tracing() -> None:
    """Make tests/alloc_tracer.py trace meta tensors, with CUDA's attention kernel."""
    import torch
    import torch.nn.functional as F

    import tests.alloc_tracer as at

    class MetaTracer(at.AllocTracer):
        def track(self, t: object, op: str = "") -> None:
            if not isinstance(t, torch.Tensor) or t.device.type != "meta":
                return
            st = t.untyped_storage()
            n, key = st.nbytes(), st._cdata
            old = self.live.get(key)
            if old == n:
                return
            if old is None:
                if n == 0:
                    return
                self._refs[key] = weakref.ref(st, partial(self._free, key))
                old = 0
            elif self.record:
                self.events.append((key, -1))
                self.event_ops.append("setup:free" if self.phase == "setup" else "free")
            if self.record:
                self.events.append((key, n))
                self.event_ops.append(f"{self.phase}:{op}")
            self.live[key] = n
            self.current += n - old

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.aten._local_scalar_dense.default and args[0].is_meta:
                return 0
            return super().__torch_dispatch__(func, types, args, kwargs)

    sdpa = F.scaled_dot_product_attention

    def efficient(
        q: Any,
        k: Any,
        v: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: Any = None,
        enable_gqa: bool = False,
    ) -> Any:
        if not q.is_meta:
            return sdpa(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
            )
        if enable_gqa and k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
        bias = None
        if attn_mask is not None:
            bias = attn_mask
            if attn_mask.dtype == torch.bool:
                zero = torch.zeros((), dtype=q.dtype, device=q.device)
                bias = torch.where(attn_mask.logical_not(), float("-inf"), zero).to(q.dtype)
            cols = bias.shape[-1]
            if cols % 16:
                bias = F.pad(bias, (0, 16 - cols % 16))[..., :cols]
            bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, True, dropout_p, is_causal and bias is None, scale=scale
        )[0]

    F.scaled_dot_product_attention = efficient
    dropout = F.dropout

    def fused_dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        # CUDA's path: ``at::dropout`` takes ``native_dropout`` (the output and a bool mask)
        # when ``is_fused_kernel_acceptable`` (a CUDA input, 0 < p < 1); on any other device
        # it multiplies by a noise tensor of the input's dtype, which autograd keeps
        # (aten/src/ATen/native/Dropout.cpp)
        if x.is_meta and training and 0 < p < 1 and not inplace:
            return torch.native_dropout(x, p, True)[0]
        return dropout(x, p, training, inplace)

    F.dropout = fused_dropout  # type: ignore[assignment]
    autocast = torch.autocast

    def meta_autocast(device_type: str, *args: Any, **kwargs: Any) -> Any:
        # PEFT's ParamWrapper folds its delta under ``torch.autocast(device_type=W.device.type,
        # enabled=False)`` (peft 0.21 ``tuners/lora/layer.py`` ``_LoraFactorsProxy``): no
        # autocast backend for meta; disabled, any device type does the same
        return autocast("cpu" if device_type == "meta" else device_type, *args, **kwargs)

    torch.autocast = meta_autocast  # type: ignore[assignment,misc]
    at.AllocTracer = MetaTracer  # type: ignore[misc]
    build, batch = at.build, at.batch

    def meta_build(m: Any, t: Any, gm: Any) -> Any:
        with torch.device("meta"):
            return build(m, t, gm)

    at.build = meta_build
    at.batch = lambda m, t, d: {k: v.to("meta") for k, v in batch(m, t, d).items()}


@contextmanager
def meta_tracing() -> Iterator[None]:
    """:func:`install_meta_tracing` for the length of a block (tests): what it replaced is
    put back after it."""
    import torch
    import torch.nn.functional as F

    import tests.alloc_tracer as at

    saved = (F.scaled_dot_product_attention, F.dropout, at.AllocTracer, at.build, at.batch)
    autocast = torch.autocast
    install_meta_tracing()
    try:
        yield
    finally:
        torch.autocast = autocast  # type: ignore[misc]
        F.scaled_dot_product_attention, F.dropout = saved[0], saved[1]  # type: ignore[assignment]
        at.AllocTracer, at.build, at.batch = saved[2], saved[3], saved[4]  # type: ignore[misc]


def main(ids: list[str]) -> int:
    """Every measured row (benchmarks/calibration ``runs*.json`` and ``*.jsonl``, each on the
    measurement's GPU and its ``cuda_alloc_conf``): the real ops' simulated reserved peak and,
    where :func:`cfgcheck.memory.events.covered` holds, the generated sequence's (without ids:
    the covered rows only)."""
    warnings.filterwarnings("ignore")
    install_meta_tracing()
    from benchmarks.memory_calibration import DATA, gpu_name, load
    from cfgcheck import check
    from cfgcheck.memory import devices
    from cfgcheck.memory.allocsim import replay
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.memory.event_seq import blas_workspace
    from cfgcheck.memory.events import covered, step_events
    from cfgcheck.memory.simulated import alloc_conf
    from cfgcheck.memory.verdict import outside_bytes
    from tests.alloc_tracer import cuda_events, traced_step

    print(
        "| run | measured resv GiB | real ops at full size | err | allocated - measured, bytes "
        "| generated | err |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    errs: dict[str, list[float]] = {"trace": [], "gen": []}
    for spec, meas in load(DATA):
        if ids and spec["id"] not in ids:
            continue
        gpu = gpu_name(meas)
        overrides = (*spec["overrides"], f"trainer.gpu.name={gpu}")
        cfg = check(ROOT / "conf", "config", overrides).config
        if cfg is None:
            continue
        sim = covered(cfg.model, cfg.trainer)
        if not ids and not sim:
            continue
        conf = alloc_conf(cfg.trainer)
        cap = None  # expandable segments: replayed on the GPU, as simulate_step does
        if conf.expandable_segments:
            est = estimate(cfg.model, cfg.data, cfg.trainer)
            avail = devices.available(cfg.trainer.gpu, cfg.trainer.devices).bytes
            cap = max(0, avail - outside_bytes(est))
        try:
            r = traced_step(spec, record=True)
        except Exception as e:  # an op with no meta path (PEFT's ParamWrapper's autocast)
            print(f"| {spec['id']} | not traced on meta: {type(e).__name__}: {e} |")
            continue
        tr = replay(cuda_events(r, blas_workspace(cfg.trainer)), conf, cap)[0]
        m = int(meas["reserved"])
        e_tr = tr.peak_reserved / m - 1
        errs["trace"].append(e_tr)
        gen_cells = "— | — |"
        if sim:
            gen = replay(step_events(cfg.model, cfg.data, cfg.trainer), conf, cap)[0]
            e_gen = gen.peak_reserved / m - 1
            errs["gen"].append(e_gen)
            gen_cells = f"{gen.peak_reserved / GIB:.2f} | {e_gen:+.1%} |"
        print(
            f"| {spec['id']} | {m / GIB:.2f} | {tr.peak_reserved / GIB:.2f} | "
            f"{e_tr:+.1%} | {tr.peak_allocated - int(meas['allocated']):,} | {gen_cells}",
            flush=True,
        )
    for k, v in errs.items():
        if v:
            a = [abs(x) for x in v]
            med, worst = statistics.median(a), max(a)
            print(f"{k}: median |error| {med:.1%}, worst {worst:.1%}, most under {min(v):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
