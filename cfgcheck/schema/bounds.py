"""Physical bounds on every size a run config states.

A size the schema accepts drives real work: the memory estimate, the per-layer terms, the
data scan, a sweep point. An int64 ``n_layer`` is legal to a parser and would keep any of
them busy for ever, so every size is bounded here, once, by what real models and runs have
with a wide margin (x8 or more over the largest published value). A value past its bound is
an ``invalid-value`` finding that names the bound and the largest real value, so a typo reads
as a typo.

Largest published values (config.json of each model):

- layers: Llama-3.1-405B, 126;
- hidden size: Llama-3.1-405B, 16,384;
- attention heads: Llama-3.1-405B, 128;
- head size: Gemma 2 / 3, 256;
- MLP width: Llama-3.1-405B, 53,248;
- vocabulary: Gemma 3, 262,208 embedding rows;
- context: Llama 4 Scout, 10,485,760 tokens;
- experts: Kimi K2, 384 routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class Bound:
    """The largest accepted value of one kind of size, and the real value it was sized from."""

    what: str
    maximum: int
    largest_real: str

    def check(self, value: int) -> int:
        if value > self.maximum:
            raise PydanticCustomError(
                "size_bound",
                f"at most {self.maximum:,} {self.what} are accepted (the largest real value: "
                f"{self.largest_real}); this is not a real model or run",
                {"maximum": self.maximum},
            )
        return value

    def schema(self) -> dict[str, Any]:
        return {"maximum": self.maximum}


LAYERS = Bound("layers", 1_024, "Llama-3.1-405B, 126")
WIDTH = Bound("hidden units", 131_072, "Llama-3.1-405B, 16,384")
HEADS = Bound("heads", 4_096, "Llama-3.1-405B, 128 query heads")
HEAD_SIZE = Bound("dimensions per head", 8_192, "Gemma 2 and 3, 256")
MLP_WIDTH = Bound("MLP units", 1_048_576, "Llama-3.1-405B, 53,248")
VOCAB = Bound("vocabulary rows", 16_777_216, "Gemma 3, 262,208")
TOKENS = Bound("tokens of context", 134_217_728, "Llama 4 Scout, 10,485,760")
EXPERTS = Bound("experts", 8_192, "Kimi K2, 384 routed experts")
BATCH = Bound("samples per batch", 1_048_576, "pretraining runs, a few thousand a step")
STEPS = Bound("accumulation steps", 1_048_576, "a few thousand")
DEVICES = Bound("devices", 1_048_576, "clusters of some 100,000 GPUs")
TOKEN_ID = Bound("token ids", VOCAB.maximum, "Gemma 3, 262,207")


# Bounded ints: ``n_layer: Layers = Field(description=...)``. Positive sizes; token ids from 0.
Layers = Annotated[
    int, Field(gt=0, json_schema_extra=LAYERS.schema()), AfterValidator(LAYERS.check)
]
Width = Annotated[int, Field(gt=0, json_schema_extra=WIDTH.schema()), AfterValidator(WIDTH.check)]
Heads = Annotated[int, Field(gt=0, json_schema_extra=HEADS.schema()), AfterValidator(HEADS.check)]
HeadSize = Annotated[
    int, Field(gt=0, json_schema_extra=HEAD_SIZE.schema()), AfterValidator(HEAD_SIZE.check)
]
MlpWidth = Annotated[
    int, Field(gt=0, json_schema_extra=MLP_WIDTH.schema()), AfterValidator(MLP_WIDTH.check)
]
Vocab = Annotated[int, Field(gt=0, json_schema_extra=VOCAB.schema()), AfterValidator(VOCAB.check)]
Tokens = Annotated[
    int, Field(gt=0, json_schema_extra=TOKENS.schema()), AfterValidator(TOKENS.check)
]
Experts = Annotated[
    int, Field(gt=0, json_schema_extra=EXPERTS.schema()), AfterValidator(EXPERTS.check)
]
Batch = Annotated[int, Field(gt=0, json_schema_extra=BATCH.schema()), AfterValidator(BATCH.check)]
Steps = Annotated[int, Field(gt=0, json_schema_extra=STEPS.schema()), AfterValidator(STEPS.check)]
Devices = Annotated[
    int, Field(gt=0, json_schema_extra=DEVICES.schema()), AfterValidator(DEVICES.check)
]
TokenId = Annotated[
    int, Field(ge=0, json_schema_extra=TOKEN_ID.schema()), AfterValidator(TOKEN_ID.check)
]
