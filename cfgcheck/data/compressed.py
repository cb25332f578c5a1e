"""Compressed data shards: gzip (the standard library) and zstd (``zstandard``, in the
``data`` extra), read line by line with the same bounds as plain files.

A truncated zstd stream is not an error to ``zstandard``'s stream reader (it just ends), so
zstd is decoded frame by frame here and a stream that stops inside a frame is reported.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

SUFFIXES = (".gz", ".zst")
READ = 1 << 20


class CorruptStreamError(ValueError):
    """The compressed stream is corrupt or ends early."""


def is_compressed(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES


def strip_suffix(name: str) -> str:
    """``name`` without its compression suffix (``d.jsonl.gz`` -> ``d.jsonl``)."""
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def open_lines(path: Path) -> Any:
    """A decompressing reader with ``readline(limit)``; use as a context manager."""
    if path.suffix.lower() == ".gz":
        return _Gzip(path)
    return _Zstd(path)


class _Gzip:
    def __init__(self, path: Path) -> None:
        self.f = gzip.GzipFile(path, "rb")

    def __enter__(self) -> _Gzip:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.f.close()

    def readline(self, limit: int) -> bytes:
        try:
            return self.f.readline(limit)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise CorruptStreamError(f"the gzip stream is corrupt or truncated: {e}") from e


class _Zstd:
    def __init__(self, path: Path) -> None:
        try:
            import zstandard
        except ImportError as e:
            raise CorruptStreamError(
                f"reading {path.name} needs zstandard: install cfgcheck[data]"
            ) from e
        self.zstd = zstandard
        self.raw: BinaryIO = path.open("rb")
        self.dec = zstandard.ZstdDecompressor().decompressobj()
        self.buf = b""
        self.ended = False

    def __enter__(self) -> _Zstd:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.raw.close()

    def _more(self) -> bool:
        """Decode more input into the buffer; False at the end of the stream."""
        while not self.ended:
            data = self.raw.read(READ)
            if not data:
                self.ended = True
                if not self.dec.eof and self._started:
                    raise CorruptStreamError("the zstd stream is truncated (it ends mid-frame)")
                return False
            try:
                out = self._feed(data)
            except self.zstd.ZstdError as e:
                raise CorruptStreamError(f"the zstd stream is corrupt: {e}") from e
            if out:
                self.buf += out
                return True
        return False

    _started = False

    def _feed(self, data: bytes) -> bytes:
        out = b""
        while data:
            self._started = True
            out += self.dec.decompress(data)
            if not self.dec.eof:
                break
            data = self.dec.unused_data  # the next frame
            self.dec = self.zstd.ZstdDecompressor().decompressobj()
            self._started = bool(data)
        return out

    def readline(self, limit: int) -> bytes:
        while True:
            end = self.buf.find(b"\n", 0, limit)
            if end >= 0 or len(self.buf) >= limit:
                cut = end + 1 if end >= 0 else limit
                line, self.buf = self.buf[:cut], self.buf[cut:]
                return line
            if not self._more():
                line, self.buf = self.buf, b""
                return line
