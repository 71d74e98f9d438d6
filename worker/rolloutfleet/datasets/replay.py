"""``rolloutfleet replay``: publish a recording (Parquet files or a Minari dataset, ours or
anyone's) into a job's batch stream through the workers' publisher, so a learner trains
offline through the same ``BatchConsumer``.

Paced by the stream's backpressure (``block``: as fast as the learner takes batches) or at
``rate`` rows a second. Parquet rows go out as recorded (every column but ``worker_index``,
which the recorder made from the entries' metadata); a Minari episode becomes the rows a
worker would have sent: ``obs``/``new_obs`` from its N+1 observations, ``actions``,
``rewards``, ``terminateds``, ``truncateds``, ``eps_id`` and ``t``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rolloutfleet.datasets.state import STATE_FILE

RECORDER_ONLY = ("worker_index",)


@dataclass(frozen=True)
class Source:
    """A dataset to replay: its format, where, and each column's dtype and row shape."""

    format: str
    path: Path
    columns: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]
    minari: Any = None


def open_source(path: str | Path) -> Source:
    """The dataset at ``path``: a Parquet recording (``part-*.parquet``), a Minari dataset
    folder (``<id>/data``, ``data`` or the folder holding ``metadata.json``), or a Minari
    recording. ValueError (one line) when it is none of these."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder")
    if sorted(path.glob("part-*.parquet")):
        return _parquet_source(path)
    candidates = [path, path / "data", *(p / "data" for p in sorted(path.iterdir()) if p.is_dir())]
    for folder in candidates:
        if (folder / "metadata.json").is_file() and "data_format" in json.loads((folder / "metadata.json").read_text()):
            return _minari_source(folder)
    if (path / STATE_FILE).exists():
        raise ValueError(f"{path} holds a recording with no data yet")
    raise ValueError(f"{path} holds neither part-*.parquet files nor a Minari dataset")


def _parquet_source(path: Path) -> Source:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(sorted(path.glob("part-*.parquet"))[0])
    columns: dict[str, tuple[np.dtype[Any], tuple[int, ...]]] = {}
    for field in schema:
        if isinstance(field.type, pa.FixedShapeTensorType):
            columns[field.name] = (np.dtype(field.type.value_type.to_pandas_dtype()), tuple(field.type.shape))
        elif pa.types.is_string(field.type):
            columns[field.name] = (np.dtype(str), ())
        else:
            columns[field.name] = (np.dtype(field.type.to_pandas_dtype()), ())
    return Source("parquet", path, columns)


def _minari_source(data: Path) -> Source:
    from minari.dataset.minari_dataset import MinariDataset

    dataset = MinariDataset(data)
    obs, act = dataset.observation_space, dataset.action_space
    columns = {
        "obs": (np.dtype(obs.dtype), tuple(obs.shape or ())),
        "actions": (np.dtype(act.dtype), tuple(act.shape or ())),
    }
    return Source("minari", data, columns, dataset)


def space_mismatch(source: Source, observation_space: Any, action_space: Any) -> str | None:
    """Why the dataset's rows cannot be this job's (one line naming the column), or None."""
    for column, space in (("obs", observation_space), ("actions", action_space)):
        if column not in source.columns:
            return f"column {column!r} is missing from {source.path}"
        if space.shape is None or space.dtype is None:
            return f"column {column!r}: the job's {space} has no fixed shape and dtype to replay into"
        dtype, shape = source.columns[column]
        if (dtype, shape) != (np.dtype(space.dtype), tuple(space.shape)):
            return (f"column {column!r} holds {dtype} rows of shape {shape}; the job's space {space} "
                    f"takes {np.dtype(space.dtype)} of shape {tuple(space.shape)}")  # fmt: skip
    return None


def batches(source: Source, rows: int) -> Iterator[dict[str, np.ndarray]]:
    """The dataset's rows, about ``rows`` at a time (whole episodes for Minari)."""
    if source.format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from rolloutfleet.datasets.parquet_files import table_columns

        for file in sorted(source.path.glob("part-*.parquet")):
            for record_batch in pq.ParquetFile(file).iter_batches(batch_size=rows):
                columns = table_columns(pa.Table.from_batches([record_batch]))
                yield {name: column for name, column in columns.items() if name not in RECORDER_ONLY}
        return
    pending: list[dict[str, np.ndarray]] = []
    for episode in source.minari.iterate_episodes():
        pending.append(_episode_rows(source.minari, episode))
        if sum(len(p["t"]) for p in pending) >= rows:
            yield {name: np.concatenate([p[name] for p in pending]) for name in pending[0]}
            pending = []
    if pending:
        yield {name: np.concatenate([p[name] for p in pending]) for name in pending[0]}


def _episode_rows(dataset: Any, episode: Any) -> dict[str, np.ndarray]:
    steps = len(episode.rewards)
    metadata: dict[str, Any] = next(iter(dataset.storage.get_episode_metadata([episode.id])), {})
    observations = np.asarray(episode.observations)
    return {
        "obs": observations[:-1],
        "new_obs": observations[1:],
        "actions": np.asarray(episode.actions),
        "rewards": np.asarray(episode.rewards, np.float32),
        "terminateds": np.asarray(episode.terminations, bool),
        "truncateds": np.asarray(episode.truncations, bool),
        "eps_id": np.full(steps, int(metadata.get("eps_id", episode.id)), np.int64),
        "t": np.arange(steps, dtype=np.int64),
    }


@dataclass
class ReplayStats:
    batches: int = 0
    rows: int = 0


def replay(source: Source, publish: Callable[[dict[str, np.ndarray]], None], *, rows_per_batch: int = 1024,
           rate: float | None = None, stop: Callable[[], bool] = lambda: False) -> ReplayStats:  # fmt: skip
    """Publish every row of ``source`` once through ``publish``, ``rate`` rows/s at most."""
    stats = ReplayStats()
    started = time.monotonic()
    for columns in batches(source, rows_per_batch):
        if stop():
            break
        if rate is not None:
            time.sleep(max(0.0, started + stats.rows / rate - time.monotonic()))
        publish(columns)
        stats.batches += 1
        stats.rows += len(columns["t"]) if "t" in columns else len(next(iter(columns.values())))
    return stats
