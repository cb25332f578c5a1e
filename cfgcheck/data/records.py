"""Read the configured data files and render each record to the text that gets tokenized.

Formats: JSONL (one object per line; a ``.json`` file holding one JSON array of objects is
read as its records, as the ``json`` loader of Hugging Face ``datasets`` reads it), plain text
(one sample per non-empty line) and Parquet (needs pyarrow). A record becomes text through
``data.template`` (``str.format`` over the record's fields) or else its ``data.text_field``.
Texts come in chunks, so the tokenizer can encode a whole chunk in one multi-threaded call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.safeio import path_problem, shown
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.template import template_problem

CHUNK = 2048
# One record (a JSONL line, a text line) is read whole before it is tokenized: a file with no
# newline would otherwise be read into memory at once. No training sample is this long.
MAX_LINE_BYTES = 32 * 1024**2
# A JSON array file is parsed whole (as datasets' json loader does): bounded.
MAX_JSON_ARRAY_BYTES = 512 * 1024**2


class DataReadError(ValueError):
    """A data file is missing, unreadable, or a record cannot be rendered."""


@dataclass(frozen=True)
class Chunk:
    """Rendered texts of consecutive records of one file."""

    file: Path
    first: int  # 1-based record number (the line for JSONL and text) of texts[0]
    texts: list[str]
    bytes_done: int  # bytes of this file read so far (for progress)
    lines: list[int] | None = None  # line numbers when records skip blank lines


def file_format(path: Path, declared: str) -> str:
    if declared != "auto":
        return declared
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    return "text"


def renderer(data: DataConfig) -> Callable[[Mapping[str, Any]], str]:
    """Record -> text: ``data.template.format(**record)`` or ``record[data.text_field]``."""
    if data.template is not None:
        template = data.template
        problem = template_problem(template)  # the schema refuses it too; never rendered
        if problem:
            raise DataReadError(f"data.template {problem}")

        def render(record: Mapping[str, Any]) -> str:
            return template.format_map(record)

        return render
    field = data.text_field

    def pick(record: Mapping[str, Any]) -> str:
        return str(record[field])

    return pick


def iter_text_chunks(
    data: DataConfig, base: Path | None = None, size: int = CHUNK
) -> Iterator[Chunk]:
    """Every record of ``data.paths`` (relative to ``base`` or the working directory), rendered,
    in dataset order, ``size`` texts at a time. Raises :class:`DataReadError`."""
    if not data.paths:
        raise DataReadError("data.paths is empty: there is no dataset to scan")
    render = renderer(data)
    for name in data.paths:
        path = (base or Path.cwd()) / name
        reason = path_problem(path)  # a folder, device, FIFO or broken link: never opened
        if reason:
            raise DataReadError(f"data file {shown(name)} {reason} (resolved to {shown(path)})")
        fmt = file_format(path, data.format)
        if fmt == "jsonl" and _is_json_array(path):
            yield from _json_array(path, render, size)
        elif fmt == "jsonl":
            yield from _jsonl(path, render, size)
        elif fmt == "parquet":
            yield from _parquet(path, data, render, size)
        else:
            yield from _text(path, size)


def _fail_render(path: Path, line: int, e: Exception, what: str) -> DataReadError:
    if isinstance(e, KeyError):
        return DataReadError(f"{path}:{line}: the record has no field {e.args[0]!r} used by {what}")
    return DataReadError(f"{path}:{line}: cannot render the record with {what}: {e}")


def _what(render: Callable[[Mapping[str, Any]], str]) -> str:
    return "data.template" if render.__name__ == "render" else "data.text_field"


def _line_chunks(path: Path, size: int, to_text: Callable[[bytes, int], str]) -> Iterator[Chunk]:
    """The non-blank lines of ``path`` turned into texts by ``to_text(line, number)``, ``size``
    at a time; progress is counted in bytes read."""
    texts: list[str] = []
    lines: list[int] = []
    done = 0
    try:
        with path.open("rb") as f:
            for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise DataReadError(
                        f"{path}:{number}: the line is longer than {MAX_LINE_BYTES:,} bytes: "
                        f"not one sample per line"
                    )
                done += len(raw)
                if not raw.strip():
                    continue
                texts.append(to_text(raw, number))
                lines.append(number)
                if len(texts) >= size:
                    yield Chunk(path, lines[0], texts, done, lines)
                    texts, lines = [], []
    except OSError as e:
        raise DataReadError(f"cannot read {path}: {e.strerror or e}") from e
    if texts:
        yield Chunk(path, lines[0], texts, done, lines)


def _jsonl(path: Path, render: Callable[[Mapping[str, Any]], str], size: int) -> Iterator[Chunk]:
    what = _what(render)

    def to_text(raw: bytes, number: int) -> str:
        try:
            record = json.loads(raw)
        except ValueError as e:
            raise DataReadError(f"{path}:{number}: not valid JSON: {e}") from e
        except RecursionError:  # json's C decoder checks its depth: a clean error, no crash
            raise DataReadError(f"{path}:{number}: the JSON record nests too deeply") from None
        if not isinstance(record, dict):
            raise DataReadError(f"{path}:{number}: a JSONL record must be an object")
        try:
            return render(record)
        except (KeyError, ValueError, IndexError, AttributeError) as e:
            raise _fail_render(path, number, e, what) from e

    return _line_chunks(path, size, to_text)


def _is_json_array(path: Path) -> bool:
    """A ``.json`` file whose first non-blank byte opens an array."""
    if path.suffix.lower() != ".json":
        return False
    try:
        with path.open("rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError as e:
        raise DataReadError(f"cannot read {path}: {e.strerror or e}") from e
    return head.startswith(b"[")


def _json_array(
    path: Path, render: Callable[[Mapping[str, Any]], str], size: int
) -> Iterator[Chunk]:
    what = _what(render)
    try:
        total = path.stat().st_size
        if total > MAX_JSON_ARRAY_BYTES:
            raise DataReadError(
                f"{path}: a JSON array file over {MAX_JSON_ARRAY_BYTES // 1024**2} MiB is not "
                "read whole; convert it to JSONL (one record a line)"
            )
        raw = path.read_bytes()
    except OSError as e:
        raise DataReadError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        records = json.loads(raw)
    except ValueError as e:
        raise DataReadError(f"{path}: not valid JSON: {e}") from e
    except RecursionError:
        raise DataReadError(f"{path}: the JSON nests too deeply") from None
    if not isinstance(records, list):
        raise DataReadError(f"{path}: expected a JSON array of records")
    for start in range(0, len(records), size):
        texts = []
        for number, record in enumerate(records[start : start + size], start + 1):
            if not isinstance(record, dict):
                raise DataReadError(f"{path}: record {number} is not an object")
            try:
                texts.append(render(record))
            except (KeyError, ValueError, IndexError, AttributeError) as e:
                raise _fail_render(path, number, e, what) from e
        done = total * min(start + size, len(records)) // max(len(records), 1)
        yield Chunk(path, start + 1, texts, done)


def _text(path: Path, size: int) -> Iterator[Chunk]:
    def to_text(raw: bytes, number: int) -> str:
        try:
            return raw.decode("utf-8").rstrip("\n").removesuffix("\r")
        except UnicodeDecodeError as e:
            raise DataReadError(f"{path}:{number}: not UTF-8 text: {e}") from e

    return _line_chunks(path, size, to_text)


def _parquet(
    path: Path, data: DataConfig, render: Callable[[Mapping[str, Any]], str], size: int
) -> Iterator[Chunk]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as e:
        raise DataReadError(f"reading {path} needs pyarrow: install cfgcheck[data]") from e
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError on a bad file
        raise DataReadError(f"{path} is not a readable Parquet file: {e}") from e
    try:
        yield from _parquet_batches(pf, path, data, render, size)
    except DataReadError:
        raise
    except (
        Exception
    ) as e:  # a corrupt page or column chunk surfaces mid-read (ArrowInvalid, OSError)
        raise DataReadError(
            f"{path} is not a readable Parquet file: {' '.join(str(e).split())}"
        ) from e


def _parquet_batches(
    pf: Any, path: Path, data: DataConfig, render: Callable[[Mapping[str, Any]], str], size: int
) -> Iterator[Chunk]:
    columns = pf.schema_arrow.names
    total = max(pf.metadata.num_rows, 1)
    number = 0
    for batch in pf.iter_batches(batch_size=size):
        rows = batch.num_rows
        if data.template is None:
            if data.text_field not in columns:
                raise DataReadError(
                    f"{path}: no column {data.text_field!r} (data.text_field); columns: "
                    + ", ".join(columns)
                )
            texts = [str(t) for t in batch.column(data.text_field).to_pylist()]
        else:
            texts = []
            for i, record in enumerate(batch.to_pylist()):
                try:
                    texts.append(render(record))
                except (KeyError, ValueError, IndexError, AttributeError) as e:
                    raise _fail_render(path, number + i + 1, e, "data.template") from e
        first = number + 1
        number += rows
        yield Chunk(path, first, texts, int(path.stat().st_size * number / total))
