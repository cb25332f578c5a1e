"""Read the configured data files and render each record to the text that gets tokenized.

Formats: JSONL (one object per line; a ``.json`` file holding one JSON array of objects is
read as its records, as the ``json`` loader of Hugging Face ``datasets`` reads it), plain text
(one sample per non-empty line), Parquet and Arrow (a ``datasets`` ``save_to_disk`` folder
too: :mod:`cfgcheck.data.columnar`, needs pyarrow). A record becomes text through
``data.template`` (``str.format`` over the record's fields) or else its ``data.text_field``;
with ``data.messages_field``, its conversation as JSON, which the scanner renders with the
tokenizer's chat template (:mod:`cfgcheck.data.chat`); with ``data.prompt_field``, its prompt
and completion as JSON (:mod:`cfgcheck.data.completion`).
Texts come in chunks, so the tokenizer can encode a whole chunk in one multi-threaded call.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.data.columnar import Keep, columnar_chunks, saved_dataset_files
from cfgcheck.data.compressed import CorruptStreamError, is_compressed, open_lines, strip_suffix
from cfgcheck.safeio import UnsafeInput, cap, path_problem, read_capped, shown
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.template import template_problem

CHUNK = 2048
CHUNK_BYTES = 4 << 20  # a chunk also ends after this much text: long documents stay bounded
# One record (a JSONL line, a text line, a rendered sample) is read whole before it is
# tokenized, and tokenizing costs about 300 bytes of memory per character: a record over the
# safeio "record" cap (4 MiB, a million-token sample; CFGCHECK_MAX_RECORD_BYTES) is refused,
# so a 30 MB line or one 30 MB word is one line and exit 2, not an abort (read at import;
# scan workers inherit the environment).
MAX_LINE_BYTES = cap("record")
# A JSON array file is parsed whole (as datasets' json loader does): bounded by the safeio
# "json-array" cap (512 MiB; CFGCHECK_MAX_JSON_ARRAY_BYTES).


class DataReadError(ValueError):
    """A data file is missing, unreadable, or a record cannot be rendered. ``line``: the
    line (record) of ``path`` it is about, counted within the shard that was read."""

    def __init__(self, message: str, path: str = "", line: int | None = None, detail: str = ""):
        super().__init__(message, path, line, detail)  # all in args: it pickles whole
        self.path, self.line, self.detail = path, line, detail

    def __str__(self) -> str:
        return str(self.args[0])

    def shifted(self, offset: int) -> DataReadError:
        """The same error numbered from the file's start (the shard began ``offset`` lines
        into it)."""
        if self.line is None or not offset:
            return self
        return at(self.path, self.line + offset, self.detail)


def at(path: Path | str, line: int, detail: str) -> DataReadError:
    """An error about line (record) ``line`` of ``path``."""
    return DataReadError(f"{path}:{line}: {detail}", str(path), line, detail)


@dataclass(frozen=True)
class Chunk:
    """Rendered texts of consecutive records of one file."""

    file: Path
    first: int  # 1-based record number (the line for JSONL and text) of texts[0]
    texts: list[str]
    bytes_done: int  # bytes of this file read so far (for progress)
    lines: list[int] | None = None  # line numbers when records skip blank lines
    lines_read: int = 0  # lines of this shard read so far (blank ones included)


@dataclass(frozen=True)
class Shard:
    """A piece of one data file scanned on its own: the lines that start in bytes
    ``[start, end)`` (``end`` None: to the end of the file). Line numbers within a shard count
    from 1; the scan shifts them by the lines of the file's earlier shards."""

    path: Path
    format: str
    start: int = 0
    end: int | None = None
    size: int = 0  # bytes this shard covers on disk (for progress)

    @property
    def compressed(self) -> bool:
        return is_compressed(self.path)


# File names a directory in data.paths contributes (the ``.gz`` and ``.zst`` of each too).
DATA_SUFFIXES = (
    ".jsonl", ".json", ".ndjson", ".parquet", ".pq", ".arrow", ".feather", ".txt", ".text"
)  # fmt: skip
GLOB_CHARS = frozenset("*?[")


def file_format(path: Path, declared: str) -> str:
    if declared != "auto":
        return declared
    suffix = path.suffix.lower()
    if is_compressed(path):
        suffix = Path(path.stem).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".arrow", ".feather"):
        return "arrow"
    return "text"


def _is_data_file(path: Path) -> bool:
    name = strip_suffix(path.name.lower())
    return not path.name.startswith(".") and name.endswith(DATA_SUFFIXES)


def expand_paths(paths: list[str], base: Path | None = None) -> list[Path]:
    """``data.paths`` as files, in order: a glob pattern gives its matches and a directory its
    data files (recursively), each sorted by name. Raises :class:`DataReadError`."""
    if not paths:
        raise DataReadError("data.paths is empty: there is no dataset to scan")
    root = base or Path.cwd()
    out: list[Path] = []
    for name in paths:
        path = root / name
        if GLOB_CHARS & set(name):
            found = sorted(Path(p) for p in glob.glob(str(path), recursive=True))
            files = [p for p in found if p.is_file()]
            if not files:
                raise DataReadError(f"data path {shown(name)} matches no file")
            out += files
        elif path.is_dir() and (saved := saved_dataset_files(path)) is not None:
            out += saved
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*") if _is_data_file(p) and p.is_file())
            if not files:
                raise DataReadError(
                    f"data folder {shown(name)} holds no data file ("
                    + ", ".join(DATA_SUFFIXES)
                    + ", or the .gz / .zst of one)"
                )
            out += files
        else:
            reason = path_problem(path)  # a device, FIFO or broken link: never opened
            if reason:
                raise DataReadError(f"data file {shown(name)} {reason} (resolved to {shown(path)})")
            out.append(path)
    for p in out:
        reason = path_problem(p)
        if reason:
            raise DataReadError(f"data file {shown(p)} {reason}")
    return out


def plan_shards(
    data: DataConfig,
    base: Path | None = None,
    shard_bytes: int = 64 << 20,
    files: list[Path] | None = None,
) -> list[Shard]:
    """The files of ``data.paths`` (or ``files``, already expanded) cut into shards:
    uncompressed JSONL and text files larger than ``shard_bytes`` by byte range (the reader
    aligns each range to whole lines), every other file whole."""
    shards: list[Shard] = []
    for path in expand_paths(data.paths, base) if files is None else files:
        fmt = file_format(path, data.format)
        try:
            size = path.stat().st_size
        except OSError as e:
            raise DataReadError(f"cannot read {path}: {e.strerror or e}") from e
        splittable = fmt in ("jsonl", "text") and not is_compressed(path)
        if fmt == "jsonl" and splittable and _is_json_array(path):
            fmt, splittable = "json-array", False
        if not splittable or size <= shard_bytes:
            shards.append(Shard(path, fmt, 0, None, size))
            continue
        for start in range(0, size, shard_bytes):
            end = min(start + shard_bytes, size)
            shards.append(Shard(path, fmt, start, None if end >= size else end, end - start))
    return shards


def renderer(data: DataConfig) -> Callable[[Mapping[str, Any]], str]:
    """Record -> text: ``data.template.format(**record)`` or ``record[data.text_field]``; with
    ``data.messages_field``, the conversation as JSON (:func:`cfgcheck.data.chat.conversation`)."""
    if data.prompt_field is not None:
        from cfgcheck.data.completion import pair

        prompt, completion = data.prompt_field, data.completion_field

        def prompt_completion(record: Mapping[str, Any]) -> str:
            return pair(record[prompt], record[completion])

        return prompt_completion
    if data.messages_field is not None:
        from cfgcheck.data.chat import conversation

        messages = data.messages_field

        def chat(record: Mapping[str, Any]) -> str:
            return conversation(record[messages], data)

        return chat
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
    for shard in plan_shards(data, base, shard_bytes=1 << 62):
        yield from (c for c in shard_chunks(shard, data, size) if c.texts)


def shard_chunks(
    shard: Shard, data: DataConfig, size: int = CHUNK, keep: Keep | None = None
) -> Iterator[Chunk]:
    """The rendered records of one shard, ``size`` at a time (line-based formats end with an
    empty chunk that carries the shard's line count). ``keep``: the records sampled, by key
    (a line's byte offset in its file, a row's or array record's number), so a sample does
    not depend on how the file was sharded; records not kept are not parsed."""
    render = renderer(data)
    path = shard.path
    if shard.format == "json-array":
        yield from _capped(_json_array(path, render, size, keep))
    elif shard.format == "jsonl":
        yield from _capped(_jsonl(shard, render, size, keep))
    elif shard.format in ("parquet", "arrow"):
        yield from _capped(columnar_chunks(path, shard.format, data, render, size, keep))
    else:
        yield from _capped(_text(shard, size, keep))


def _line_cap() -> int:
    return MAX_LINE_BYTES


def _capped(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """``chunks`` with every rendered text within the record cap: a template, a JSON array
    record or a Parquet cell can render a text longer than any line read."""
    limit = _line_cap()
    for c in chunks:
        for i, text in enumerate(c.texts):
            if len(text) > limit:
                line = c.lines[i] if c.lines else c.first + i
                raise at(
                    c.file,
                    line,
                    f"the record renders to more than {limit:,} characters: not one sample "
                    "(CFGCHECK_MAX_RECORD_BYTES changes the cap)",
                )
        yield c


def fail_render(path: Path, line: int, e: Exception, what: str) -> DataReadError:
    if isinstance(e, KeyError):
        return at(path, line, f"the record has no field {e.args[0]!r} used by {what}")
    return at(path, line, f"cannot render the record with {what}: {e}")


def _what(render: Callable[[Mapping[str, Any]], str]) -> str:
    names = {
        "render": "data.template",
        "chat": "data.messages_field",
        "prompt_completion": "data.prompt_field",
    }
    return names.get(render.__name__, "data.text_field")


def _open(shard: Shard) -> Any:
    """The shard's file, positioned at its first whole line (a compressed file decompressed)."""
    if shard.compressed:
        return open_lines(shard.path)
    f = shard.path.open("rb")
    if shard.start:
        f.seek(shard.start - 1)
        f.readline(_line_cap() + 1)  # the line that starts before the range is not ours
    return f


def _line_chunks(
    shard: Shard, size: int, to_text: Callable[[bytes, int], str], keep: Keep | None = None
) -> Iterator[Chunk]:
    """The non-blank lines that start in ``shard`` (and that ``keep(byte offset)`` keeps)
    turned into texts by ``to_text(line, number)``, ``size`` at a time; progress is counted
    in bytes read."""
    path = shard.path
    texts: list[str] = []
    lines: list[int] = []
    done = 0
    held = 0  # bytes of the texts in the current chunk
    number = 0
    try:
        with _open(shard) as f:
            pos = f.tell() if not shard.compressed else 0
            limit = _line_cap()
            while shard.end is None or pos < shard.end:
                raw = f.readline(limit + 1)
                if not raw:
                    break
                number += 1
                offset = pos
                pos += len(raw)
                if len(raw) > limit:
                    raise at(
                        path,
                        number,
                        f"the line is longer than {limit:,} bytes: not one sample per line "
                        "(CFGCHECK_MAX_RECORD_BYTES changes the cap)",
                    )
                done += len(raw)
                if not raw.strip() or (keep is not None and not keep(offset)):
                    continue
                texts.append(to_text(raw, number))
                lines.append(number)
                held += len(raw)
                if len(texts) >= size or held >= CHUNK_BYTES:
                    yield Chunk(path, lines[0], texts, done, lines, number)
                    texts, lines, held = [], [], 0
    except CorruptStreamError as e:
        raise at(path, number + 1, f"{e} (after line {number})") from e
    except OSError as e:
        raise DataReadError(f"cannot read {path}: {e.strerror or e}") from e
    if texts:
        yield Chunk(path, lines[0], texts, done, lines, number)
    yield Chunk(path, number + 1, [], done, [], number)


def _jsonl(
    shard: Shard, render: Callable[[Mapping[str, Any]], str], size: int, keep: Keep | None
) -> Iterator[Chunk]:
    what = _what(render)
    path = shard.path

    def to_text(raw: bytes, number: int) -> str:
        try:
            record = json.loads(raw)
        except ValueError as e:
            raise at(path, number, f"not valid JSON: {e}") from e
        except RecursionError:  # json's C decoder checks its depth: a clean error, no crash
            raise at(path, number, "the JSON record nests too deeply") from None
        if not isinstance(record, dict):
            raise at(path, number, "a JSONL record must be an object")
        try:
            return render(record)
        except (KeyError, ValueError, IndexError, AttributeError, TypeError) as e:
            raise fail_render(path, number, e, what) from e

    return _line_chunks(shard, size, to_text, keep)


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
    path: Path, render: Callable[[Mapping[str, Any]], str], size: int, keep: Keep | None
) -> Iterator[Chunk]:
    what = _what(render)
    try:
        total = path.stat().st_size
        if total > cap("json-array"):
            raise DataReadError(
                f"{path}: a JSON array file over {cap('json-array') // 1024**2} MiB is not "
                "read whole; convert it to JSONL (one record a line) "
                "(CFGCHECK_MAX_JSON_ARRAY_BYTES changes the cap)"
            )
        raw = read_capped(path, "json-array")
    except UnsafeInput as e:
        raise DataReadError(str(e)) from e
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
        texts, lines = [], []
        for number, record in enumerate(records[start : start + size], start + 1):
            if keep is not None and not keep(number):
                continue
            if not isinstance(record, dict):
                raise DataReadError(f"{path}: record {number} is not an object")
            try:
                texts.append(render(record))
            except (KeyError, ValueError, IndexError, AttributeError, TypeError) as e:
                raise fail_render(path, number, e, what) from e
            lines.append(number)
        done = total * min(start + size, len(records)) // max(len(records), 1)
        if texts:
            yield Chunk(path, lines[0], texts, done, lines)


def _text(shard: Shard, size: int, keep: Keep | None) -> Iterator[Chunk]:
    path = shard.path

    def to_text(raw: bytes, number: int) -> str:
        try:
            return raw.decode("utf-8").rstrip("\n").removesuffix("\r")
        except UnicodeDecodeError as e:
            raise at(path, number, f"not UTF-8 text: {e}") from e

    return _line_chunks(shard, size, to_text, keep)
