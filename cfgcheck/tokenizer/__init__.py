"""What cfgcheck knows about the run's tokenizer."""

from cfgcheck.tokenizer.facts import Conflict, TokenizerFacts, tokenizer_facts
from cfgcheck.tokenizer.resolve import ResolvedTokenizer, TokenizerFileError, resolve_tokenizer

__all__ = [
    "Conflict",
    "ResolvedTokenizer",
    "TokenizerFacts",
    "TokenizerFileError",
    "resolve_tokenizer",
    "tokenizer_facts",
]
