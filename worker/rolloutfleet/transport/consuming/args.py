"""The learner API's arguments checked at the call: a ``ValueError`` naming the argument
and what it may be, instead of a read that never returns or a batch that is silently empty.
Pure: no Redis."""

from __future__ import annotations

import math
import numbers
from typing import Any


def count_arg(name: str, value: Any, minimum: int) -> int:
    """``value`` as a whole number of at least ``minimum``.

    >>> count_arg("min_steps", 0, 0)
    0
    >>> count_arg("min_steps", -1, 0)
    Traceback (most recent call last):
    ...
    ValueError: min_steps must be a whole number >= 0, got -1
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def seconds_arg(name: str, value: Any, zero: bool = True, finite: bool = False) -> float:
    """``value`` as seconds: a number >= 0 (> 0 unless ``zero``), not NaN (not inf if ``finite``).

    >>> seconds_arg("timeout", 0), seconds_arg("timeout", 2)
    (0.0, 2.0)
    >>> seconds_arg("block_s", 0, zero=False)
    Traceback (most recent call last):
    ...
    ValueError: block_s must be a number of seconds > 0, got 0
    """
    bound = ">= 0" if zero else "> 0"
    numeric = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not numeric or math.isnan(value) or value < 0 or (not zero and value == 0) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}number of seconds {bound}, got {value!r}")
    return float(value)


def consumer_args(
    reclaim_idle_s: float,
    max_deliveries: int,
    read_count: int,
    block_s: float,
    reconnect_timeout_s: float,
    max_policy_lag: int | None,
) -> None:
    """``ValueError`` naming the first of ``BatchConsumer``'s arguments that is out of range."""
    seconds_arg("reclaim_idle_s", reclaim_idle_s, zero=False)
    count_arg("max_deliveries", max_deliveries, 1)
    count_arg("read_count", read_count, 1)
    seconds_arg("block_s", block_s, zero=False, finite=True)
    seconds_arg("reconnect_timeout_s", reconnect_timeout_s)
    if max_policy_lag is not None:
        count_arg("max_policy_lag", max_policy_lag, 0)


def entries_needed(missing_rows: int, entry_rows: int, read_count: int) -> int:
    """How many entries a ``get(max_steps=...)`` reads for ``missing_rows`` more rows: by the rows
    an entry held last (``entry_rows``; 0: unknown, one entry), at most ``read_count``. A rank
    of a data-parallel learner that took more would hold rows its peers wait for, and the
    room of a ``block`` fleet with them.

    >>> entries_needed(2048, 0, 16), entries_needed(2048, 1600, 16), entries_needed(2048, 10, 16)
    (1, 2, 16)
    """
    if missing_rows <= 0:
        return 1
    return min(read_count, -(-missing_rows // entry_rows)) if entry_rows else 1
