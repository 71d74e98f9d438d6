"""Where a vector step's time goes, over the last ``sample()`` call (RLlib's perf stats).

Three phases, as mean milliseconds per vector step in ``runner.get_metrics()``:
``timers/inference_ms`` (the policy acting on every sub-env's observation), ``timers/env_wait_ms``
(the vector env's ``step``: sub-envs, env processes, or the C++ pool) and ``timers/recording_ms``
(the rest of ``sample()``: writing rows, episode bookkeeping and callbacks, cutting the batch),
with ``timers/vector_steps``, the steps they average over. The worker adds the fourth phase,
publishing the batch (``rolloutfleet_vector_step_seconds{phase="publish"}``). Runners that do not
time their steps (multi-agent, external) report none of these.
"""

from __future__ import annotations

PHASES = ("inference", "env_wait", "recording")


class StepTiming:
    """Sums for the current ``sample()`` call; :meth:`metrics` reports the last finished one."""

    __slots__ = ("_last", "env_wait_s", "inference_s", "steps")

    def __init__(self) -> None:
        self.inference_s = self.env_wait_s = 0.0
        self.steps = 0
        self._last: dict[str, float | int] = {}

    def begin(self) -> None:
        """A ``sample()`` call starts."""
        self.inference_s = self.env_wait_s = 0.0
        self.steps = 0

    def add(self, inference_s: float, env_wait_s: float, steps: int) -> None:
        """A runner's chunk of ``steps`` vector steps spent these seconds acting and waiting for envs."""
        self.inference_s += inference_s
        self.env_wait_s += env_wait_s
        self.steps += steps

    def end(self, total_s: float) -> None:
        """The call took ``total_s`` seconds in all; what inference and env waits did not take is recording."""
        if self.steps == 0:
            return
        per_step = 1e3 / self.steps
        recording = max(total_s - self.inference_s - self.env_wait_s, 0.0)
        self._last = {
            "timers/inference_ms": self.inference_s * per_step,
            "timers/env_wait_ms": self.env_wait_s * per_step,
            "timers/recording_ms": recording * per_step,
            "timers/vector_steps": self.steps,
        }

    def metrics(self) -> dict[str, float | int]:
        """The last finished call's ``timers/...`` (empty before one, or when nothing timed it)."""
        return dict(self._last)
