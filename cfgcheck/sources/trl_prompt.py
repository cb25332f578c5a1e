"""How long an online trainer's prompts are (GRPO, RLOO): counted with the completion in
``data.max_seq_length`` and described by ``trainer.rl.prompt_tokens`` and
``trainer.rl.prompt_bound`` (the memory estimate names the bound in its notes).

TRL builds one sequence per completion: the prompt ids, left-padded to the longest prompt of
the batch, then the completion ids (``prompt_completion_ids = torch.cat([prompt_ids,
completion_ids], dim=1)  # (B, P+C)``, trl/trainer/grpo_trainer.py of 1.16.0 line 2501, and
again in the loss step, lines 3022-3026). The backbone runs over all P + C positions: its
activations and ``model.generate``'s KV cache grow with P; only the log-probabilities are taken
over the completion alone (``logits_to_keep = completion_ids.size(1)``).

What bounds P:

* GRPO up to 0.25, RLOO up to 0.26: ``max_prompt_length`` (default 512) truncates each prompt
  to its last tokens (v0.18.0 lines 997-999: ``prompt_ids[:, -self.max_prompt_length :]``;
  v0.25.1 lines 1302 and 1350: ``max_length=self.max_prompt_length, truncation=True``).
* GRPO from 0.26 (huggingface/trl ca21dd94c, #4300) and RLOO from 0.27: nothing. Prompts are
  tokenized whole (``_tokenize_prompts``, 1.16.0 lines 1690-1761: ``apply_chat_template`` or
  ``processing_class(text=prompts)``, no ``truncation``); ``max_prompt_length`` is read by no
  trainer code, deprecated ("filter your dataset before training to ensure that prompts do not
  exceed your desired length", GRPOConfig of 0.26 and 0.27), then removed (GRPOConfig 0.28,
  RLOOConfig 0.29).
* A colocated vLLM engine: its ``max_model_len`` is ``vllm_max_model_length`` (1.16.0 line
  1123; trl/generation/vllm_generation.py line 351), else the model's context: vLLM refuses a
  longer prompt ("The decoder prompt (length N) is longer than the maximum model length of M",
  its ``_validate_model_input``) and ends a completion there, so prompt + completion <= it.
* Otherwise (``model.generate``, a vLLM server launched apart) the worst case this module
  assumes: the model's context (``model.block_size``) minus the completion.

The TRL adapter hands an SFT script's ``dataset_name`` to the scan
(:mod:`cfgcheck.sources.trl_data`); an online trainer's prompts are not measured here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding
from cfgcheck.sources.base import Builder, NativeConfig
from cfgcheck.sources.trl_run import TrlRun, run_of
from cfgcheck.sources.trl_versions import version_tuple

if TYPE_CHECKING:
    from cfgcheck.schema.model import ModelConfig
    from cfgcheck.schema.run import RunConfig

# the first version whose trainer no longer truncates prompts (see the module docstring)
# (GRPOWithReplayBufferTrainer, PAPOTrainer and MiniLLMTrainer subclass GRPOTrainer and read
# no max_prompt_length of their own: trl/experimental/*/*_trainer.py of v0.26.0)
UNTRUNCATED_SINCE = {
    "grpo": (0, 26),
    "grpo_with_replay_buffer": (0, 26),
    "papo": (0, 26),
    "minillm": (0, 26),
    "rloo": (0, 27),
}


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _value(b: Builder, run: TrlRun, key: str) -> Any:
    n = b.native
    return n.get(key) if n.is_set(key) else run.default(key)


def truncates(run: TrlRun) -> bool:
    """The trainer of this version truncates prompts to ``max_prompt_length``."""
    since = UNTRUNCATED_SINCE.get(run.trainer.name)
    if since is None:  # other online trainers: the key's presence decides, as before
        return run.reads("max_prompt_length")
    wanted = version_tuple(run.version.wanted or run.version.table)
    return wanted < since and run.reads("max_prompt_length")


def vllm_cap(b: Builder, run: TrlRun) -> int | None:
    """``vllm_max_model_length`` when a colocated vLLM engine generates with it."""
    if not bool(_value(b, run, "use_vllm")) or str(_value(b, run, "vllm_mode")) != "colocate":
        return None
    cap = _value(b, run, "vllm_max_model_length") if run.reads("vllm_max_model_length") else None
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


def apply(b: Builder, run: TrlRun, completion: int) -> None:
    """``data.max_seq_length`` = the longest prompt (by the first bound that applies) plus
    ``completion``, and ``trainer.rl.prompt_tokens`` / ``prompt_bound`` saying which."""
    n = b.native
    if truncates(run):
        prompt = _value(b, run, "max_prompt_length")
        if prompt is not None and not _int(prompt):
            b.set("data.max_seq_length", prompt, n.loc("max_prompt_length"))  # schema says why
            return
        if _int(prompt):
            at = n.loc("max_completion_length") or n.loc("max_prompt_length")
            at = at or b.default_location(
                f"{run.config_class} max_prompt_length + max_completion_length "
                f"({prompt} + {completion}, TRL {run.version.table})"
            )
            b.set("data.max_seq_length", prompt + completion, at)
            b.set("data.truncation", True, at)
            b.set("trainer.rl.prompt_tokens", prompt, n.loc("max_prompt_length") or at)
            b.set("trainer.rl.prompt_bound", "truncated", n.loc("max_prompt_length") or at)
            return
        # max_prompt_length: null truncates nothing (0.18: ``if self.max_prompt_length is not
        # None``): the bounds below
    cap = vllm_cap(b, run)
    if cap is not None:
        at = n.loc("vllm_max_model_length")
        b.set("data.max_seq_length", max(cap, 1), at)
        b.set("data.truncation", True, at)
        b.set("trainer.rl.prompt_tokens", max(cap - completion, 0), at)
        b.set("trainer.rl.prompt_bound", "vllm", at)
        return
    # nothing the config sets bounds the prompts: the model's context minus the completion,
    # once the model is known (until then only the completion, with no prompt_tokens)
    where = (
        f"{run.config_class} (TRL {run.version.wanted or run.version.table}): prompts are not "
        "truncated; the worst case, the model's context minus max_completion_length"
    )
    at = n.loc("max_completion_length") or b.default_location(where)
    b.set("data.max_seq_length", max(completion, 1), at)
    b.set("data.truncation", True, at)
    b.default("trainer.rl.prompt_bound", "context", where)

    def by_context(b: Builder, m: ModelConfig) -> None:
        prompt = max(m.block_size - completion, 0)
        b.set("data.max_seq_length", prompt + completion, at)
        b.default("trainer.rl.prompt_tokens", prompt, where)

    b.after_model.append(by_context)


def prompt_unbounded(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    """GRPO from TRL 0.26 (RLOO from 0.27) truncates no prompt: without a bound the config
    sets (a colocated vLLM's ``vllm_max_model_length``), memory grows with the data's
    longest prompt, and the estimate assumes the worst case."""
    if cfg is None or cfg.trainer.rl.prompt_bound != "context":
        return
    run = run_of(native)
    t, m = cfg.trainer, cfg.model
    prompt = t.rl.prompt_tokens
    completion = cfg.data.max_seq_length - (prompt or 0)
    version = run.version.wanted or run.version.table
    ignored = ""
    if native.is_set("max_prompt_length") and run.reads("max_prompt_length"):
        ignored = (
            f" The file sets max_prompt_length={native.get('max_prompt_length')}, which "
            f"{run.config_class} of this version still accepts but no trainer code reads "
            "(deprecated since 0.26, removed in 0.28)."
        )
    assumed = (
        f"the estimate assumes the worst case, prompts of {prompt} tokens ({m.name}'s "
        f"{m.block_size}-token context minus max_completion_length={completion})"
        if prompt is not None
        else "the estimate counts only the completion (the model's context is unknown)"
    )
    vllm = (
        "; or, as vLLM generates here (colocate), set vllm_max_model_length to the longest "
        "prompt plus max_completion_length: vLLM refuses a longer prompt"
        if t.rl.generation == "vllm-colocate"
        else ""
    )
    key = next(
        (k for k in ("max_prompt_length", "max_completion_length") if k in native.data),
        "data.max_seq_length",
    )
    yield Finding(
        "trl-prompt-unbounded",
        "warning",
        (key, "data.max_seq_length"),
        f"{run.config_class} (TRL {version}) truncates no prompt: each is tokenized whole, "
        "left-padded to the longest of its batch and fed with its completion to generation "
        "and to the forward over prompt + completion (trl/trainer/grpo_trainer.py "
        "_tokenize_prompts, prompt_completion_ids), so activation and KV-cache memory grow "
        f"with the longest prompt in the data; {assumed}.{ignored}",
        "filter the dataset before training so that no prompt exceeds the length you plan "
        f"for (TRL's own advice: no {run.config_class} key truncates prompts; cfgcheck reads "
        f"no Hub dataset, so its estimate keeps the worst case){vllm}",
    )
