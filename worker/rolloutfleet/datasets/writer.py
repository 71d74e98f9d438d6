"""A recording folder that batches go into: Parquet files rolled by size, or a Minari
dataset of whole episodes. What ``rolloutfleet record`` writes with, and what a learner
tees its batches into::

    writer = DatasetWriter("runs/cartpole", job, "parquet")     # doctest: +SKIP
    batch = consumer.get(min_steps=4096)                         # doctest: +SKIP
    writer.write(batch)          # durable when it returns       # doctest: +SKIP
    writer.close()               # the last files                # doctest: +SKIP

:meth:`write` puts the rows in the spool (:mod:`.spool`) and fsyncs them; :meth:`flush`
turns the spool into data files (every ``roll_bytes`` of spooled batches, and on
:meth:`close`) and then commits the folder's state (:mod:`.state`). A folder is one job's
(one policy's) recording: another job's is refused; the same job's is continued.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rolloutfleet.datasets.durable import OutputError, make_dir, write_atomic
from rolloutfleet.datasets.spool import Spool, load_columns
from rolloutfleet.datasets.state import FORMATS, RecordingState, read_state, refusal, write_state
from rolloutfleet.datasets.stitching import stitch

log = logging.getLogger(__name__)

DEFAULT_ROLL_BYTES = 64 << 20
"""Parquet files are rolled (and Minari episodes committed) every this many spooled bytes."""
HELD = "__held"
"""Carried rows of a Minari recording: when (Unix time) they were first carried."""
MINARI_COLUMNS = ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t")


class RecordingRefused(OutputError):
    """The folder holds another recording (one line)."""


class DatasetWriter:
    """Writes one job's (one policy's) batches into ``folder`` as ``format``.

    ``minari`` needs the env's spaces (``spaces=(observation, action)``) and takes its
    gymnasium ``env_spec`` when there is one (``recover_environment`` then works).
    """

    def __init__(self, folder: str | Path, job: str, format: str, *, namespace: str = "default",
                 policy: str | None = None, roll_bytes: int = DEFAULT_ROLL_BYTES,
                 spaces: tuple[Any, Any] | None = None, env_spec: Any = None,
                 incomplete_grace_s: float = 120.0) -> None:  # fmt: skip
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        self.folder = Path(folder)
        self.roll_bytes = roll_bytes
        self.incomplete_grace_s = incomplete_grace_s
        """How long an episode that ended with rows missing waits for them (they may still come)."""
        wanted = RecordingState(format, namespace, job, policy)
        if self.folder.is_dir() and (problem := refusal(self.folder, wanted)):
            raise RecordingRefused(problem)
        make_dir(self.folder / ".spool")
        self.state = read_state(self.folder) or wanted
        self.spool = Spool(self.folder / ".spool")
        self.minari = None
        if format == "minari":
            if spaces is None:
                raise ValueError("a Minari recording needs the env's spaces (observation, action)")
            from rolloutfleet.datasets.minari_files import MinariFiles, dataset_id_for

            self.minari = MinariFiles(self.folder, dataset_id_for(job), *spaces, env_spec,
                                      f"RolloutFleet recording of job {namespace}/{job}")  # fmt: skip
            self.minari.ensure()
        self._recover()
        write_state(self.folder, self.state)
        self._segments = self.spool.segments(self.state.consumed_upto)
        self._next_seq = (self._segments[-1][0] if self._segments else self.state.consumed_upto) + 1
        self._schema: dict[str, tuple[str, tuple[int, ...]]] | None = None

    def _recover(self) -> None:
        """Undo what a kill left after the last commit: files the state does not count."""
        self.spool.tidy(self.state.consumed_upto, self.state.carry)
        if self.minari is not None:
            self.minari.recover(self.state.episodes, self.state.steps)
            return
        for path in self.folder.glob("part-*.parquet"):
            number = path.stem.removeprefix("part-")
            if number.isdigit() and int(number) >= self.state.parts:
                path.unlink()
        for path in self.folder.glob(".part-*.tmp"):
            path.unlink()

    def remember_group(self, group: str) -> None:
        """Keep the consumer group this folder is recorded as (a restart reads as it again)."""
        if group != self.state.group:
            self.state = self.state.advanced(group=group)
            write_state(self.folder, self.state)

    def spooled_entries(self) -> list[tuple[str, str]]:
        """Stream entries whose rows are in the spool (to acknowledge after a restart)."""
        return [entry for _, path in self._segments for entry in load_columns(path)[1]]

    @property
    def spooled_bytes(self) -> int:
        return self.spool.bytes

    def misfit(self, columns: Mapping[str, np.ndarray]) -> str | None:
        """Why rows with these columns cannot join this recording (one line), or None."""
        schema = {
            name: (str(c.dtype) if c.dtype.kind != "U" else "U", tuple(c.shape[1:])) for name, c in columns.items()
        }
        if self.minari is not None and (missing := [c for c in MINARI_COLUMNS if c not in schema]):
            return f"a Minari recording needs columns {list(MINARI_COLUMNS)}; the batches lack {missing}"
        if self._schema is None or schema == self._schema:
            return None
        for name in sorted(set(schema) | set(self._schema)):
            if schema.get(name) != self._schema.get(name):
                return f"column {name!r} is {schema.get(name)} (dtype, row shape), the recording's is {self._schema.get(name)}"
        return None

    def write(
        self, columns: Mapping[str, np.ndarray], entries: Sequence[tuple[str, str]] = (), roll: bool = True
    ) -> None:
        """Spool the rows durably (``entries``: the stream entries they came from); with
        ``roll``, :meth:`flush` once ``roll_bytes`` are spooled (the recorder flushes itself,
        after acknowledging the entries: a flush consumes the spool that restarts rely on)."""
        problem = self.misfit(columns)
        if problem is not None:
            raise ValueError(problem)
        if not len(next(iter(columns.values()), ())):
            return
        self.spool.append(self._next_seq, columns, entries)
        self._segments.append((self._next_seq, self.spool.folder / f"seg-{self._next_seq:010d}.npz"))
        self._next_seq += 1
        self._schema = {
            n: (str(c.dtype) if c.dtype.kind != "U" else "U", tuple(c.shape[1:])) for n, c in columns.items()
        }
        if roll and self.spool.bytes >= self.roll_bytes:
            self.flush()

    def flush(self) -> None:
        """Turn the spooled rows into data files and commit the folder's state."""
        if not self._segments:
            return
        parts = [load_columns(self.folder / ".spool" / self.state.carry)[0]] if self.state.carry else []
        parts += [load_columns(path)[0] for _, path in self._segments]
        names = [name for name in parts[-1] if name != HELD]
        columns = {name: np.concatenate([p[name] for p in parts]) for name in names}
        if self.minari is not None:
            carried = parts[0][HELD] if self.state.carry else np.empty(0)  # the carry's rows come first
            columns[HELD] = np.concatenate([carried, np.full(len(columns["t"]) - len(carried), time.time())])
        last = self._segments[-1][0]
        state = self._commit(columns, last)
        write_state(self.folder, state)
        self.state = state
        self.spool.tidy(state.consumed_upto, state.carry)
        self._segments, self.spool.bytes = [], 0

    def _commit(self, columns: dict[str, np.ndarray], last: int) -> RecordingState:
        rows = len(columns["t"]) if "t" in columns else len(next(iter(columns.values())))
        if self.minari is None:
            from rolloutfleet.datasets.parquet_files import to_table, write_table

            table = to_table(
                columns, {"namespace": self.state.namespace, "job": self.state.job, "policy": self.state.policy}
            )
            path = self.folder / f"part-{self.state.parts:010d}.parquet"
            write_atomic(path, lambda file: write_table(table, file))
            return self.state.advanced(
                consumed_upto=last, carry=None, parts=self.state.parts + 1, rows=self.state.rows + rows
            )
        now, held = time.time(), columns[HELD]
        done, broken, still_open = stitch(columns)
        # An episode that ended with rows missing may get them yet: entries a killed recorder
        # left pending are claimed again seconds later. Kept for a grace period, then dropped.
        waiting = np.isin(columns["eps_id"], broken)
        expired = waiting & (held < now - self.incomplete_grace_s)
        dropped = np.unique(columns["eps_id"][expired]).tolist()
        if dropped:
            log.warning("%d episode(s) ended with rows missing for %g s (the recording began during them, or "
                        "dropOldest trimmed their fragments): not written", len(dropped), self.incomplete_grace_s)  # fmt: skip
        keep = waiting & ~np.isin(columns["eps_id"], dropped)
        carried = {name: np.concatenate([still_open[name], column[keep]]) for name, column in columns.items()}
        steps = self.state.steps + sum(len(e) for e in done)
        self.minari.commit(done, self.state.episodes, steps)  # type: ignore[union-attr]
        carry = self.spool.write_carry(last, carried) if len(carried["t"]) else None
        return self.state.advanced(consumed_upto=last, carry=carry, episodes=self.state.episodes + len(done),
                                   steps=steps, rows=self.state.rows + rows - len(carried["t"]),
                                   broken_episodes=self.state.broken_episodes + len(dropped))  # fmt: skip

    def open_rows(self) -> int:
        """Rows of episodes still open (Minari): kept in the spool, not written as episodes."""
        if self.state.carry is None:
            return 0
        return len(load_columns(self.folder / ".spool" / self.state.carry)[0]["t"])

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
