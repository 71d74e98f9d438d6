"""Whole episodes from rows that arrive in fragments, from many workers, in any order
(pure: numpy only).

An episode is the rows of one ``eps_id`` (unique across workers and their restarts). It is
complete when it has a row that ends it (``terminateds`` or ``truncateds``) and one row for
every ``t`` from 0 to that row's. Its observations are the N+1 of Minari's convention: the
``obs`` of each row, then the ``new_obs`` of the last. An episode that ended with rows
missing (the recording began during it, or ``dropOldest`` trimmed a fragment before the
recorder read it) can never be completed: it is returned apart, to be counted, not written.

>>> cols = {"eps_id": np.array([7, 7, 9]), "t": np.array([1, 0, 0]),
...         "terminateds": np.array([True, False, False]), "truncateds": np.zeros(3, bool)}
>>> done, broken, open_rows = stitch(cols)
>>> [(e.eps_id, e.columns["t"].tolist()) for e in done], broken, open_rows["eps_id"].tolist()
([(7, [0, 1])], [], [9])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

EPS_ID, T, TERMINATEDS, TRUNCATEDS = "eps_id", "t", "terminateds", "truncateds"


@dataclass(frozen=True)
class Episode:
    eps_id: int
    columns: dict[str, np.ndarray]
    """Every column, one row per step, ordered by ``t``."""

    def __len__(self) -> int:
        return len(self.columns[T])

    @property
    def terminated(self) -> bool:
        return bool(self.columns[TERMINATEDS][-1])


def stitch(columns: Mapping[str, np.ndarray]) -> tuple[list[Episode], list[int], dict[str, np.ndarray]]:
    """The complete episodes among ``columns``' rows (ordered by where they end), the ids of
    episodes that ended with rows missing, and the rows of the episodes still open."""
    if not len(columns[EPS_ID]):
        return [], [], dict(columns)
    # Sort rows by (eps_id, t); a row seen twice (same eps_id and t) is kept once.
    order = np.lexsort((columns[T], columns[EPS_ID]))
    eps, t = columns[EPS_ID][order], columns[T][order]
    first = np.ones(len(order), bool)
    first[1:] = (eps[1:] != eps[:-1]) | (t[1:] != t[:-1])
    order, eps, t = order[first], eps[first], t[first]
    ends = columns[TERMINATEDS][order] | columns[TRUNCATEDS][order]
    starts = np.flatnonzero(np.r_[True, eps[1:] != eps[:-1]])
    stops = np.r_[starts[1:], len(order)]
    done: list[Episode] = []
    broken: list[int] = []
    keep_open: list[np.ndarray] = []
    for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        finished = np.flatnonzero(ends[start:stop])
        if not len(finished):
            keep_open.append(order[start:stop])
            continue
        last = start + int(finished[0])
        whole = int(t[start]) == 0 and int(t[last]) == last - start
        if not whole:
            broken.append(int(eps[start]))
            continue
        rows = order[start : last + 1]
        done.append(Episode(int(eps[start]), {name: column[rows] for name, column in columns.items()}))
    still_open = np.concatenate(keep_open) if keep_open else np.array([], np.int64)
    still_open.sort()  # arrival order
    return done, broken, {name: column[still_open] for name, column in columns.items()}


def observations(episode: Episode) -> np.ndarray:
    """The N+1 observations of an episode: each step's ``obs``, then the last ``new_obs``."""
    return np.concatenate([episode.columns["obs"], episode.columns["new_obs"][-1:]])
