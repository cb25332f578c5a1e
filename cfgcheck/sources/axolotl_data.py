"""The first ``datasets`` entry of an Axolotl SFT config, for ``--scan-data``, when it is a
``type: chat_template`` dataset (ShareGPT or OpenAI messages; other types are not mapped).

Axolotl loads ``path`` as a local file or folder when one exists, else as a Hub dataset
(src/axolotl/utils/data/shared.py ``load_dataset_with_config``, with ``name`` and ``split``,
default ``train``); :func:`cfgcheck.sources.trl_data.dataset_files` maps it the same way.
The messages are read as ``ChatTemplateStrategy`` reads them
(src/axolotl/prompt_strategies/chat_template.py, axolotl commit 067b021):
``field_messages`` (default ``messages``), ``message_property_mappings`` (default
``{role: role, content: content}``), ``roles`` (target role -> dataset roles; default
``human``/``user`` -> ``user``, ``gpt``/``assistant`` -> ``assistant``, ``system``, ``tool``),
and labels on ``roles_to_train`` (default ``[assistant]``) unless ``train_on_inputs``: the
assistant's turns (``data.assistant_mask: turns``). The scan renders with the tokenizer's
chat template, which is Axolotl's with ``chat_template: tokenizer_default``; a named template
(``chat_template: llama3``) renders a little differently.
"""

from __future__ import annotations

from typing import Any

from cfgcheck.sources.base import Builder
from cfgcheck.sources.trl_data import dataset_files

# ChatTemplatePrompter.__init__'s default roles (dataset role -> template role)
DEFAULT_ROLES = {
    "human": "user",
    "user": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "system": "system",
    "tool": "tool",
}


def apply(b: Builder) -> None:
    n = b.native
    entries = n.get("datasets")
    if n.origin is None or n.get("rl") or not isinstance(entries, list) or not entries:
        return
    entry = entries[0]
    if not isinstance(entry, dict) or entry.get("type") != "chat_template":
        return
    path = entry.get("path")
    if not isinstance(path, str) or not path.strip():
        return
    raw = entry.get("split")
    split = raw if isinstance(raw, str) else "train"
    if dataset_files(b, "datasets", path, split):
        name = entry.get("name")
        if isinstance(name, str) and name:
            b.from_key("data.hub_config", "datasets", name)
        b.from_key("data.hub_split", "datasets", split)
    if "paths" not in b.config.get("data", {}) and "hub_dataset" not in b.config.get("data", {}):
        return
    _messages(b, entry)


def _messages(b: Builder, entry: dict[str, Any]) -> None:
    b.from_key("data.messages_field", "datasets", str(entry.get("field_messages") or "messages"))
    mappings = entry.get("message_property_mappings")
    mappings = mappings if isinstance(mappings, dict) and mappings else {}
    b.from_key("data.message_role_key", "datasets", str(mappings.get("role", "role")))
    b.from_key("data.message_content_key", "datasets", str(mappings.get("content", "content")))
    roles = entry.get("roles")
    if isinstance(roles, dict) and roles:
        mapped = {
            str(source): str(target)
            for target, sources in roles.items()
            for source in (sources if isinstance(sources, list) else [sources])
        }
    else:
        mapped = dict(DEFAULT_ROLES)
    b.from_key("data.message_roles", "datasets", mapped)
    trained = entry.get("roles_to_train", ["assistant"])
    if not b.native.get("train_on_inputs") and trained in (["assistant"], ["gpt"]):
        b.from_key("data.assistant_only_loss", "datasets", True)
        b.from_key("data.assistant_mask", "datasets", "turns")
