"""Errors of the runtime helpers. All are ``ValueError`` subclasses, like the rest of cfgcheck."""

from __future__ import annotations


class RuntimeSetupError(ValueError):
    """The training script's runtime objects do not fit the validated config."""


class PadTokenMissingError(RuntimeSetupError):
    """Padding is needed but no pad token id is known (not in the config, not passed)."""


class SequenceTooLongError(RuntimeSetupError):
    """A sample is longer than ``data.max_seq_length`` while ``data.truncation`` is false."""


class TokenizerMismatchError(RuntimeSetupError):
    """The tokenizer object given at runtime disagrees with the tokenizer the config declares."""
