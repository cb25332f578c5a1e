"""Resolve ``tokenizer.path`` to the real tokenizer: its ``len()`` and special tokens.

Fast path: a ``tokenizer.json`` (a lone file, or a folder holding one and the transformers side
files ``tokenizer_config.json`` / ``special_tokens_map.json`` / ``added_tokens.json``) is read
with the ``tokenizers`` library only, emulating what transformers' ``from_pretrained`` does with
the side files: special tokens missing from the vocabulary are added, so ``len(tokenizer)``
grows. Fallback: a SentencePiece ``tokenizer.model``, or a folder whose ``tokenizer_class``
adds tokens of its own on load (not in :data:`FAST_PATH_CLASSES`, e.g. BERT or Gemma), is
loaded with transformers' ``AutoTokenizer``, offline and without remote code (see
:mod:`cfgcheck.tokenizer.hf`).

Results are cached by resolved path and modification time, so every rule that asks reads the
files once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

SPECIAL_NAMES: tuple[str, ...] = ("pad", "eos", "bos", "unk")
# tokenizer_config.json classes whose loading the fast path reproduces exactly (checked against
# transformers in tests/test_tokenizer_resolve.py). Other classes add tokens of their own on
# load, so transformers answers for them when it is installed.
FAST_PATH_CLASSES: frozenset[str | None] = frozenset(
    {
        None,
        "PreTrainedTokenizerFast",
        "TokenizersBackend",
        "LlamaTokenizer",
        "LlamaTokenizerFast",
        "GPT2Tokenizer",
        "GPT2TokenizerFast",
        "Qwen2Tokenizer",
        "Qwen2TokenizerFast",
        "CodeGenTokenizer",
        "CodeGenTokenizerFast",
    }
)
SIDE_FILES: tuple[str, ...] = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)


class TokenizerFileError(ValueError):
    """The tokenizer path is missing, unreadable or malformed."""


@dataclass(frozen=True)
class SpecialToken:
    token: str
    id: int | None
    source: str  # the file the token string came from


@dataclass(frozen=True)
class ResolvedTokenizer:
    """What the tokenizer files say. ``size`` is ``len(tokenizer)`` in transformers."""

    path: Path
    size: int
    base_size: int
    added: tuple[str, ...]  # tokens beyond the base vocabulary, in id order
    max_id: int
    specials: Mapping[str, SpecialToken]
    size_source: str  # e.g. "tok/ tokenizer.json + 1 added token"
    backend: str  # "tokenizers" or "transformers"
    vocab: Mapping[str, int] = field(repr=False, default_factory=dict)

    def token_id(self, token: str) -> int | None:
        return self.vocab.get(token)


def resolve_path(path: str | Path) -> Path:
    """``path`` made absolute against the current working directory."""
    return (Path.cwd() / Path(path).expanduser()).resolve()


def _stamp(p: Path) -> tuple[int, ...]:
    """Modification times of the files resolution reads (the cache key)."""
    files = (
        [p] if p.is_file() else [p / n for n in ("tokenizer.json", "tokenizer.model", *SIDE_FILES)]
    )
    return tuple(f.stat().st_mtime_ns if f.exists() else -1 for f in files)


def resolve_tokenizer(path: str | Path) -> ResolvedTokenizer:
    """Resolve a tokenizer path. Raises :class:`TokenizerFileError` with a one-line reason."""
    from cfgcheck.safeio import path_problem, shown

    try:
        p = resolve_path(path)
    except (OSError, RuntimeError, ValueError) as e:  # a symlink loop, ~nosuchuser, NUL
        raise TokenizerFileError(f"{shown(path)} cannot be resolved: {e}") from e
    reason = path_problem(p, allow_dir=True)  # a FIFO or device is never opened
    if reason:
        raise TokenizerFileError(f"{shown(path)} {reason} (resolved to {shown(p)})")
    try:
        stamp = _stamp(p)
    except OSError as e:
        raise TokenizerFileError(f"cannot read {p}: {e.strerror or e}") from e
    return _resolve_cached(p, stamp)


@lru_cache(maxsize=32)
def _resolve_cached(p: Path, stamp: tuple[int, ...]) -> ResolvedTokenizer:
    del stamp  # part of the cache key only
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            cls = _tokenizer_class(p)
            if cls not in FAST_PATH_CLASSES:
                if _has_transformers():
                    return _from_transformers(p / "tokenizer.json", p)
                fast = _from_tokenizer_json(p / "tokenizer.json", folder=p)
                note = f"; {cls} may add tokens on load: install cfgcheck[transformers]"
                return replace(fast, size_source=fast.size_source + note)
            return _from_tokenizer_json(p / "tokenizer.json", folder=p)
        if (p / "tokenizer.model").is_file():
            return _from_transformers(p / "tokenizer.model", p)
        raise TokenizerFileError(f"{p} holds neither a tokenizer.json nor a tokenizer.model")
    if p.suffix == ".model":
        return _from_transformers(p, p.parent if p.name == "tokenizer.model" else None)
    return _from_tokenizer_json(p, folder=None)


def _read_json(path: Path) -> dict[str, Any]:
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import Limits, cap, decode, load_json_text, read_capped, shown

    try:  # bounded: size (the "tokenizer" cap) and special files (cfgcheck.safeio)
        text = decode(read_capped(path, "tokenizer"), shown(path))
    except ConfigLoadError as e:
        raise TokenizerFileError(str(e)) from e
    try:  # bounded nesting; NaN and huge ints refused
        limits = Limits(max_bytes=cap("tokenizer"), max_nodes=10_000_000, max_keys=10_000_000)
        data = load_json_text(text, "it", limits)
    except ConfigLoadError as e:
        raise TokenizerFileError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise TokenizerFileError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def token_text(value: Any) -> str | None:
    """A special token's string from a plain string or an AddedToken dict form."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def load_tokenizers(path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` from a ``tokenizer.json``, with a one-line error. The file
    is read by :mod:`cfgcheck.safeio` (the "tokenizer" size cap, regular files only) and its
    text handed to ``Tokenizer.from_str``: the library never opens a path itself, so a sparse
    2.5 GB file or a FIFO named ``tokenizer.json`` is refused before it is read."""
    from tokenizers import Tokenizer

    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import decode, read_capped, shown

    try:
        text = decode(read_capped(path, "tokenizer"), shown(path))
    except ConfigLoadError as e:
        raise TokenizerFileError(str(e)) from e
    try:
        return Tokenizer.from_str(text)
    except Exception as e:  # the Rust side raises a plain Exception on malformed files
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TokenizerFileError(f"{path} is not a valid tokenizer.json: {first}") from e


def _from_tokenizer_json(path: Path, folder: Path | None) -> ResolvedTokenizer:
    tk = load_tokenizers(path)
    vocab: dict[str, int] = dict(tk.get_vocab(with_added_tokens=True))
    base_size = int(tk.get_vocab_size(with_added_tokens=False))
    specials: dict[str, SpecialToken] = {}
    extra: list[str] = []  # tokens transformers adds on load
    if folder is not None:
        specials, extra = _side_files(folder)
    section = _padding_section_pad(tk)
    if "pad" not in specials and section is not None:
        specials["pad"] = SpecialToken(section, None, f"{path.name} padding section")
    next_id = max(vocab.values(), default=-1) + 1  # kept, not recomputed: 40k added tokens
    for token in [*(s.token for s in specials.values()), *extra]:  # stay linear
        if token not in vocab:
            vocab[token] = next_id
            next_id += 1
    resolved = {
        name: SpecialToken(s.token, vocab.get(s.token), s.source) for name, s in specials.items()
    }
    return _build(path, folder, vocab, base_size, resolved, backend="tokenizers")


def _padding_section_pad(tk: Any) -> str | None:
    """The pad token of tokenizer.json's ``"padding"`` section. transformers'
    ``TokenizersBackend.__init__`` (``tokenization_utils_tokenizers.py``: ``_padding = ...
    self._tokenizer.padding``, then ``kwargs.setdefault("pad_token", _padding["pad_token"])``)
    makes it the pad token unless tokenizer_config.json names one; a string missing from the
    vocabulary is added like any other special token."""
    padding = tk.padding
    if not isinstance(padding, Mapping):
        return None
    return token_text(padding.get("pad_token"))


def _build(
    path: Path,
    folder: Path | None,
    vocab: dict[str, int],
    base_size: int,
    specials: Mapping[str, SpecialToken],
    backend: str,
) -> ResolvedTokenizer:
    size = len(set(vocab.values()))
    added = tuple(t for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i >= base_size)
    where = f"{folder.name}/ {path.name}" if folder is not None else str(path)
    if added:
        shown = ", ".join(added[:3]) + (", ..." if len(added) > 3 else "")
        plural = "s" if len(added) > 1 else ""
        where += f" + {len(added)} added token{plural}: {shown}"
    return ResolvedTokenizer(
        path=folder if folder is not None else path,
        size=size,
        base_size=base_size,
        added=added,
        max_id=max(vocab.values(), default=-1),
        specials=specials,
        size_source=where,
        backend=backend,
        vocab=vocab,
    )


def _side_files(folder: Path) -> tuple[dict[str, SpecialToken], list[str]]:
    """Special tokens and added tokens from the transformers side files, as transformers 5
    merges them: tokenizer_config.json first; special_tokens_map.json and added_tokens.json
    only when tokenizer_config.json has no ``added_tokens_decoder`` (the legacy layout)."""
    specials: dict[str, SpecialToken] = {}
    extra: list[str] = []
    cfg_path = folder / "tokenizer_config.json"
    cfg = _read_json(cfg_path) if cfg_path.is_file() else {}
    sources: list[tuple[Path, dict[str, Any]]] = [(cfg_path, cfg)]
    decoder = cfg.get("added_tokens_decoder")
    if isinstance(decoder, Mapping):
        extra += [t for t in (token_text(v) for v in decoder.values()) if t is not None]
    else:
        map_path = folder / "special_tokens_map.json"
        if map_path.is_file():
            sources.append((map_path, _read_json(map_path)))
        added_path = folder / "added_tokens.json"
        if added_path.is_file():
            extra += [str(t) for t in _read_json(added_path)]
    for src, data in sources:
        for name in SPECIAL_NAMES:
            token = token_text(data.get(f"{name}_token"))
            if token is not None:
                specials[name] = SpecialToken(token, None, f"{folder.name}/{src.name}")
        for key in ("additional_special_tokens", "extra_special_tokens"):
            values = data.get(key)
            if isinstance(values, list):
                extra += [t for t in (token_text(v) for v in values) if t is not None]
    return specials, extra


def _tokenizer_class(folder: Path) -> str | None:
    path = folder / "tokenizer_config.json"
    cls = _read_json(path).get("tokenizer_class") if path.is_file() else None
    return cls if isinstance(cls, str) else None


def _has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def _from_transformers(path: Path, folder: Path | None) -> ResolvedTokenizer:
    """Ask transformers (the fallback): a SentencePiece model, or a tokenizer class that adds
    tokens of its own on load (BERT's [MASK], Gemma's defaults, ...)."""
    from cfgcheck.tokenizer.hf import load_auto_tokenizer

    hf = load_auto_tokenizer(folder if folder is not None else path)
    vocab = {str(k): int(v) for k, v in hf.get_vocab().items()}
    specials: dict[str, SpecialToken] = {}
    where = f"{path.parent.name}/{path.name} via transformers {type(hf).__name__}"
    for name in SPECIAL_NAMES:
        token = getattr(hf, f"{name}_token", None)
        if token is not None:
            token_id = getattr(hf, f"{name}_token_id", None)
            specials[name] = SpecialToken(str(token), token_id, where)
    return _build(path, folder, vocab, int(hf.vocab_size), specials, backend="transformers")
