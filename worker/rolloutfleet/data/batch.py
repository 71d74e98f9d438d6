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
EXPLORATION_SCALE = "exploration_scale"
"""Only with ``policy.exploration`` other than ``stochastic``: the ε or σ each row's action was
taken with (0 when not exploring, NaN for uniform random actions)."""
ACTION_MASK = "action_mask"
"""Observations with an ``action_mask`` (turn-based games): the legal actions of each row's
``obs`` (bool, one per action); actions were sampled among these, and a learner applies the
same mask to its logits. Absent for unmasked observations."""
STATE_IN = "state_in_"
"""Stateful models: column ``state_in_<k>`` holds part k of the model state each row's action
was taken with (``(rows, *part_shape)``; an LSTM's ``h`` is part 0, ``c`` part 1). A row at
``t == 0`` holds the model's initial state; replaying an episode's ``obs`` from there through
the model gives every later row's ``state_in``."""
STATE_OUT = "state_out_"
"""With ``policy.stateOut``: column ``state_out_<k>``, the state after each row's step."""


def state_columns(batch: Mapping[str, Any], prefix: str = STATE_IN) -> list[str]:
    """The ``state_in_<k>`` (or ``state_out_<k>``) column names of a batch, in part order.

    >>> state_columns({"obs": 0, "state_in_1": 0, "state_in_0": 0})
    ['state_in_0', 'state_in_1']
    """
    names = [name for name in batch if name.startswith(prefix) and name[len(prefix) :].isdigit()]
    return sorted(names, key=lambda name: int(name[len(prefix) :]))


def state_column_names(parts: int, state_out: bool = False) -> tuple[str, ...]:
    """``state_in_0`` ... (then ``state_out_0`` ... with ``state_out``) for a state of ``parts`` parts."""
    names = tuple(f"{STATE_IN}{k}" for k in range(parts))
    return names + (tuple(f"{STATE_OUT}{k}" for k in range(parts)) if state_out else ())


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


def _bad_rows(column: np.ndarray | None) -> np.ndarray | None:
    """Rows of ``column`` holding a NaN or an infinity (None: not a float column)."""
    if column is None or not np.issubdtype(column.dtype, np.floating):
        return None
    if len(column) == 0:  # a policy that acted in no row of this fragment (reshape(0, -1) is refused)
        return np.zeros(0, bool)
    return ~np.isfinite(column.reshape(len(column), -1)).all(axis=1)


def nonfinite_rows(batch: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(rows whose ``obs`` or ``new_obs`` (or their leaves ``obs/<path>``) hold a NaN or an
    infinity, rows whose reward does).

    >>> nonfinite_rows({"obs": np.array([[0.0], [np.nan]]), "new_obs": np.array([[np.inf], [1.0]]),
    ...                 "rewards": np.array([1.0, np.nan], np.float32)})
    (2, 1)
    """
    bad_obs: np.ndarray | None = None
    leaves = (f"{OBS}/", f"{NEW_OBS}/")  # a Dict/Tuple observation's leaf columns
    for name in [name for name in batch if name in (OBS, NEW_OBS) or name.startswith(leaves)]:
        rows = _bad_rows(batch.get(name))
        if rows is not None:
            bad_obs = rows if bad_obs is None else bad_obs | rows
    bad_rewards = _bad_rows(batch.get(REWARDS))
    return (
        0 if bad_obs is None else int(np.count_nonzero(bad_obs)),
        0 if bad_rewards is None else int(np.count_nonzero(bad_rewards)),
    )
