"""What a TRL preference or online trainer puts on the GPU beside the policy's own step, read
from the trainer's keys into ``trainer.reference_model``, ``trainer.sequences_per_sample`` and
``trainer.rl`` (modelled by :mod:`cfgcheck.memory.rl`).

* **DPO** (trl/trainer/dpo_trainer.py): chosen and rejected run as one batch ("batch is
  [chosen, rejected]", ``_compute_loss`` in 1.16.0; ``concatenated_forward`` before). A
  reference model is loaded unless the policy is a PEFT model (the adapter-disabled model is
  the reference) or ``precompute_ref_log_probs`` (1.16.0 lines 908-914: with FSDP the
  precompute still loads one and frees it; 0.19.1 lines 322-327). Log-probabilities: the
  logits of every token through ``selective_log_softmax`` before 1.15, the fused LM head
  (``add_fused_lm_head``) from 1.15 (the wheels: absent in 1.14.0, present in 1.15.0).
* **GRPO / RLOO** (trl/trainer/grpo_trainer.py): the backbone runs over prompt + completion,
  but log-probabilities are taken over the completion only (``logits_to_keep =
  completion_ids.size(1)``); the reference model exists when ``beta != 0`` and the policy is
  not a PEFT model (1.16.0 lines 983-1003; 0.18.0 lines 553-565, where ZeRO-3 / FSDP load it
  even with PEFT); completions come from ``model.generate`` on the training GPU
  (``use_vllm: false``), from a colocated vLLM engine (``vllm_mode: colocate``, which takes
  ``vllm_gpu_memory_utilization`` of the GPU) or from a vLLM server on other GPUs.
"""

from __future__ import annotations

from typing import Any

from cfgcheck.sources.base import Builder
from cfgcheck.sources.trl_run import TrlRun
from cfgcheck.sources.trl_versions import version_tuple

FUSED_HEAD_SINCE = (1, 15)
ONLINE = ("grpo", "rloo")
GRPO = "trl/trainer/grpo_trainer.py"
DPO = "trl/trainer/dpo_trainer.py"


def _value(b: Builder, run: TrlRun, key: str, fallback: Any) -> Any:
    n = b.native
    return n.get(key) if n.is_set(key) else run.default(key, fallback)


def _located(b: Builder, path: str, value: Any, keys: tuple[str, ...], where: str) -> None:
    """``path`` = ``value``, located at the first of ``keys`` the file sets, else a default."""
    for key in keys:
        if b.native.loc(key) is not None and b.native.is_set(key):
            b.from_key(path, key, value)
            return
    b.default(path, value, where)


def apply(b: Builder, run: TrlRun) -> None:
    name = run.trainer.name
    if name == "dpo":
        _dpo(b, run)
    elif name == "kto":
        # trl/trainer/kto_trainer.py (1.16.0 lines 920-938): DPO's reference-model rule; one
        # completion a sample; the fused LM head from 1.15 (before: the model's logits)
        _reference(b, run, "trl/trainer/kto_trainer.py")
        if _fused(run):
            _logprobs(b, run, "trl/trainer/kto_trainer.py")
    elif name == "orpo":
        # ORPO (trl/experimental/orpo in 1.16): chosen and rejected concatenated, no reference
        b.default(
            "trainer.sequences_per_sample",
            2,
            f"{run.config_class}: chosen and rejected, one batch (concatenated_forward)",
        )
    elif name in ONLINE:
        _online(b, run)


def _fused(run: TrlRun) -> bool:
    return version_tuple(run.version.wanted or run.version.table) >= FUSED_HEAD_SINCE


def _logprobs(b: Builder, run: TrlRun, source: str) -> None:
    if _fused(run):
        where = f"{run.config_class}: the fused LM head (add_fused_lm_head, {source}, TRL 1.15+)"
        b.default("trainer.rl.logprobs", "tiled", where)
    else:
        where = (
            f"{run.config_class}: selective_log_softmax of the logits ({source}, "
            f"TRL {run.version.table})"
        )
        b.default("trainer.rl.logprobs", "logits", where)


def _dpo(b: Builder, run: TrlRun) -> None:
    b.default(
        "trainer.sequences_per_sample", 2, f"{run.config_class}: chosen and rejected, one batch"
    )
    _reference(b, run, DPO)
    _logprobs(b, run, DPO)


def _reference(b: Builder, run: TrlRun, source: str) -> None:
    n = b.native
    peft = bool(n.get("use_peft"))
    precompute = bool(_value(b, run, "precompute_ref_log_probs", False))
    launch = str(n.options.get("accelerate_config") or "") + str(n.get("accelerate_config") or "")
    fsdp = bool(n.get("fsdp")) or "fsdp" in launch
    ref = not peft and not (precompute and not fsdp)
    _located(
        b,
        "trainer.reference_model",
        ref,
        ("use_peft", "precompute_ref_log_probs"),
        f"{run.config_class}: a reference model beside the policy ({source})",
    )


def _online(b: Builder, run: TrlRun) -> None:
    n = b.native
    peft = bool(n.get("use_peft"))
    beta = _value(b, run, "beta", 0.0)
    sharded = bool(n.get("fsdp")) or "zero3" in str(n.get("deepspeed") or "")
    sharded = sharded or any(
        s in str(n.options.get("accelerate_config") or "") + str(n.get("accelerate_config") or "")
        for s in ("zero3", "fsdp")
    )
    # 0.18-0.x: ZeRO-3 / FSDP load a reference model even for a PEFT policy
    old = version_tuple(run.version.table) < (0, 19)
    ref = isinstance(beta, (int, float)) and beta != 0 and (not peft or (old and sharded))
    _located(
        b,
        "trainer.reference_model",
        ref,
        ("beta", "use_peft"),
        f"{run.config_class} beta={beta!r}: a reference model only when beta != 0 ({GRPO})",
    )
    _logprobs(b, run, GRPO)
    completion = _value(b, run, "max_completion_length", None)
    if isinstance(completion, int) and not isinstance(completion, bool) and completion > 0:
        _located(
            b,
            "trainer.rl.scored_tokens",
            completion,
            ("max_completion_length",),
            f"{run.config_class} max_completion_length={completion} (logits_to_keep)",
        )
    use_vllm = bool(_value(b, run, "use_vllm", False))
    mode = str(_value(b, run, "vllm_mode", "server"))
    generation = (
        "transformers" if not use_vllm else "vllm-colocate" if mode == "colocate" else "vllm-server"
    )
    _located(
        b,
        "trainer.rl.generation",
        generation,
        ("vllm_mode", "use_vllm"),
        f"{run.config_class} use_vllm={use_vllm}, vllm_mode={mode!r}",
    )
    if generation == "vllm-colocate":
        share = _value(b, run, "vllm_gpu_memory_utilization", 0.3)
        if isinstance(share, (int, float)) and 0 < share <= 1:
            _located(
                b,
                "trainer.rl.vllm_memory_share",
                float(share),
                ("vllm_gpu_memory_utilization",),
                f"{run.config_class} vllm_gpu_memory_utilization={share}",
            )
        sleeps = bool(_value(b, run, "vllm_enable_sleep_mode", False))
        _located(
            b,
            "trainer.rl.vllm_sleeps",
            sleeps,
            ("vllm_enable_sleep_mode",),
            f"{run.config_class} vllm_enable_sleep_mode={sleeps}",
        )
    elif generation == "transformers":
        per_device = _value(b, run, "per_device_train_batch_size", 8)
        steps = _value(b, run, "steps_per_generation", None) or _value(
            b, run, "gradient_accumulation_steps", 1
        )
        if all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (per_device, steps)
        ):
            _located(
                b,
                "trainer.rl.generation_batch",
                per_device * steps,
                ("steps_per_generation", "per_device_train_batch_size"),
                f"{run.config_class}: per_device_train_batch_size x steps_per_generation "
                "(gradient_accumulation_steps by default)",
            )
