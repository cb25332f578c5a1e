"""The transformers fallback: ``AutoTokenizer`` offline, never with remote code.

Used only where the ``tokenizers`` fast path cannot answer (a SentencePiece ``tokenizer.model``
without a ``tokenizer.json``). transformers is imported here, lazily.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from cfgcheck.tokenizer.resolve import TokenizerFileError


def load_auto_tokenizer(path: Path) -> Any:
    """``AutoTokenizer.from_pretrained`` on a tokenizer folder, a ``tokenizer.json`` or a
    ``tokenizer.model`` (a file named otherwise is copied into a temporary folder as
    ``tokenizer.model``). Offline (``local_files_only``, ``HF_HUB_OFFLINE``), no remote code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise TokenizerFileError(
            f"reading {path} needs transformers and sentencepiece: install cfgcheck[transformers]"
        ) from e
    if path.is_dir():
        return _load(AutoTokenizer, path, path)
    if path.name in ("tokenizer.model", "tokenizer.json"):
        return _load(AutoTokenizer, path.parent, path)
    with tempfile.TemporaryDirectory(prefix="cfgcheck-tok-") as tmp:
        shutil.copyfile(path, Path(tmp) / "tokenizer.model")
        return _load(AutoTokenizer, Path(tmp), path)


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
