"""Runtime helpers: what a training script needs, taken from the validated config.

::

    result = cfgcheck.check("conf", "config", overrides)
    tokenizer = configure_tokenizer(tokenizer, result)          # padding side, pad token
    enc = tokenizer(texts, **tokenizer_kwargs(result))           # padding, truncation, ...
    loader = DataLoader(ds, batch_size=run.trainer.micro_batch_size,
                        collate_fn=make_collate_fn(result))

Importing this package does not import torch; building a collate function does (install
``cfgcheck[torch]``).
"""

from cfgcheck.runtime.collate import (
    PackedCollator,
    PaddedCollator,
    make_collate_fn,
    resolve_pad_token_id,
)
from cfgcheck.runtime.errors import (
    PadTokenMissingError,
    RuntimeSetupError,
    SequenceTooLongError,
    TokenizerMismatchError,
)
from cfgcheck.runtime.tokenizer_kwargs import (
    TokenizerKwargs,
    configure_tokenizer,
    padding_side,
    tokenizer_kwargs,
)

__all__ = [
    "PackedCollator",
    "PadTokenMissingError",
    "PaddedCollator",
    "RuntimeSetupError",
    "SequenceTooLongError",
    "TokenizerKwargs",
    "TokenizerMismatchError",
    "configure_tokenizer",
    "make_collate_fn",
    "padding_side",
    "resolve_pad_token_id",
    "tokenizer_kwargs",
]
