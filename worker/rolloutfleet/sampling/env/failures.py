"""Envs that fail: a budget of consecutive failures per sub-env, the one line a worker ends
with (:class:`EnvFailed`, a :class:`SpecError`: exit 3), and the stop that turns the next
failure into the end of sampling (:func:`interrupt_failing_envs`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rolloutfleet.spec.job import EnvSpec, SpecError

_STOPPING = threading.Event()


class EnvFailed(SpecError):
    """An env kept failing (or could not be reset): the worker ends with exit 3 and this line."""


class EnvInterrupted(Exception):
    """An env failed after a stop was requested: sampling ends instead of recreating it."""


def interrupt_failing_envs() -> None:
    """From now on, an env failure ends sampling (:class:`EnvInterrupted`); safe in a signal handler."""
    _STOPPING.set()


def stop_requested() -> bool:
    """Whether :func:`interrupt_failing_envs` was called (a runner waiting on clients stops waiting)."""
    return _STOPPING.is_set()


def env_name(spec: EnvSpec) -> str:
    """``spec.env.id 'CartPole-v1'`` or ``spec.env.entryPoint 'pkg.mod:make'``: how one line names the env."""
    return f"spec.env.id {spec.id!r}" if spec.id is not None else f"spec.env.entryPoint {spec.entry_point!r}"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


class FailureBudget:
    """Consecutive failures per sub-env (``None``: the whole vector env) without a successful step.

    A success is reported either with :meth:`succeeded`, or by passing ``progress`` (any count
    that grows with successful steps) to :meth:`failed`: a failure after progress starts a
    new streak. ``limit`` 1 (or ``restart`` False) makes the first failure final.

    >>> budget = FailureBudget(2, "spec.env.id 'X-v0'")
    >>> budget.failed(0, RuntimeError("boom"))
    >>> budget.failed(0, RuntimeError("boom"))
    Traceback (most recent call last):
    ...
    rolloutfleet.sampling.env.failures.EnvFailed: spec.env.id 'X-v0': sub-env 0 failed 2 times in a row without a successful step; last error: RuntimeError: boom
    """

    def __init__(self, limit: int, name: str, restart: bool = True) -> None:
        self.limit = limit if restart else 1
        self.name = name
        self.streak: dict[int | None, tuple[int, int | None]] = {}  # index -> (failures, progress at the last)

    def failed(self, index: int | None, exc: BaseException, progress: int | None = None) -> None:
        """Count a failure; raises :class:`EnvFailed` at the limit, :class:`EnvInterrupted` when
        stopping. ``exc`` that is already one of them (a sub-env's verdict reaching the runner's
        vector-env handler) is raised again, not counted."""
        if isinstance(exc, EnvFailed | EnvInterrupted):
            raise exc
        count, seen = self.streak.get(index, (0, progress))
        count = count + 1 if seen == progress else 1
        self.streak[index] = (count, progress)
        where = "the vector env" if index is None else f"sub-env {index}"
        if count >= self.limit:
            if self.limit == 1:
                raise EnvFailed(f"{self.name}: {where} failed (restartFailedSubEnvs is false): {describe(exc)}")
            raise EnvFailed(
                f"{self.name}: {where} failed {count} times in a row without a successful step; "
                f"last error: {describe(exc)}"
            )
        if _STOPPING.is_set():
            raise EnvInterrupted(f"{where} failed while stopping: {describe(exc)}")

    def succeeded(self, index: int | None) -> None:
        self.streak.pop(index, None)


def reset_or_fail(reset: Callable[..., Any], name: str, where: str, **kwargs: Any) -> Any:
    """``reset(**kwargs)``, with any error turned into :class:`EnvFailed` naming the env."""
    try:
        return reset(**kwargs)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
        raise EnvFailed(f"{name}: {where} reset failed: {describe(exc)}") from None
