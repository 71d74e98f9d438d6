"""The env call in progress, stamped for a watchdog: which call, which sub-env, since when.

The sampling code marks each env constructor, ``reset`` and ``step`` it makes (all from one
thread: the worker's sampling loop) with :data:`ENV_CALL`; a watchdog thread reads the
stamp (:mod:`rolloutfleet.fleet.env_watchdog`). A stamp is one tuple swapped in place, so a
reader never sees half of one, and marking costs a clock read and an assignment.

    >>> stamp = CallStamp()
    >>> with stamp.calling("reset", 2, now=10.0):
    ...     overdue(stamp.current, now=400.0, timeout_s=300.0)
    StuckCall(call='reset', sub_env=2, since=10.0, running_s=390.0)
    >>> stamp.current is None
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

SubEnv = int | Callable[[], int | None] | None
"""A sub-env index, ``None`` for the whole vector env, or a function telling it when asked
(``async``: the env process says which of its sub-envs it is in)."""


@dataclass(frozen=True)
class StuckCall:
    call: str
    """``constructor``, ``reset`` or ``step``."""
    sub_env: int | None
    since: float
    """``time.monotonic()`` when the call began."""
    running_s: float

    def describe(self, env: str, timeout_s: float) -> str:
        """One line: ``spec.env.id 'X-v0': sub-env 2 step has not returned after 300 s ...``."""
        where = "the vector env" if self.sub_env is None else f"sub-env {self.sub_env}"
        return (
            f"{env}: {where} {self.call} has not returned after {self.running_s:.0f} s "
            f"(spec.env.callTimeoutSeconds is {timeout_s:g})"
        )


class CallStamp:
    """The call in progress (``current``: (call, sub-env, since) or None)."""

    def __init__(self) -> None:
        self.current: tuple[str, SubEnv, float] | None = None

    def begin(self, call: str, sub_env: SubEnv = None, now: float | None = None) -> None:
        self.current = (call, sub_env, time.monotonic() if now is None else now)

    def end(self) -> None:
        self.current = None

    @contextmanager
    def calling(self, call: str, sub_env: SubEnv = None, now: float | None = None) -> Iterator[None]:
        """Stamp the call for the ``with`` block; a nested call restores the outer stamp."""
        outer = self.current
        self.begin(call, sub_env, now)
        try:
            yield
        finally:
            self.current = outer


def overdue(current: tuple[str, SubEnv, float] | None, now: float, timeout_s: float) -> StuckCall | None:
    """The call of ``current`` when it has run ``timeout_s`` or longer, else None."""
    if current is None or now - current[2] < timeout_s:
        return None
    return stuck(current, now)


def stuck(current: tuple[str, SubEnv, float], now: float) -> StuckCall:
    call, sub_env, since = current
    index = sub_env() if callable(sub_env) else sub_env
    return StuckCall(call, index, since, now - since)


ENV_CALL = CallStamp()
"""The sampling loop's stamp (one per process: env calls come from one thread)."""


def watched_creator(create: Callable[[int], T]) -> Callable[[int], T]:
    """``create`` whose every call is stamped as sub-env ``index``'s constructor."""

    def create_watched(index: int) -> T:
        with ENV_CALL.calling("constructor", index):
            return create(index)

    return create_watched
