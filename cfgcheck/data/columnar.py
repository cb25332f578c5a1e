"""Columnar data files: Parquet, Arrow IPC (the file format, Feather v2, and the stream format
Hugging Face ``datasets`` writes), and a folder saved by ``datasets``' ``save_to_disk``, all
read with pyarrow (the ``data`` extra) directly, without importing ``datasets``.

A ``save_to_disk`` folder holds ``dataset_info.json``, ``state.json`` and ``data-*.arrow``
shards; ``state.json``'s ``_data_files`` lists the shards in dataset order (datasets/
arrow_dataset.py, ``Dataset.save_to_disk`` and ``load_from_disk``). Other ``.arrow`` files in
such a folder (``cache-*.arrow`` left by ``map``) are not the dataset and are not read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.safeio import CAPS, UnsafeInput, cap, load_file, shown

if TYPE_CHECKING:
    from cfgcheck.data.records import Chunk
    from cfgcheck.schema.data import DataConfig

Keep = Callable[[int], bool]
Render = Callable[[Mapping[str, Any]], str]


def saved_dataset_files(folder: Path) -> list[Path] | None:
    """The Arrow shards of a ``save_to_disk`` folder in dataset order; None when ``folder``
    is not one. Raises :class:`~cfgcheck.data.records.DataReadError`."""
    from cfgcheck.data.records import DataReadError

    if (folder / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in folder.iterdir() if (p / "state.json").is_file())
        raise DataReadError(
            f"data folder {shown(folder)} is a DatasetDict saved by datasets: point data.paths "
            f"at one split's folder ({', '.join(shown(folder / s) for s in splits) or 'none'})"
        )
    state = folder / "state.json"
    if not (state.is_file() and (folder / "dataset_info.json").is_file()):
        return None
    try:
        data = load_file(state)
    except UnsafeInput as e:
        raise DataReadError(f"{e}") from e
    files = data.get("_data_files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files
    ):
        raise DataReadError(f"{shown(state)}: no _data_files list of {{filename}} entries")
    out = []
    for f in files:
        name = Path(f["filename"])
        if name.is_absolute() or ".." in name.parts:
            raise DataReadError(f"{shown(state)}: data file {name} lies outside the folder")
        out.append(folder / name)
    if not out:
        raise DataReadError(f"{shown(state)} lists no data file")
    return out


def _pyarrow(path: Path) -> Any:
    from cfgcheck.data.records import DataReadError

    try:
        import pyarrow as pa  # type: ignore[import-untyped]
    except ImportError as e:
        raise DataReadError(f"reading {path} needs pyarrow: install cfgcheck[data]") from e
    return pa


def _open_arrow(path: Path) -> tuple[Any, int, Iterator[Any]]:
    """(schema, rows or -1 when unknown, record batches) of an Arrow IPC file or stream."""
    pa = _pyarrow(path)
    source = pa.memory_map(str(path), "r")
    try:
        reader = pa.ipc.open_file(source)
    except pa.ArrowInvalid:  # not the file format: the stream format datasets writes
        source.seek(0)
        stream = pa.ipc.open_stream(source)
        return stream.schema, -1, iter(stream)
    rows = sum(reader.get_record_batch(i).num_rows for i in range(reader.num_record_batches))
    return reader.schema, rows, (reader.get_batch(i) for i in range(reader.num_record_batches))


def columnar_chunks(
    path: Path, fmt: str, data: DataConfig, render: Render, size: int, keep: Keep | None
) -> Iterator[Chunk]:
    """The rendered records of a Parquet or Arrow file, ``size`` at a time; record numbers
    (``Chunk.first`` / ``lines``) count rows from 1. ``keep(row)``: the rows sampled."""
    from cfgcheck.data.records import DataReadError

    what = "Parquet" if fmt == "parquet" else "Arrow"
    try:
        if fmt == "parquet":
            _pyarrow(path)
            import pyarrow.parquet as pq  # type: ignore[import-untyped]

            pf = pq.ParquetFile(path)
            schema, rows = pf.schema_arrow, pf.metadata.num_rows
            needed = _needed_columns(schema.names, data)
            _check_row_groups(path, pf.metadata, needed)
            batches: Iterator[Any] = pf.iter_batches(batch_size=size, columns=needed)
        else:
            schema, rows, batches = _open_arrow(path)
    except DataReadError:
        raise
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError on a bad file
        raise DataReadError(f"{path} is not a readable {what} file: {_one_line(e)}") from e
    try:
        yield from _batches(path, schema.names, rows, batches, data, render, size, keep)
    except DataReadError:
        raise
    except Exception as e:  # a corrupt page or batch surfaces mid-read (ArrowInvalid, OSError)
        raise DataReadError(f"{path} is not a readable {what} file: {_one_line(e)}") from e


def _fields(data: DataConfig) -> dict[str, str]:
    """The columns a record's text comes from, by the setting naming each (none: all
    columns, for a template)."""
    if data.prompt_field is not None:
        return {
            "data.prompt_field": data.prompt_field,
            "data.completion_field": data.completion_field,
        }
    if data.messages_field is not None:
        return {"data.messages_field": data.messages_field}
    if data.template is None:
        return {"data.text_field": data.text_field}
    return {}


def _needed_columns(columns: list[str], data: DataConfig) -> list[str] | None:
    """The columns a record's text comes from (None: all of them, for a template, or when
    one is missing: the reader then names it)."""
    needed = list(_fields(data).values())
    return needed if needed and all(c in columns for c in needed) else None


def _check_row_groups(path: Path, meta: Any, needed: list[str] | None) -> None:
    """Refuse, from the footer alone, a row group whose column pyarrow would decompress at
    once past the ``row-group`` cap: a Parquet page holds whole cells, so one huge cell is
    read whole whatever the batch size (pyarrow ``ParquetFile.iter_batches`` decodes a column
    chunk's pages into memory)."""
    from cfgcheck.data.records import DataReadError

    limit = cap("row-group")
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            col = group.column(c)
            name = col.path_in_schema.split(".")[0]
            if needed is not None and name not in needed:
                continue
            size = max(col.total_uncompressed_size, col.total_compressed_size)
            if size > limit:
                raise DataReadError(
                    f"{shown(path)}: row group {g + 1} holds {size:,} bytes in column {name!r}, "
                    f"more than {limit:,}, the cap for {CAPS['row-group'].what}; not read "
                    f"(set {CAPS['row-group'].env} to change it)"
                )


def _longest(array: Any) -> int:
    """The most bytes of text one row of ``array`` holds (strings and binaries, through lists
    and structs: a ``messages`` column), without converting it to Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    t = array.type
    if _is_text(array):
        return int(pc.max(pc.binary_length(array)).as_py() or 0)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        # a row's list: its elements' total, bounded by the longest element times the
        # longest list (no per-row Python loop)
        longest_item = _longest(pc.list_flatten(array))
        most_items = int(pc.max(pc.list_value_length(array)).as_py() or 0)
        return longest_item * most_items
    if pa.types.is_struct(t):
        return sum(_longest(pc.struct_field(array, [i])) for i in range(t.num_fields))
    return 0


def _check_cells(path: Path, part: Any, first: int, columns: list[str] | None) -> None:
    """Refuse a slice holding a row of more text than the ``record`` cap before it becomes
    Python strings (an Arrow file is memory-mapped: only this conversion would load it)."""
    from cfgcheck.data.records import DataReadError

    limit = cap("record")
    for name in columns if columns is not None else part.schema.names:
        col = part.column(name)
        if _longest(col) > limit:
            import pyarrow.compute as pc

            lengths = pc.binary_length(col) if _is_text(col) else None
            row = first
            if lengths is not None:
                over = pc.greater(lengths, limit)
                row = first + int(pc.index(over, True).as_py())
            raise DataReadError(
                f"{shown(path)}:{row}: the record is longer than {limit:,} bytes in column "
                f"{name!r}; not read ({CAPS['record'].env} changes the cap)"
            )


def _is_text(col: Any) -> bool:
    import pyarrow as pa

    t = col.type
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _batches(
    path: Path,
    columns: list[str],
    rows: int,
    batches: Iterator[Any],
    data: DataConfig,
    render: Render,
    size: int,
    keep: Keep | None,
) -> Iterator[Chunk]:
    from cfgcheck.data.records import Chunk, DataReadError, fail_render

    needed = _fields(data)
    what = next(iter(needed), "data.template")
    for which, field in needed.items():
        if field not in columns:
            raise DataReadError(
                f"{path}: no column {field!r} ({which}); columns: {', '.join(columns)}"
            )
    plain = what == "data.text_field"
    file_size = path.stat().st_size
    number = 0
    for batch in batches:
        for start in range(0, batch.num_rows, size):
            part = batch.slice(start, size)
            _check_cells(path, part, number + 1, _needed_columns(columns, data))
            picked = [i for i in range(part.num_rows) if keep is None or keep(number + i + 1)]
            if plain:
                values = part.column(data.text_field).to_pylist()
                texts = ["" if values[i] is None else str(values[i]) for i in picked]
            else:
                records = part.to_pylist()
                texts = []
                for i in picked:
                    try:
                        texts.append(render(records[i]))
                    except (KeyError, ValueError, IndexError, AttributeError, TypeError) as e:
                        raise fail_render(path, number + i + 1, e, what) from e
            lines = [number + i + 1 for i in picked]
            number += part.num_rows
            done = int(file_size * number / rows) if rows > 0 else 0
            if texts:
                yield Chunk(path, lines[0], texts, done, lines, number)
    yield Chunk(path, number + 1, [], file_size, [], number)
