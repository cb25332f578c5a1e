"""The ``data`` section: sequence length, padding, truncation, collation, datasets."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from cfgcheck.schema._base import Section
from cfgcheck.schema.bounds import Tokens
from cfgcheck.schema.template import template_problem

Padding = Literal["max_length", "longest", "do_not_pad"]
Collator = Literal["default", "padded", "packed"]


class DataConfig(Section):
    max_seq_length: Tokens = Field(description="Longest sequence fed to the model.")
    padding: Padding = Field(
        "longest",
        description="Tokenizer padding: 'max_length' pads every sample to max_length; "
        "'longest' (padding=True) pads to the longest sample of a tokenizer call only.",
    )
    truncation: bool = Field(True, description="Tokenizer truncation to max_length.")
    max_length: Tokens | None = Field(
        None, description="Tokenizer max_length. Defaults to max_seq_length."
    )
    pad_to_multiple_of: Tokens | None = Field(
        None, description="Round padded lengths up to a multiple of this."
    )
    collator: Collator = Field(
        "padded",
        description="'default' is torch's default_collate (needs equal lengths); 'padded' "
        "pads each batch to its longest sample; 'packed' concatenates samples.",
    )
    ignore_index: int = Field(-100, description="Label value the loss ignores.")
    paths: list[str] = Field(default_factory=list, description="Training data files.")
    hub_dataset: str | None = Field(
        None,
        description="A Hugging Face Hub dataset id the run loads (TRL's dataset_name), scanned "
        "when paths is empty from the local Hugging Face caches only (HF_HUB_CACHE, "
        "HF_DATASETS_CACHE), never downloaded.",
    )
    hub_config: str | None = Field(
        None, description="The hub_dataset's configuration (TRL's dataset_config)."
    )
    hub_split: str = Field(
        "train", description="The hub_dataset's split (TRL's dataset_train_split)."
    )
    format: Literal["auto", "jsonl", "text", "parquet", "arrow"] = Field(
        "auto",
        description="Dataset file format; 'auto' picks it by file extension (.jsonl/.json, "
        ".parquet, .arrow/.feather, else text; a folder saved by datasets' save_to_disk is "
        "read as its Arrow files).",
    )
    text_field: str = Field("text", description="JSONL/Parquet field holding the text.")
    template: str | None = Field(
        None,
        description="Python format string over a record's fields, e.g. "
        "'{instruction}\\n{input}\\n{output}'. Overrides text_field.",
    )
    messages_field: str | None = Field(
        None,
        description="Field holding a conversation (a list of {role, content} messages), "
        "rendered and tokenized with the tokenizer's chat template as TRL's SFTTrainer does "
        "(apply_chat_template). Overrides text_field and template.",
    )
    message_role_key: str = Field(
        "role",
        description="Key of a message's role in messages_field ('from' in ShareGPT data).",
    )
    message_content_key: str = Field(
        "content",
        description="Key of a message's text in messages_field ('value' in ShareGPT data).",
    )
    message_roles: dict[str, str] = Field(
        default_factory=dict,
        description="A message's role as the chat template reads it, by the dataset's role, "
        "e.g. {human: user, gpt: assistant} for ShareGPT (Axolotl's roles, LLaMA-Factory's "
        "tags); a role not listed is kept.",
    )
    assistant_mask: Literal["generation", "turns"] = Field(
        "generation",
        description="How assistant_only_loss finds the assistant's tokens: 'generation', the "
        "template's {% generation %} marks (TRL); 'turns', each assistant message's tokens "
        "between the rendered conversation before it (with the generation prompt) and after "
        "it (Axolotl's roles_to_train, LLaMA-Factory's train_on_prompt=false).",
    )
    assistant_only_loss: bool = Field(
        False,
        description="Only the assistant's tokens are labels (TRL's SFTConfig.assistant_only_loss; "
        "the chat template marks them with {% generation %}). Needs a conversational dataset "
        "(messages_field, or prompt_field holding messages).",
    )
    add_eos: bool = Field(
        False,
        description="Append the tokenizer's eos_token to each text (text_field / template) "
        "that does not end with it, as TRL's SFTTrainer does (add_eos). Prompt-completion "
        "text completions always get it, as in TRL.",
    )
    prompt_field: str | None = Field(
        None,
        description="Field holding the prompt of a prompt-completion dataset (TRL's format): "
        "a string, or a list of {role, content} messages rendered with the chat template; "
        "the completion is in completion_field. Overrides text_field and template.",
    )
    completion_field: str = Field(
        "completion", description="Field holding the completion (with prompt_field)."
    )
    completion_only_loss: bool | None = Field(
        None,
        description="Only the completion's tokens are labels (TRL's "
        "SFTConfig.completion_only_loss). Unset: true with prompt_field, as in TRL.",
    )

    @field_validator("template")
    @classmethod
    def _renderable(cls, template: str | None) -> str | None:
        """A template is read before it renders (huge padding, private attributes, nested
        fields are refused): :mod:`cfgcheck.schema.template`."""
        problem = None if template is None else template_problem(template)
        if problem:
            raise ValueError(f"the template {problem}")
        return template

    @model_validator(mode="after")
    def _assistant_needs_chat(self) -> DataConfig:
        """TRL refuses assistant_only_loss on a dataset that is not conversational
        (trl/trainer/sft_trainer.py, SFTTrainer.__init__, TRL 1.16)."""
        if self.assistant_only_loss and self.messages_field is None and self.prompt_field is None:
            raise ValueError(
                "assistant_only_loss needs a conversational dataset: set messages_field "
                "(e.g. messages) or prompt_field, or assistant_only_loss=false"
            )
        if self.messages_field is not None and self.prompt_field is not None:
            raise ValueError(
                "set one of messages_field (conversations) and prompt_field (prompt-completion)"
            )
        return self

    @property
    def masks_completion(self) -> bool:
        """The prompt's tokens are not labels: ``completion_only_loss``, by default true for a
        prompt-completion dataset (trl/trainer/sft_trainer.py:961-964, TRL 1.16)."""
        if self.prompt_field is None:
            return False
        return self.completion_only_loss is not False

    @property
    def effective_max_length(self) -> int:
        """The tokenizer call's ``max_length``: ``max_length`` or else ``max_seq_length``."""
        return self.max_length if self.max_length is not None else self.max_seq_length
