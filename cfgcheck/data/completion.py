"""Prompt-completion records (``data.prompt_field`` and ``data.completion_field``, TRL's
prompt-completion format) tokenized as TRL's SFTTrainer does (TRL 1.16):

- a plain-text completion gets the ``eos_token`` appended unless it ends with it
  (``add_eos``, trl/trainer/sft_trainer.py:1287-1297; ``data.add_eos`` does the same for
  plain text); a conversational one does not;
- plain text: ``prompt_ids = tokenizer(text=prompt)``, ``ids = tokenizer(text=prompt +
  completion)`` (trl/data_utils.py:398-399 ``_tokenize``; sft_trainer.py:1340-1348);
  conversational (lists of messages): ``apply_chat_template(prompt,
  add_generation_prompt=True)`` and ``apply_chat_template(prompt + completion,
  return_assistant_tokens_mask=assistant_only_loss)`` (sft_trainer.py:1324-1339);
- the completion starts where the two token lists diverge (``common_prefix_length``,
  sft_trainer.py:1352), ``completion_mask = [0] * prompt_len + [1] * rest`` (1367);
- labels are the tokens every applicable mask keeps: the completion mask when
  ``completion_only_loss`` (by default: true for this format, sft_trainer.py:961-964), the
  assistant mask when ``assistant_only_loss`` (sft_trainer.py:1405-1428).

The reader hands a record over as the JSON text of ``[prompt, completion]`` (:func:`pair`),
so it travels through the same chunks, shards and workers as plain text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cfgcheck.data.chat import check_template, conversation, load_hf_tokenizer, template_ids
from cfgcheck.data.report import ScanError
from cfgcheck.schema.run import RunConfig


def pair(prompt: Any, completion: Any) -> str:
    """A prompt and its completion as JSON text; ValueError (one line) unless both are
    strings or both are lists of ``{role, content}`` messages (TRL tells the format from the
    record: trl/data_utils.py ``is_conversational``)."""
    if isinstance(prompt, str) and isinstance(completion, str):
        return json.dumps([prompt, completion], ensure_ascii=False)
    if isinstance(prompt, list) and isinstance(completion, list):
        return json.dumps(
            [json.loads(conversation(prompt)), json.loads(conversation(completion))],
            ensure_ascii=False,
        )
    raise ValueError(
        "expected a prompt and a completion that are both text or both lists of messages, "
        f"got {type(prompt).__name__} and {type(completion).__name__}"
    )


def _content(part: Any) -> str:
    if isinstance(part, str):
        return part
    return "".join(str(m.get("content") or "") for m in part)


def is_empty(text: str) -> bool:
    """Neither the prompt nor the completion holds any text."""
    prompt, completion = json.loads(text)
    return not (_content(prompt).strip() or _content(completion).strip())


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share (trl/data_utils.py
    ``common_prefix_length``)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class CompletionEncoder:
    """Token ids and label masks of prompt-completion records."""

    run: RunConfig

    def __post_init__(self) -> None:
        d = self.run.data
        self.tok = load_hf_tokenizer(self.run, "data.prompt_field")
        self.completion_only = d.masks_completion
        self.assistant_only = d.assistant_only_loss
        self.eos: str | None = None  # looked up for the first text completion
        self.template_checked = False

    def _conversational(self) -> None:
        if not self.template_checked:
            check_template(self.tok, self.run, f"data.prompt_field={self.run.data.prompt_field}")
            self.template_checked = True

    def encode(self, texts: list[str]) -> tuple[list[list[int]], list[list[int]] | None]:
        """Ids of each prompt + completion, and the label mask (None: every token)."""
        pairs = [json.loads(t) for t in texts]
        if any(isinstance(p, list) for p, _ in pairs):
            if not all(isinstance(p, list) for p, _ in pairs):
                raise ScanError("the dataset mixes text and conversational prompts")
            ids, prompt_ids, assistant = self._chat(pairs)
        else:
            if self.assistant_only:
                raise ScanError(
                    "data.assistant_only_loss=true needs a conversational dataset, and the "
                    "prompts are text (TRL's SFTTrainer refuses it: 'only supported for "
                    "conversational datasets')"
                )
            ids, assistant = self._text(pairs), None
            prompt_ids = self._text_prompts(pairs)
        masks: list[list[int]] = []
        for i, x in enumerate(ids):
            bits = [1] * len(x)
            if self.completion_only:
                start = common_prefix_length(prompt_ids[i], x)
                bits = [0] * start + bits[start:]
            if assistant is not None:
                bits = [b & a for b, a in zip(bits, assistant[i], strict=True)]
            masks.append(bits)
        masked = self.completion_only or assistant is not None
        return ids, masks if masked else None

    def _text(self, pairs: list[Any]) -> list[list[int]]:
        from cfgcheck.data.scanner import eos_token

        if self.eos is None:
            self.eos = eos_token(self.run)
        eos = self.eos
        full = [p + (c if c.endswith(eos) else c + eos) for p, c in pairs]
        return [list(x) for x in self.tok(text=full)["input_ids"]]

    def _text_prompts(self, pairs: list[Any]) -> list[list[int]]:
        if not self.completion_only:
            return [[] for _ in pairs]
        return [list(x) for x in self.tok(text=[p for p, _ in pairs])["input_ids"]]

    def _chat(
        self, pairs: list[Any]
    ) -> tuple[list[list[int]], list[list[int]], list[list[int]] | None]:
        self._conversational()
        prompt_ids, _ = template_ids(self.tok, [p for p, _ in pairs], generation_prompt=True)
        ids, masks = template_ids(self.tok, [p + c for p, c in pairs], masks=self.assistant_only)
        return ids, prompt_ids, masks
