"""What cfgcheck knows about the run's tokenizer."""

from cfgcheck.tokenizer.facts import TokenizerFacts, tokenizer_facts

__all__ = ["TokenizerFacts", "tokenizer_facts"]
