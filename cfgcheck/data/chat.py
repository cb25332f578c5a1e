"""Conversations (``data.messages_field``: a list of ``{role, content}`` messages) rendered
and tokenized as TRL's SFTTrainer does: ``tokenizer.apply_chat_template(messages,
tokenize=True, return_dict=True, return_assistant_tokens_mask=assistant_only_loss)``
(trl/data_utils.py ``_tokenize`` and trl/trainer/sft_trainer.py ``tokenize_fn``, TRL 1.16),
so no special token is added besides what the template writes; with ``assistant_only_loss``
the labels are the tokens the template marks with ``{% generation %}`` (transformers'
``apply_chat_template`` maps the marked characters to tokens), the rest ``-100``. Axolotl's
``chat_template`` dataset type renders the ids with the same call
(``ChatTemplatePrompter.build_prompt``: ``tokenizer.apply_chat_template(conversation,
tokenize=True, ...)``, src/axolotl/prompt_strategies/chat_template.py, commit 01f6a5c), so
lengths agree; its labels come from ``roles_to_train`` and character offsets instead, which
this scan does not model (``assistant_only_loss`` counts TRL's labels).

The reader hands each conversation over as canonical JSON text (:func:`conversation`), so it
travels through the same chunks, shards and workers as plain text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cfgcheck.data.report import ScanError
from cfgcheck.schema.run import RunConfig

ROLES_KEY, CONTENT_KEY = "role", "content"


def conversation(value: Any) -> str:
    """A conversation as JSON text; ValueError (one line) when it is not a list of
    ``{role: str, content: ...}`` messages."""
    if not isinstance(value, list):
        raise ValueError(f"expected a list of messages, got {type(value).__name__}")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get(ROLES_KEY), str):
            raise ValueError(f"message {i} is not a {{role, content}} object")
    return json.dumps(value, ensure_ascii=False)


def is_empty(text: str) -> bool:
    """A conversation with no message, or whose messages' contents are all blank."""
    messages = json.loads(text)
    return not any(str(m.get(CONTENT_KEY) or "").strip() for m in messages)


def has_generation_markers(template: str) -> bool:
    """The template marks assistant text with ``{% generation %}`` (as TRL's
    ``has_generation_markers`` tests, trl/chat_template_utils.py)."""
    return "{% generation %}" in template or "{%- generation %}" in template


@dataclass
class ChatEncoder:
    """Token ids (and assistant masks) of conversations, with the run's tokenizer loaded by
    transformers (offline, no remote code)."""

    run: RunConfig

    def __post_init__(self) -> None:
        self.tok = load_hf_tokenizer(self.run, "data.messages_field")
        self.masks = self.run.data.assistant_only_loss
        check_template(self.tok, self.run, f"data.messages_field={self.run.data.messages_field}")

    def encode(self, texts: list[str]) -> tuple[list[list[int]], list[list[int]] | None]:
        """Ids of each conversation, and with assistant_only_loss its assistant mask."""
        return template_ids(self.tok, [json.loads(t) for t in texts], masks=self.masks)


def template_ids(
    tok: Any, conversations: list[Any], *, masks: bool = False, generation_prompt: bool = False
) -> tuple[list[list[int]], list[list[int]] | None]:
    """Ids of each conversation through the tokenizer's chat template (TRL's call:
    ``apply_chat_template(..., tokenize=True, return_dict=True)``), and with ``masks`` the
    assistant masks; a template that cannot render is one :class:`ScanError` line."""
    try:
        out = tok.apply_chat_template(
            conversations,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=masks,
            add_generation_prompt=generation_prompt,
        )
    except Exception as e:  # jinja2 errors (raise_exception in a template), bad roles
        raise render_error(e) from e
    ids = [list(x) for x in out["input_ids"]]
    return ids, ([list(m) for m in out["assistant_masks"]] if masks else None)


def load_hf_tokenizer(run: RunConfig, what: str) -> Any:
    """The run's tokenizer loaded by transformers (offline, no remote code)."""
    from cfgcheck.tokenizer import TokenizerFileError
    from cfgcheck.tokenizer.hf import load_auto_tokenizer
    from cfgcheck.tokenizer.resolve import resolve_path

    path = run.tokenizer.path
    if path is None:
        raise ScanError(f"{what} needs tokenizer.path")
    try:
        return load_auto_tokenizer(resolve_path(path))
    except TokenizerFileError as e:
        raise ScanError(f"tokenizer.path={path}: {e}") from e


def check_template(tok: Any, run: RunConfig, what: str) -> None:
    """ScanError unless the tokenizer has a chat template, marked with ``{% generation %}``
    when ``data.assistant_only_loss`` asks for the assistant's tokens."""
    path = run.tokenizer.path
    template = getattr(tok, "chat_template", None)
    if not isinstance(template, str) or not template:
        raise ScanError(
            f"{what} needs a chat template, and the tokenizer at {path} has none "
            "(tokenizer_config.json chat_template or chat_template.jinja); TRL's SFTTrainer "
            "fails on it too"
        )
    if run.data.assistant_only_loss and not has_generation_markers(template):
        raise ScanError(
            "data.assistant_only_loss=true needs a chat template that marks the "
            "assistant's text with {% generation %} ... {% endgeneration %}; the template "
            f"of {path} has none, so no token would be a label (TRL swaps in a training "
            "template only for the models it knows: trl/chat_template_utils.py "
            "get_training_chat_template)"
        )


def render_error(e: Exception) -> ScanError:
    """A template's failure to render (jinja2 errors, raise_exception, bad roles) as one line."""
    first = " ".join(str(e).split()) or type(e).__name__
    return ScanError(f"the chat template cannot render a conversation: {first}")
