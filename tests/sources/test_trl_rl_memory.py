"""GRPO / DPO memory as TRL computes it (cfgcheck/memory/rl.py), against CPU traces of TRL's own
log-probability code on a tiny model (tests/alloc_tracer.py), and the TRL keys that decide
it (cfgcheck/sources/trl_memory.py)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import load_native
from tests.sources.support import write

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

B, PROMPT, COMPLETION = 2, 8, 24


def _tiny(vocab: int) -> Any:
    cfg = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.get_input_embeddings().weight.requires_grad_(False)
    return model, cfg


def _sections(cfg: Any, finetuning: str, rl: dict[str, Any]) -> tuple[Any, Any]:
    from cfgcheck.models.hf import hf_model
    from cfgcheck.schema.model import ModelConfig
    from cfgcheck.schema.trainer import TrainerConfig

    shape = {k: v.value for k, v in hf_model(cfg.to_dict(), "config.json").items()}
    m = ModelConfig.model_validate({"name": "tiny", **shape})
    t = TrainerConfig.model_validate(
        {
            "micro_batch_size": B,
            "precision": "bf16-true",
            "finetuning": finetuning,
            "lora": {"rank": 8},
            "rl": rl,
        }
    )
    return m, t


# trl v0.18.0, trl/trainer/utils.py lines 1718-1750 (selective_log_softmax) and
# trl/trainer/grpo_trainer.py lines 836-857 (GRPOTrainer._get_per_token_logps), copied: the
# installed TRL (1.16) computes them differently, and GRPO recipes pinned to 0.18 run this.
def selective_log_softmax(logits: Any, index: Any) -> Any:
    if logits.dtype in [torch.float32, torch.float64]:
        selected_logits = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
        logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        per_token_logps = selected_logits - logsumexp_values
    else:
        per_token_logps = []
        for row_logits, row_labels in zip(logits, index, strict=True):
            row_logps = torch.nn.functional.log_softmax(row_logits, dim=-1)
            row_per_token_logps = row_logps.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(
                -1
            )
            per_token_logps.append(row_per_token_logps)
        per_token_logps = torch.stack(per_token_logps)
    return per_token_logps


def get_per_token_logps_018(
    model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, temperature: float = 1.0
) -> Any:
    batch_size = input_ids.size(0)
    all_logps = []
    for i in range(0, input_ids.size(0), batch_size):
        input_ids_batch = input_ids[i : i + batch_size]
        attention_mask_batch = attention_mask[i : i + batch_size]
        logits = model(
            input_ids=input_ids_batch,
            attention_mask=attention_mask_batch,
            logits_to_keep=logits_to_keep + 1,
        ).logits
        logits = logits[:, :-1, :]
        input_ids_batch = input_ids_batch[:, -logits_to_keep:]
        logits = logits[:, -logits_to_keep:]
        logits = logits / temperature
        logps = selective_log_softmax(logits, input_ids_batch)
        all_logps.append(logps)
    return torch.cat(all_logps, dim=0)


@pytest.mark.parametrize("vocab", [16384, 65536])
def test_grpo_018_logits_of_the_completion_only(vocab: int) -> None:
    """TRL 0.18's GRPO loss step (policy log-probabilities with their graph, the reference's
    under no_grad, the KL term, backward): its peak beyond the weights is the estimate's
    ``logits`` term over the completion tokens, not over prompt + completion."""
    from cfgcheck.memory import rl
    from tests.alloc_tracer import AllocTracer

    model, cfg = _tiny(vocab)
    model.lm_head.weight.requires_grad_(False)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    ids = torch.randint(0, vocab, (B, PROMPT + COMPLETION))
    mask = torch.ones_like(ids)

    def step() -> None:
        logps = get_per_token_logps_018(model, ids, mask, COMPLETION)
        with torch.no_grad():
            ref_logps = get_per_token_logps_018(ref, ids, mask, COMPLETION)
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        (-(torch.exp(logps - logps.detach())) + 0.04 * kl).mean().backward()

    tracer = AllocTracer()
    tracer.track_all([*model.parameters(), *ref.parameters(), ids, mask])
    kept = tracer.current
    tracer.reset_peak()
    with tracer:
        step()
    measured = tracer.peak.bytes - kept
    m, t = _sections(cfg, "lora", {"logprobs": "logits", "scored_tokens": COMPLETION})
    modelled = rl.logprob_bytes(m, t, B, PROMPT + COMPLETION)
    # the rest is the one tiny layer's activations (under 4 %)
    assert modelled <= measured <= modelled * 1.05, (modelled, measured)
    everything = rl.logprob_bytes(
        m,
        t.model_copy(update={"rl": t.rl.model_copy(update={"scored_tokens": None})}),
        B,
        PROMPT + COMPLETION,
    )
    assert everything > measured * 1.2  # over prompt + completion it would be a third more


@pytest.mark.parametrize(
    ("vocab", "finetuning"), [(16384, "lora"), (65536, "lora"), (65536, "full")]
)
def test_fused_lm_head_of_trl_116(vocab: int, finetuning: str) -> None:
    """TRL 1.15+'s fused LM head (add_fused_lm_head, trl/kernels/chunked_logprob.py), the
    installed TRL's own code: the peak of its forward and backward is the estimate's ``tiled``
    term. On CPU it scores every position (``_use_triton`` is False: no ``hidden[mask]``
    copy) and folds each tile with torch ops where CUDA runs a Triton kernel, and casts to
    fp32 for ``addmm`` where CUDA passes ``out_dtype``; those three run untraced here, as the
    CUDA kernels allocate nothing."""
    import trl.kernels.chunked_logprob as ck
    from trl.trainer.utils import add_fused_lm_head

    from cfgcheck.memory import rl
    from tests.alloc_tracer import AllocTracer

    class Tracer(AllocTracer):
        paused = False

        def track(self, t: object, op: str = "") -> None:
            if not self.paused:
                super().track(t, op)

    tracer = Tracer()

    def untraced(fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            tracer.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                tracer.paused = False

        return run

    model, cfg = _tiny(vocab)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.lm_head.weight.requires_grad_(finetuning == "full")
    ids = torch.randint(0, vocab, (B, PROMPT + COMPLETION))
    mask = torch.ones_like(ids)
    labels = ids.clone()
    labels[:, :PROMPT] = -100

    def step() -> None:
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        (out.log_probs.sum() + 0.01 * out.entropy.sum()).backward()

    with pytest.MonkeyPatch.context() as mp:
        for name in ("_forward_tile", "_backward_tile", "_addmm_fp32"):
            mp.setattr(ck, name, untraced(getattr(ck, name)))
        tracer.track_all([*model.parameters(), ids, mask, labels])
        kept = tracer.current
        tracer.reset_peak()
        with tracer:
            step()
    measured = tracer.peak.bytes - kept
    m, t = _sections(cfg, finetuning, {"logprobs": "tiled", "scored_tokens": COMPLETION})
    modelled = rl.logprob_bytes(m, t, B, PROMPT + COMPLETION, compact=False)
    assert modelled <= measured <= modelled * 1.05, (modelled, measured)


def _trl(tmp_path: Path, text: str, version: str = "1.16.0", **options: str) -> Any:
    file = write(tmp_path, "config.yaml", "model_name_or_path: Qwen/Qwen2.5-1.5B\n" + text)
    loaded = load_native(file, "trl", options={"framework_version": version, **options})
    return loaded.config["trainer"], loaded


def test_dpo_reference_model_and_both_completions(tmp_path: Path) -> None:
    full, _ = _trl(tmp_path, "beta: 0.1\nmax_length: 512\n", trainer="dpo")
    assert (full["reference_model"], full["sequences_per_sample"]) == (True, 2)
    assert full["rl"]["logprobs"] == "tiled"  # 1.16: the fused LM head
    # PEFT: the adapter-disabled policy is the reference; precomputed: none is kept
    peft, _ = _trl(tmp_path, "beta: 0.1\nuse_peft: true\n", trainer="dpo")
    assert peft["reference_model"] is False
    pre, _ = _trl(tmp_path, "beta: 0.1\nprecompute_ref_log_probs: true\n", trainer="dpo")
    assert pre["reference_model"] is False
    old, _ = _trl(tmp_path, "beta: 0.1\nmax_length: 512\n", version="0.19.1", trainer="dpo")
    assert old["rl"]["logprobs"] == "logits"  # selective_log_softmax of every token's logits


@pytest.mark.parametrize(
    ("keys", "version", "expected"),
    [
        # 1.16 defaults: beta 0 (no reference), vLLM off -> model.generate on the GPU
        (
            "num_generations: 4\nmax_completion_length: 256\nper_device_train_batch_size: 4\n"
            "gradient_accumulation_steps: 2\n",
            "1.16.0",
            {"reference_model": False, "generation": "transformers", "generation_batch": 8},
        ),
        # 0.18 defaults: beta 0.04 (a reference), vllm_mode server when vLLM is on
        (
            "max_completion_length: 1024\nuse_vllm: true\n",
            "0.18.2",
            {"reference_model": True, "generation": "vllm-server", "logprobs": "logits"},
        ),
        (
            "beta: 0.04\nuse_peft: true\nuse_vllm: true\nvllm_mode: colocate\n"
            "vllm_gpu_memory_utilization: 0.5\nvllm_enable_sleep_mode: true\n",
            "1.16.0",
            {
                "reference_model": False,
                "generation": "vllm-colocate",
                "vllm_memory_share": 0.5,
                "vllm_sleeps": True,
                "logprobs": "tiled",
            },
        ),
    ],
)
def test_grpo_keys(tmp_path: Path, keys: str, version: str, expected: dict[str, Any]) -> None:
    trainer, _ = _trl(tmp_path, keys, version=version, trainer="grpo")
    got = {k: trainer.get(k, trainer["rl"].get(k)) for k in expected}
    assert got == expected


def test_colocated_vllm_takes_its_share_of_the_gpu(tmp_path: Path) -> None:
    """vLLM's gpu_memory_utilization is a share of the device's total memory: a run that fits
    an H100 alone does not once vLLM holds 0.9 of it (vllm_max_model_length caps prompt +
    completion: without it the prompts' worst case, the model's context, decides)."""
    from cfgcheck.sources import check_native

    text = (
        "model_name_or_path: Qwen/Qwen2.5-1.5B\nnum_generations: 4\nper_device_train_batch_size: "
        "4\nmax_completion_length: 256\nuse_peft: true\nbf16: true\nuse_vllm: true\n"
        "vllm_mode: colocate\nvllm_max_model_length: 1280\n"
    )
    opts = {"framework_version": "1.16.0", "trainer": "grpo"}
    ok = check_native(write(tmp_path, "a.yaml", text), "trl", gpu="H100", options=opts)
    assert not ok.by_rule("gpu-memory")
    full = text + "vllm_gpu_memory_utilization: 0.95\n"
    over = check_native(write(tmp_path, "b.yaml", full), "trl", gpu="H100", options=opts)
    (found,) = over.by_rule("gpu-memory")
    assert "vLLM engine" in found.message


def test_kto_and_orpo(tmp_path: Path) -> None:
    kto, _ = _trl(tmp_path, "desirable_weight: 1.0\n", trainer="kto")
    assert (kto["reference_model"], kto.get("sequences_per_sample", 1)) == (True, 1)
    orpo, _ = _trl(tmp_path, "beta: 0.1\n", version="0.19.1", trainer="orpo")
    assert (orpo.get("reference_model", False), orpo["sequences_per_sample"]) == (False, 2)


def test_generation_on_the_training_gpu(tmp_path: Path) -> None:
    """use_vllm: false: model.generate holds the KV cache of the whole generation batch
    (per_device_train_batch_size x steps_per_generation sequences of prompt + completion) on
    the training GPU; long completions make that the peak."""
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.validate import validate

    text = (
        "num_generations: 8\nmax_completion_length: 16384\nper_device_train_batch_size: 2\n"
        "gradient_accumulation_steps: 32\nuse_peft: true\nbf16: true\n"
        "gradient_checkpointing: true\n"
    )
    _, loaded = _trl(tmp_path, text, trainer="grpo")
    cfg = validate(loaded.config).config
    m, t = cfg.model, cfg.trainer
    est = estimate(m, cfg.data, t)
    assert est.phase == "generation"
    kv = 2 * m.n_layer * m.kv_heads * m.head_dim * 2 * 64 * cfg.data.max_seq_length
    assert est.get("generation") >= kv
    served = estimate(
        m,
        cfg.data,
        t.model_copy(update={"rl": t.rl.model_copy(update={"generation": "vllm-server"})}),
    )
    assert served.phase != "generation" and served.total_bytes < est.total_bytes


def _trl_116_logps(model: Any, ids: Any, mask: Any, completion: int) -> Any:
    """The installed TRL's own GRPOTrainer._get_per_token_logps_and_entropies (fused LM head,
    labels of the prompt set to -100), called unbound: it reads only ``accelerator.autocast``."""
    import contextlib
    import types

    from trl import GRPOTrainer

    method = GRPOTrainer._get_per_token_logps_and_entropies
    method = getattr(method, "__wrapped__", method)  # profiling_decorator
    owner = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext)
    )
    logps, entropies, _ = method(owner, model, ids, mask, completion, compute_entropy=True)
    return logps, entropies


def test_the_prompt_costs_what_trl_116_spends_on_it() -> None:
    """GRPO's loss step runs the backbone over prompt + completion (prompt_completion_ids,
    trl/trainer/grpo_trainer.py of 1.16.0 line 2501) though only the completion is scored:
    traced on TRL's own log-probability code with a short and a long prompt, the peak grows by
    what the estimate adds for the longer prompt (the backbone's activations and, on CPU where
    the fused head scores every position, its tiles); counting the completion only misses it."""
    import trl.kernels.chunked_logprob as ck
    from trl.trainer.utils import add_fused_lm_head

    from cfgcheck.memory import activations as act
    from cfgcheck.memory import rl
    from tests.alloc_tracer import AllocTracer

    class Tracer(AllocTracer):
        paused = False

        def track(self, t: object, op: str = "") -> None:
            if not self.paused:
                super().track(t, op)

    def untraced(tracer: Tracer, fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            tracer.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                tracer.paused = False

        return run

    vocab, long_prompt = 16384, 8 * PROMPT
    model, cfg = _tiny(vocab)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.lm_head.weight.requires_grad_(False)
    m, t = _sections(cfg, "lora", {"logprobs": "tiled", "scored_tokens": COMPLETION})
    measured, modelled = {}, {}
    for prompt in (PROMPT, long_prompt):
        ids = torch.randint(0, vocab, (B, prompt + COMPLETION))
        mask = torch.ones_like(ids)

        def step(ids: Any = ids, mask: Any = mask) -> None:
            logps, entropies = _trl_116_logps(model, ids, mask, COMPLETION)
            (logps.sum() + 0.01 * entropies.sum()).backward()

        tracer = Tracer()
        with pytest.MonkeyPatch.context() as mp:
            # the CPU stand-ins of CUDA's Triton tile kernels, untraced (as in the test above)
            for name in ("_forward_tile", "_backward_tile", "_addmm_fp32"):
                mp.setattr(ck, name, untraced(tracer, getattr(ck, name)))
            tracer.track_all([*model.parameters(), ids, mask])
            kept = tracer.current
            tracer.reset_peak()
            with tracer:
                step()
        measured[prompt] = tracer.peak.bytes - kept
        seq = prompt + COMPLETION
        modelled[prompt] = act.activation_bytes(m, t, B, seq) + rl.logprob_bytes(
            m, t, B, seq, compact=False
        )
    grew = measured[long_prompt] - measured[PROMPT]
    counted = modelled[long_prompt] - modelled[PROMPT]
    assert grew > 0.2 * measured[PROMPT]  # the prompt is a real share of the step
    assert 0.9 * grew <= counted <= 1.1 * grew, (grew, counted, measured, modelled)
    for prompt, peak in measured.items():  # and each peak itself
        assert modelled[prompt] <= peak <= modelled[prompt] * 1.05, (prompt, peak, modelled)
