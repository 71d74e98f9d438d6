from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rolloutfleet.datasets.parquet_files import read_columns, shapes_of, to_table, write_table


def test_columns_come_back_with_their_shapes_and_dtypes(tmp_path: Path) -> None:
    columns = {
        "obs": np.arange(5 * 84 * 3, dtype=np.uint8).reshape(5, 84, 3),
        "action_dist_inputs": np.linspace(0, 1, 10, dtype=np.float32).reshape(5, 2),
        "t": np.arange(5, dtype=np.int64),
        "terminateds": np.array([0, 0, 1, 0, 1], bool),
        "agent_id": np.array(["red_0", "red_1", "red_0", "red_1", "red_0"]),
    }
    path = tmp_path / "part-0000000000.parquet"
    with open(path, "wb") as file:
        write_table(to_table(columns, {"job": "x"}), file)
    back = read_columns(tmp_path)
    assert set(back) == set(columns)
    for name, column in columns.items():
        assert back[name].shape == column.shape and back[name].dtype.kind == column.dtype.kind, name
        np.testing.assert_array_equal(back[name], column)
    assert shapes_of(path) == {"obs": [84, 3], "action_dist_inputs": [2]}
    # Any Arrow reader sees the tensor type with its shape, and zstd.
    field = pq.read_schema(path).field("obs").type
    assert isinstance(field, pa.FixedShapeTensorType) and list(field.shape) == [84, 3]
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
