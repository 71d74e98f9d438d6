"""Columnar experience: a mapping of column name -> numpy array, one row per env step.

Column names follow RLlib where one exists, so learners written against RLlib's
``SampleBatch`` read ours unchanged::

    batch = runner.sample()
    batch["obs"].shape          # (rows, *obs_shape)
    len(batch)                  # rows
    SampleBatch.concat([a, b])  # row-wise
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

DEFAULT_POLICY = "default"
"""The policy id of a single-agent job: outside the samplers it is a job with this one policy."""

OBS = "obs"
NEW_OBS = "new_obs"
ACTIONS = "actions"
REWARDS = "rewards"
TERMINATEDS = "terminateds"
TRUNCATEDS = "truncateds"
EPS_ID = "eps_id"
ENV_ID = "env_id"
AGENT_INDEX = "agent_index"
T = "t"
ACTION_LOGP = "action_logp"
ACTION_DIST_INPUTS = "action_dist_inputs"
VF_PREDS = "vf_preds"
WEIGHTS_SEQ_NO = "weights_seq_no"
AGENT_ID = "agent_id"
"""Multi-agent batches: the agent id of each row as text (``agent_index`` is its number)."""

COLUMNS = (
    OBS,
    NEW_OBS,
    ACTIONS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
    EPS_ID,
    ENV_ID,
    AGENT_INDEX,
    T,
    ACTION_LOGP,
    ACTION_DIST_INPUTS,
    VF_PREDS,
    WEIGHTS_SEQ_NO,
)


class SampleBatch(Mapping[str, np.ndarray]):
    """Rows of experience as equal-length numpy columns.

    Rows of one sub-environment are contiguous and in time order; ``eps_id`` and ``t``
    (the step index within the episode) locate each row in its episode.
    """

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: Mapping[str, Any] | None = None) -> None:
        self._columns: dict[str, np.ndarray] = {}
        self._rows = 0
        for index, (name, value) in enumerate((columns or {}).items()):
            array = np.asarray(value)
            if array.ndim == 0:
                raise ValueError(f"column {name!r} is a scalar; every column needs one entry per row")
            if index == 0:
                self._rows = len(array)
            elif len(array) != self._rows:
                raise ValueError(f"column {name!r} has {len(array)} rows, expected {self._rows}")
            self._columns[name] = array

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return self._rows

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self._columns.items())
        return f"SampleBatch({self._rows} rows; {shapes})"

    @property
    def count(self) -> int:
        """Number of rows (RLlib's name)."""
        return self._rows

    @property
    def columns(self) -> dict[str, np.ndarray]:
        return dict(self._columns)

    agent_ids: tuple[str, ...] = ()
    """No agent ids: a single-agent batch (a :class:`MultiAgentBatch` names its agents)."""

    def env_steps(self) -> int:
        return self._rows

    def by_policy(self) -> dict[str, SampleBatch]:
        """``{"default": self}``: the one policy's part, as :meth:`MultiAgentBatch.by_policy` gives each policy's."""
        return {DEFAULT_POLICY: self}

    def rows(self, index: Any) -> SampleBatch:
        """A batch of the selected rows (a slice, a boolean mask or indices)."""
        return SampleBatch({k: v[index] for k, v in self._columns.items()})

    def split_by_episode(self) -> list[SampleBatch]:
        """One batch per contiguous run of equal ``eps_id`` (each a chunk of one episode)."""
        if self._rows == 0:
            return []
        eps = self._columns[EPS_ID]
        starts = np.flatnonzero(np.r_[True, eps[1:] != eps[:-1]])
        ends = np.r_[starts[1:], self._rows]
        return [self.rows(slice(s, e)) for s, e in zip(starts, ends, strict=True)]

    @staticmethod
    def concat(batches: Iterable[Mapping[str, np.ndarray]]) -> SampleBatch:
        """Row-wise concatenation; all batches must have the same columns."""
        batches = [b for b in batches]
        if not batches:
            return SampleBatch()
        names = list(batches[0])
        for other in batches[1:]:
            if set(other) != set(names):
                raise ValueError(f"cannot concat batches with columns {names} and {list(other)}")
        if len(batches) == 1:
            return SampleBatch(batches[0])
        return SampleBatch({n: np.concatenate([b[n] for b in batches]) for n in names})
