"""``sampling.infos``: chosen entries of a vector env's ``info`` as typed grid columns.

Key ``k`` becomes two batch columns: ``infos/k``, the value (numeric scalar or fixed-shape
array; its dtype and shape are those of the first value seen), and ``infos/_k`` (bool): whether
the sub-env's info held ``k`` at that step, gymnasium's own ``_k`` convention for vector infos.
Where it did not, ``infos/k`` holds 0 (False for bools), as gymnasium's vector envs fill it.
A value that is not numeric, whose shape changes, or whose dtype does not cast to the column's
(numpy ``same_kind``: an int column takes no floats) stops sampling with one line naming the
key; so does cutting a batch before a key's first value (its type is not known yet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rolloutfleet.spec.job import SpecError

PREFIX = "infos/"


def value_column(key: str) -> str:
    """The batch column of info key ``key``'s values."""
    return f"{PREFIX}{key}"


def mask_column(key: str) -> str:
    """The batch column that says where info key ``key`` was present."""
    return f"{PREFIX}_{key}"


class Grid(Protocol):
    """What of :class:`~rolloutfleet.sampling.grid.Grid` this uses (the grid sits above the vector envs)."""

    num_envs: int
    capacity: int
    columns: dict[str, np.ndarray]
    specs: dict[str, tuple[tuple[int, ...], Any]]


def _error(key: str, what: str) -> SpecError:
    return SpecError(f"sampling.infos: info key {key!r} {what}")


def stack_infos(infos: Sequence[Mapping[str, Any] | None], keys: Sequence[str]) -> dict[str, Any]:
    """The vector info of sub-env infos (None: a sub-env that returned none), for ``keys`` only:
    per key an ``(num_envs, ...)`` array and its ``_key`` mask, as gymnasium's vector envs give them."""
    n, out = len(infos), {}
    for key in keys:
        present = np.fromiter((info is not None and key in info for info in infos), np.bool_, n)
        if not present.any():
            continue
        rows = np.flatnonzero(present)
        first = np.asarray(infos[rows[0]][key])  # type: ignore[index]
        values = np.zeros((n, *first.shape), first.dtype)
        for i in rows:
            value = np.asarray(infos[i][key])  # type: ignore[index]
            if value.shape != first.shape or not np.can_cast(value.dtype, first.dtype, "same_kind"):
                raise _error(
                    key, f"is {first.dtype}{list(first.shape)} in one sub-env, {value.dtype}{list(value.shape)} in {i}"
                )
            values[i] = value
        out[key], out["_" + key] = values, present
    return out


class InfoColumns:
    """Writes the chosen info keys of each vector step into ``grid`` (columns added on first sight)."""

    def __init__(self, keys: Sequence[str], grid: Grid) -> None:
        self.keys = tuple(keys)
        self._grid = grid
        self._masks = tuple(("_" + key, mask_column(key), value_column(key)) for key in self.keys)

    def record(self, s: int, info: Mapping[str, Any]) -> None:
        """Grid row ``s``'s values (``info``: what the vector env's step returned)."""
        cols = self._grid.columns
        for key, (flag, mask_name, name) in zip(self.keys, self._masks, strict=True):
            raw = info.get(key)
            column = cols.get(name)
            if raw is None:
                if column is not None:
                    column[s] = 0
                    cols[mask_name][s] = False
                continue
            value = np.asarray(raw)
            if column is None:
                column = self._add(key, value)
            elif value.shape[1:] != column.shape[2:] or not np.can_cast(value.dtype, column.dtype, "same_kind"):
                raise _error(
                    key,
                    f"changed from {column.dtype}{list(column.shape[2:])} to {value.dtype}{list(value.shape[1:])}; "
                    "an info column keeps the dtype and shape of its first value",
                )
            present = info.get(flag)
            column[s] = value
            if present is None:
                cols[mask_name][s] = True
            else:
                cols[mask_name][s] = present
                column[s][~np.asarray(present, np.bool_)] = 0

    def _add(self, key: str, value: np.ndarray) -> np.ndarray:
        n = self._grid.num_envs
        if value.dtype.kind not in "biuf" or value.ndim == 0 or value.shape[0] != n:
            raise _error(key, f"holds {value.dtype} {list(value.shape)}: record numeric scalars or fixed-shape arrays")
        grid, shape = self._grid, value.shape[1:]
        grid.specs[value_column(key)] = (shape, value.dtype)
        grid.specs[mask_column(key)] = ((), np.bool_)
        capacity = max(grid.capacity, 1)
        grid.columns[mask_column(key)] = np.zeros((capacity, n), np.bool_)
        column = grid.columns[value_column(key)] = np.zeros((capacity, n, *shape), value.dtype)
        return column

    def batch_names(self) -> list[str]:
        """The batch columns, once every key has had a value (else a one-line error)."""
        names: list[str] = []
        for key in self.keys:
            if value_column(key) not in self._grid.columns:
                raise _error(
                    key,
                    "was in no sub-env's info before the first batch was cut, so its type is unknown; "
                    "check the key, or make the env report it from its first step",
                )
            names += [value_column(key), mask_column(key)]
        return names
