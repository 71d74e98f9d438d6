"""Batch columns as Parquet (pyarrow) and back, shapes intact.

A column of one value per row is a plain Parquet column; a column with more dimensions
(``obs`` of shape ``(rows, 4)``, ``(rows, 84, 84, 4)``) is Arrow's fixed-shape tensor
extension type (``arrow.fixed_shape_tensor``, its shape in the schema), which pyarrow reads
back as ``(rows, *shape)``. Files are zstd-compressed. Arrow-aware readers that do not know
the extension type see a fixed-size list of the flattened values; the shape is also in the
file's key-value metadata (``rolloutfleet.shapes``)::

    columns = read_columns("out/part-0000000000.parquet")
    columns["obs"].shape        # (rows, 4)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SHAPES_KEY = b"rolloutfleet.shapes"
SOURCE_KEY = b"rolloutfleet.source"


def to_table(columns: Mapping[str, np.ndarray], source: Mapping[str, Any]) -> pa.Table:
    """The columns as one Arrow table; ``source`` (job, policy, ...) goes into its metadata."""
    arrays, shapes = {}, {}
    for name, column in columns.items():
        if column.ndim > 1:
            contiguous = np.ascontiguousarray(column)
            arrays[name] = pa.FixedShapeTensorArray.from_numpy_ndarray(contiguous)
            shapes[name] = list(column.shape[1:])
        else:
            arrays[name] = pa.array(column)
    table = pa.table(arrays)
    metadata = {SHAPES_KEY: json.dumps(shapes).encode(), SOURCE_KEY: json.dumps(dict(source)).encode()}
    return table.replace_schema_metadata(metadata)


def write_table(table: pa.Table, file: BinaryIO) -> None:
    pq.write_table(table, file, compression="zstd", row_group_size=64 * 1024)


def table_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """numpy columns of a table :func:`to_table` made (or of several files read together)."""
    out = {}
    for name in table.column_names:
        chunked = table.column(name)
        if isinstance(chunked.type, pa.FixedShapeTensorType):
            storage = chunked.combine_chunks() if chunked.num_chunks else pa.chunked_array([], chunked.type)
            out[name] = storage.to_numpy_ndarray() if len(storage) else np.empty((0, *chunked.type.shape))
        elif pa.types.is_string(chunked.type) or pa.types.is_large_string(chunked.type):
            out[name] = chunked.to_numpy().astype(str)  # agent ids: text, as the batches had them
        else:
            out[name] = chunked.to_numpy()
    return out


def read_columns(path: str | Path) -> dict[str, np.ndarray]:
    """Every column of a Parquet file, or of all ``part-*.parquet`` files of a folder, in order."""
    path = Path(path)
    files = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    if not files:
        return {}
    tables = [pq.read_table(file) for file in files]
    return table_columns(pa.concat_tables(tables) if len(tables) > 1 else tables[0])


def shapes_of(path: str | Path) -> dict[str, list[int]]:
    """The per-row shapes recorded in a file's metadata."""
    metadata = pq.read_schema(path).metadata or {}
    return dict(json.loads(metadata.get(SHAPES_KEY, b"{}")))
