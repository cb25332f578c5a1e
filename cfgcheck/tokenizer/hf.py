"""The transformers fallback: ``AutoTokenizer`` offline, never with remote code.

Used only where the ``tokenizers`` fast path cannot answer (a SentencePiece ``tokenizer.model``
without a ``tokenizer.json``). transformers is imported here, lazily.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from cfgcheck.tokenizer.resolve import TokenizerFileError


def load_auto_tokenizer(path: Path) -> Any:
    """``AutoTokenizer.from_pretrained`` on a tokenizer folder, a ``tokenizer.json`` or a
    ``tokenizer.model`` (a file named otherwise is read as ``tokenizer.model``). Offline
    (``local_files_only``, ``HF_HUB_OFFLINE``), no remote code.

    transformers never opens the user's files: the tokenizer files of the folder are read by
    :mod:`cfgcheck.safeio` (size caps per kind, regular files only: a sparse 2.5 GB
    ``tokenizer.model`` or a FIFO beside it is refused) into a private temporary folder, and
    that folder is what transformers loads."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with tempfile.TemporaryDirectory(prefix="cfgcheck-tok-") as tmp:
        if path.is_dir():  # copied (capped) before transformers is even imported
            _copy_tokenizer_files(path, Path(tmp))
        elif path.name in ("tokenizer.model", "tokenizer.json"):
            _copy_tokenizer_files(path.parent, Path(tmp))
        else:
            _copy(path, Path(tmp) / "tokenizer.model")
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise TokenizerFileError(
                f"reading {path} needs transformers and sentencepiece: install "
                "cfgcheck[transformers]"
            ) from e
        return _load(AutoTokenizer, Path(tmp), path)


# The files of a tokenizer folder transformers may read (tokenization_utils_base.py's
# ``vocab_files_names`` of every tokenizer class, the side files, chat templates); weights and
# anything else in a model folder are never read.
_TEXT_SUFFIXES = (".json", ".txt", ".jinja")
_BINARY_SUFFIXES = (".model", ".tiktoken", ".spm")
_MAX_ENTRIES = 1000


def _copy_tokenizer_files(folder: Path, into: Path) -> None:
    try:
        with os.scandir(folder) as it:
            entries = [e for _, e in zip(range(_MAX_ENTRIES + 1), it, strict=False)]
    except OSError as e:
        raise TokenizerFileError(f"cannot read {folder}: {e.strerror or e}") from e
    if len(entries) > _MAX_ENTRIES:
        raise TokenizerFileError(f"{folder} holds more than {_MAX_ENTRIES} entries")
    for entry in entries:
        if entry.name.endswith(_TEXT_SUFFIXES + _BINARY_SUFFIXES) and not entry.name.startswith(
            "."
        ):
            _copy(Path(entry.path), into / entry.name)


def _copy(source: Path, target: Path) -> None:
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import read_capped

    kind = (
        "sentencepiece"
        if source.suffix in _BINARY_SUFFIXES or target.suffix == ".model"
        else "tokenizer"
    )
    try:
        target.write_bytes(read_capped(source, kind))
    except ConfigLoadError as e:
        raise TokenizerFileError(str(e)) from e


def _load(auto: Any, folder: Path, shown: Path) -> Any:
    try:
        return auto.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except ImportError as e:
        raise TokenizerFileError(
            f"reading {shown} needs {e}: install cfgcheck[transformers]".replace("\n", " ")
        ) from e
    except Exception as e:  # transformers raises many types on a malformed file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TokenizerFileError(f"transformers cannot load {shown}: {first}") from e


def backend_tokenizer(path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` for ``path``: read directly from a ``tokenizer.json``, or
    converted by transformers from a SentencePiece ``tokenizer.model``."""
    from cfgcheck.tokenizer.resolve import load_tokenizers

    if path.is_dir() and (path / "tokenizer.json").is_file():
        return load_tokenizers(path / "tokenizer.json")
    if path.is_file() and path.suffix != ".model":
        return load_tokenizers(path)
    hf = load_auto_tokenizer(path)
    backend = getattr(hf, "_tokenizer", None)
    if backend is None:
        raise TokenizerFileError(f"transformers has no fast tokenizer for {path}")
    return backend
