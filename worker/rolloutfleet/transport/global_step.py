"""The learner's global step through Redis: exploration schedules (ε, noise σ) follow it.

One small key per job (``rolloutfleet:{<ns>/<job>}:global-step``, a decimal integer),
written by the learner whenever it likes and read by each worker between fragments, as it
polls the weights version (one GET)::

    steps = GlobalStepPublisher("redis://127.0.0.1:6379/0", "cartpole")   # doctest: +SKIP
    steps.set_global_step(learner_env_steps)                             # doctest: +SKIP

A worker whose job has no schedule never reads it.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

from rolloutfleet.data.codec import DecodeError
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import JobClient
from rolloutfleet.transport.redis.errors import Client
from rolloutfleet.transport.redis.keys import JobKeys, job_keys

log = logging.getLogger(__name__)


def parse_global_step(raw: Any, key: str) -> int | None:
    """The step a GET of ``key`` returned (None: never set); ``DecodeError`` for anything else."""
    if raw is None:
        return None
    try:
        step = int(raw)
    except ValueError:
        raise DecodeError(f"{key} holds {raw[:40]!r}, expected a non-negative integer global step") from None
    if step < 0:
        raise DecodeError(f"{key} holds {step}, expected a non-negative integer global step")
    return step


class GlobalStepPublisher(JobClient):
    """Learner side: :meth:`set_global_step` publishes the step the job's schedules follow."""

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        *,
        password: str | None = None,
        reconnect_timeout_s: float = 30.0,
    ) -> None:
        if isinstance(job, RolloutJob):
            namespace, job = job.namespace, job.name
        self.keys = job_keys(namespace, job)
        super().__init__(redis_url, password, reconnect_timeout_s=reconnect_timeout_s)

    def set_global_step(self, step: int) -> None:
        """Make ``step`` (an integer >= 0, e.g. the env steps trained on; numpy and torch integers
        too) the job's global step."""
        try:
            value = operator.index(step)
        except TypeError:
            raise ValueError(f"global step must be an integer >= 0, got {step!r}") from None
        if isinstance(step, bool) or value < 0:
            raise ValueError(f"global step must be an integer >= 0, got {step!r}")
        self._retry.call(lambda: self.client.set(self.keys.global_step, value))


class GlobalStepReader:
    """Worker side: :meth:`poll` returns the global step when it differs from the last one returned."""

    def __init__(self, client: Client, keys: JobKeys) -> None:
        self.client = client
        self.key: str = keys.global_step
        self.step: int | None = None
        self.refused = 0
        """Distinct values of the key that were not a step (each logged once)."""
        self._refused: Any = None

    def poll(self) -> int | None:
        """One GET; the step if it changed since the last poll, else None. A value that is not
        a step (written by hand, or by a learner of another kind) is logged once and ignored:
        the schedules stay where they are, and the worker keeps sampling."""
        raw = self.client.get(self.key)
        try:
            step = parse_global_step(raw, self.key)
        except DecodeError as exc:
            if raw != self._refused:
                self._refused = raw
                self.refused += 1
                log.warning("%s; keeping global step %s", exc, self.step)
            return None
        if step is None or step == self.step:
            return None
        self.step = step
        return step
