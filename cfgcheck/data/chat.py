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

ShareGPT conversations (``{"from": "human"|"gpt"|"system", "value": ...}``) are read through
``data.message_role_key`` / ``data.message_content_key`` / ``data.message_roles`` into
``{role, content}`` messages before the template renders them, as the frameworks do: Axolotl's
``ChatTemplateStrategy.transform_message`` takes each property named by
``message_property_mappings`` and maps the role through ``roles`` (default ``human`` ->
``user``, ``gpt`` -> ``assistant``; a role not listed is kept), and LLaMA-Factory's
``SharegptDatasetConverter`` maps ``role_tag`` / ``content_tag`` values through its
``user_tag`` / ``assistant_tag`` / ``system_tag`` / ``function_tag`` / ``observation_tag``
(src/axolotl/prompt_strategies/chat_template.py, axolotl commit 067b021;
src/llamafactory/data/converter.py, LLaMA-Factory commit ff6d4d1). With
``data.assistant_mask=turns`` the assistant's tokens are each assistant message's tokens
between the conversation rendered before it (with the generation prompt) and after it, the
turn boundaries both frameworks train on (Axolotl's ``roles_to_train=[assistant]``,
LLaMA-Factory's ``train_on_prompt=false``), for templates without ``{% generation %}``.

The reader hands each conversation over as canonical JSON text (:func:`conversation`), so it
travels through the same chunks, shards and workers as plain text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cfgcheck.data.report import NoChatTemplateError, ScanError
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.run import RunConfig

ROLES_KEY, CONTENT_KEY = "role", "content"


def conversation(value: Any, data: DataConfig | None = None) -> str:
    """A conversation as JSON text of ``{role, content}`` messages (read through ``data``'s
    message keys and roles); ValueError (one line) when it is not a list of such messages."""
    if not isinstance(value, list):
        raise ValueError(f"expected a list of messages, got {type(value).__name__}")
    role, content = ROLES_KEY, CONTENT_KEY
    roles: dict[str, str] = {}
    if data is not None:
        role, content, roles = data.message_role_key, data.message_content_key, data.message_roles
    if (role, content) == (ROLES_KEY, CONTENT_KEY) and not roles:
        for i, m in enumerate(value):
            if not isinstance(m, dict) or not isinstance(m.get(ROLES_KEY), str):
                raise ValueError(f"message {i} is not a {{role, content}} object")
        return json.dumps(value, ensure_ascii=False)
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get(role), str):
            raise ValueError(f"message {i} is not a {{{role}, {content}}} object")
        # Other keys (tool_calls, name) stay, as Axolotl keeps the template's own variables.
        rest = {k: v for k, v in m.items() if k not in (role, content, ROLES_KEY, CONTENT_KEY)}
        out.append({ROLES_KEY: roles.get(m[role], m[role]), CONTENT_KEY: m.get(content), **rest})
    return json.dumps(out, ensure_ascii=False)


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
        d = self.run.data
        self.masks = d.assistant_only_loss
        self.turns = d.assistant_only_loss and d.assistant_mask == "turns"
        check_template(self.tok, self.run, f"data.messages_field={d.messages_field}")

    def encode(self, texts: list[str]) -> tuple[list[list[int]], list[list[int]] | None]:
        """Ids of each conversation, and with assistant_only_loss its assistant mask."""
        conversations = [json.loads(t) for t in texts]
        if self.turns:
            ids, _ = template_ids(self.tok, conversations)
            return ids, [
                turn_mask(self.tok, c, len(x)) for c, x in zip(conversations, ids, strict=True)
            ]
        return template_ids(self.tok, conversations, masks=self.masks)


def turn_mask(tok: Any, messages: list[dict[str, Any]], length: int) -> list[int]:
    """1 on each assistant message's tokens: from the length of the conversation before it
    rendered with the generation prompt to the length of the conversation up to it."""
    mask = [0] * length
    for i, m in enumerate(messages):
        if m.get(ROLES_KEY) != "assistant":
            continue
        before = first_ids(tok, messages[:i], generation_prompt=True) if i else []
        upto = first_ids(tok, messages[: i + 1])
        for k in range(min(len(before), length), min(len(upto), length)):
            mask[k] = 1
    return mask


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


def first_ids(
    tok: Any, messages: list[dict[str, Any]], *, generation_prompt: bool = False
) -> list[int]:
    """The ids of one conversation through the chat template."""
    ids, _ = template_ids(tok, [messages], generation_prompt=generation_prompt)
    return ids[0]


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
        if run.data.assistant_mask == "turns":
            raise NoChatTemplateError(
                f"{what} is rendered with the tokenizer's chat template, and the tokenizer at "
                f"{path} has none (LLaMA-Factory's template and Axolotl's named chat templates "
                "are not modelled)"
            )
        raise ScanError(
            f"{what} needs a chat template, and the tokenizer at {path} has none "
            "(tokenizer_config.json chat_template or chat_template.jinja); TRL's SFTTrainer "
            "fails on it too"
        )
    d = run.data
    if (
        d.assistant_only_loss
        and d.assistant_mask == "generation"
        and not has_generation_markers(template)
    ):
        raise ScanError(
            "data.assistant_only_loss=true needs a chat template that marks the "
            "assistant's text with {% generation %} ... {% endgeneration %}; the template "
            f"of {path} has none, so no token would be a label (TRL swaps in a training "
            "template only for the models it knows: trl/chat_template_utils.py "
            "get_training_chat_template); data.assistant_mask=turns counts each assistant "
            "message's tokens instead, as Axolotl and LLaMA-Factory do"
        )


def render_error(e: Exception) -> ScanError:
    """A template's failure to render (jinja2 errors, raise_exception, bad roles) as one line."""
    first = " ".join(str(e).split()) or type(e).__name__
    return ScanError(f"the chat template cannot render a conversation: {first}")
