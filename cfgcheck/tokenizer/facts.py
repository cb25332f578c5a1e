"""Tokenizer facts the rules need: size and special-token ids, with where each came from.

Without ``tokenizer.path`` the declared values of the ``tokenizer`` section are used as given.
With it, the real tokenizer files are resolved (:mod:`cfgcheck.tokenizer.resolve`): the size
and special-token ids come from the files; a declared special-token *string* is applied as a
training script applies it (``tokenizer.pad_token = "<unk>"``) and its id looked up in the
vocabulary; declared ids and ``vocab_size`` are claims, and each one that disagrees with the
files is recorded as a :class:`Conflict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cfgcheck.schema.tokenizer import TokenizerConfig
from cfgcheck.tokenizer.resolve import (
    SPECIAL_NAMES,
    ResolvedTokenizer,
    TokenizerFileError,
    resolve_tokenizer,
)


@dataclass(frozen=True)
class Conflict:
    """A declared value that disagrees with the resolved tokenizer files."""

    path: str  # the config path of the declared value, e.g. "tokenizer.vocab_size"
    declared: str
    resolved: str
    source: str  # where the resolved value came from
    value: str = "null"  # the value that agrees with the files (for the fix)


@dataclass(frozen=True)
class TokenizerFacts:
    size: int | None
    size_source: str
    pad_token: str | None = None
    pad_token_id: int | None = None
    eos_token: str | None = None
    eos_token_id: int | None = None
    bos_token: str | None = None
    bos_token_id: int | None = None
    unk_token: str | None = None
    unk_token_id: int | None = None
    # Set when tokenizer.path was resolved (None: declared values only).
    path: str | None = None
    # Where each special token came from, by name ("pad" -> "tok/tokenizer_config.json").
    sources: dict[str, str] = field(default_factory=dict)
    conflicts: tuple[Conflict, ...] = ()
    # Declared special-token strings that are not in the resolved vocabulary, by name.
    unknown_tokens: dict[str, str] = field(default_factory=dict)
    # Why tokenizer.path could not be resolved (the declared values are used instead).
    error: str | None = None
    max_id: int | None = None
    # ids from here up are placeholders text never produces (tokenizer.placeholder_tokens_from)
    placeholders_from: int | None = None

    @property
    def has_pad(self) -> bool:
        return self.pad_token is not None or self.pad_token_id is not None

    @property
    def resolved(self) -> bool:
        return self.path is not None and self.error is None

    @property
    def size_path(self) -> str:
        """The config path the size comes from, for findings."""
        return "tokenizer.path" if self.resolved else "tokenizer.vocab_size"

    def token_path(self, name: str) -> str:
        """The config path a special token's id comes from, for findings."""
        if self.resolved and self.sources.get(name, "").startswith("tokenizer."):
            return f"tokenizer.{name}_token"
        return "tokenizer.path" if self.resolved else f"tokenizer.{name}_token_id"

    def special_ids(self) -> dict[str, int]:
        """``{"pad": id, ...}`` for every special token whose id is known."""
        ids = {
            "pad": self.pad_token_id,
            "eos": self.eos_token_id,
            "bos": self.bos_token_id,
            "unk": self.unk_token_id,
        }
        return {name: i for name, i in ids.items() if i is not None}


def declared_facts(tok: TokenizerConfig) -> TokenizerFacts:
    return TokenizerFacts(
        size=tok.vocab_size,
        size_source="declared in tokenizer.vocab_size",
        pad_token=tok.pad_token,
        pad_token_id=tok.pad_token_id,
        eos_token=tok.eos_token,
        eos_token_id=tok.eos_token_id,
        bos_token=tok.bos_token,
        bos_token_id=tok.bos_token_id,
        unk_token=tok.unk_token,
        unk_token_id=tok.unk_token_id,
        placeholders_from=tok.placeholder_tokens_from,
    )


def tokenizer_facts(tok: TokenizerConfig) -> TokenizerFacts:
    """The tokenizer's size and special tokens as far as they are known: from the files at
    ``tokenizer.path`` when set (cached), else as declared."""
    if tok.path is None:
        return declared_facts(tok)
    try:
        real = resolve_tokenizer(tok.path)
    except TokenizerFileError as e:
        return replace(declared_facts(tok), path=tok.path, error=str(e))
    return merge(tok, real)


def merge(tok: TokenizerConfig, real: ResolvedTokenizer) -> TokenizerFacts:
    """Resolved files plus the config's declared values (see the module docstring)."""
    conflicts: list[Conflict] = []
    unknown: dict[str, str] = {}
    sources: dict[str, str] = {}
    values: dict[str, str | int | None] = {}
    file_unk = real.specials.get("unk")
    unk_id = real.token_id(tok.unk_token) if tok.unk_token else None
    if tok.unk_token is None and file_unk is not None:
        unk_id = file_unk.id
    for name in SPECIAL_NAMES:
        declared: str | None = getattr(tok, f"{name}_token")
        declared_id: int | None = getattr(tok, f"{name}_token_id")
        from_file = real.specials.get(name)
        token: str | None
        token_id: int | None
        if declared is not None:
            token, token_id = declared, real.token_id(declared)
            sources[name] = f"tokenizer.{name}_token in the config"
            if from_file is not None and from_file.token != declared:
                sources[name] += f", replacing {from_file.token!r} of {from_file.source}"
            if token_id is None:
                unknown[name] = declared
                token_id = unk_id  # what transformers' convert_tokens_to_ids gives
        elif from_file is not None:
            token, token_id = from_file.token, from_file.id
            sources[name] = from_file.source
        else:
            token, token_id = None, None
        if declared_id is not None:
            if token_id is not None and token_id != declared_id:
                conflicts.append(
                    Conflict(
                        f"tokenizer.{name}_token_id",
                        str(declared_id),
                        f"{token!r} has id {token_id}",
                        sources.get(name, str(real.path)),
                        str(token_id),
                    )
                )
            elif token_id is None and token is None:
                conflicts.append(
                    Conflict(
                        f"tokenizer.{name}_token_id",
                        str(declared_id),
                        f"no {name} token",
                        str(real.path),
                    )
                )
            if token_id is None:
                token_id = declared_id
        values[f"{name}_token"], values[f"{name}_token_id"] = token, token_id
    if tok.vocab_size is not None and tok.vocab_size != real.size:
        conflicts.append(
            Conflict(
                "tokenizer.vocab_size",
                str(tok.vocab_size),
                str(real.size),
                real.size_source,
                str(real.size),
            )
        )
    return TokenizerFacts(
        size=real.size,
        size_source=real.size_source,
        pad_token=_str(values["pad_token"]),
        pad_token_id=_int(values["pad_token_id"]),
        eos_token=_str(values["eos_token"]),
        eos_token_id=_int(values["eos_token_id"]),
        bos_token=_str(values["bos_token"]),
        bos_token_id=_int(values["bos_token_id"]),
        unk_token=_str(values["unk_token"]),
        unk_token_id=_int(values["unk_token_id"]),
        path=tok.path,
        sources=sources,
        conflicts=tuple(conflicts),
        unknown_tokens=unknown,
        max_id=real.max_id,
        placeholders_from=tok.placeholder_tokens_from,
    )


def _str(v: str | int | None) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: str | int | None) -> int | None:
    return v if isinstance(v, int) else None
