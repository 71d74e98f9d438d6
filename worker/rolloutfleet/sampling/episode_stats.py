"""What every runner counts and reports: episode returns and lengths over the last
:data:`WINDOW` episodes, steps and sampling time per period (between two ``get_metrics``
calls), lifetime counters that survive ``get_state``/``set_state``.

A runner records as it samples and asks for the metrics::

    stats = EpisodeStats(agent_steps=False)
    stats.episodes(returns, lengths)       # the episodes that ended this step (arrays)
    stats.period.env_steps += transitions
    metrics = stats.metrics()              # and the next period begins

Multi-agent runners also count agent steps and keep windows of returns per agent and per
policy (``agent/<id>/episode_return_mean``, ``policy/<id>/episode_return_mean``).

Custom per-episode values a callback sets (``runner.custom_metrics(env_index)["lap_time"]``)
are windowed per key over the last :data:`WINDOW` episodes that set it:
``custom/lap_time_mean``, ``_min`` and ``_max``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

WINDOW = 100
"""Episodes behind ``episode_return_mean`` and friends (RLlib's ``metrics_num_episodes_for_smoothing``)."""


class Period:
    """Counters since the previous ``get_metrics`` call."""

    __slots__ = (
        "agent_steps", "custom", "custom_rejected", "dropped", "env_steps", "keyed_returns", "lengths", "returns",
        "seconds", "truncated_by_max_steps",
    )  # fmt: skip

    def __init__(self) -> None:
        self.returns: list[np.ndarray] = []  # arrays of episode returns, in the order they ended
        self.lengths: list[np.ndarray] = []
        self.keyed_returns: dict[str, dict[str, list[float]]] = {}  # "agent"/"policy" -> id -> returns
        self.env_steps = 0
        self.agent_steps = 0
        self.seconds = 0.0
        self.dropped = 0
        self.truncated_by_max_steps = 0  # episodes the runner cut at spec.multiAgent.maxEpisodeSteps
        self.custom: dict[str, list[float]] = {}  # key -> the values episodes set, in the order they ended
        self.custom_rejected = 0  # values that were not finite numbers

    def num_episodes(self) -> int:
        return sum(len(r) for r in self.returns)


class EpisodeStats:
    """Episode statistics and counters of one runner."""

    def __init__(self, agent_steps: bool = False) -> None:
        self.agent_steps = agent_steps
        self.period = Period()
        self.returns: deque[float] = deque(maxlen=WINDOW)
        self.lengths: deque[int] = deque(maxlen=WINDOW)
        self.keyed_returns: dict[str, dict[str, deque[float]]] = {}
        self.custom: dict[str, deque[float]] = {}
        self.lifetime_env_steps = 0
        self.lifetime_agent_steps = 0
        self.lifetime_episodes = 0
        self.env_restarts = 0

    def episodes(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Episodes that ended, with their returns and lengths (env steps)."""
        if len(returns):
            self.period.returns.append(returns)
            self.period.lengths.append(lengths)

    def episode(self, total: float, length: int, keyed: Mapping[str, Mapping[str, float]]) -> None:
        """One multi-agent episode: its summed return, length, and returns per agent / per policy."""
        self.episodes(np.array([total]), np.array([length]))
        for kind, values in keyed.items():
            by_id = self.period.keyed_returns.setdefault(kind, {})
            for key, value in values.items():
                by_id.setdefault(key, []).append(value)

    def custom_values(self, values: Mapping[str, Any]) -> None:
        """The custom metrics one episode set; values that are not finite numbers are counted
        (``num_custom_metrics_rejected``), not kept."""
        for key, value in values.items():
            number = (
                float(value) if isinstance(value, int | float | np.number) and not isinstance(value, bool) else None
            )
            if number is None or not math.isfinite(number):
                self.period.custom_rejected += 1
                continue
            self.period.custom.setdefault(str(key), []).append(number)

    def get_state(self) -> dict[str, int]:
        state = {
            "num_env_steps_sampled_lifetime": self.lifetime_env_steps,
            "num_episodes_lifetime": self.lifetime_episodes + self.period.num_episodes(),
        }
        if self.agent_steps:
            state["num_agent_steps_sampled_lifetime"] = self.lifetime_agent_steps
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.lifetime_env_steps = int(state.get("num_env_steps_sampled_lifetime", self.lifetime_env_steps))
        self.lifetime_agent_steps = int(state.get("num_agent_steps_sampled_lifetime", self.lifetime_agent_steps))
        if "num_episodes_lifetime" in state:
            # The open period's episodes are added by the next metrics(): leave room for them,
            # so a runner that has sampled since its last metrics() reports the given count.
            self.lifetime_episodes = int(state["num_episodes_lifetime"]) - self.period.num_episodes()

    def metrics(self) -> dict[str, float | int]:
        """Window statistics and this period's counters; starts the next period."""
        period, self.period = self.period, Period()
        returns = np.concatenate(period.returns) if period.returns else np.zeros(0)
        lengths = np.concatenate(period.lengths) if period.lengths else np.zeros(0, np.int64)
        self.returns.extend(returns.tolist())
        self.lengths.extend(lengths.tolist())
        self.lifetime_episodes += len(returns)
        window = np.array(self.returns)
        nan = float("nan")
        per_s = 1.0 / period.seconds if period.seconds > 0 else 0.0
        metrics: dict[str, float | int] = {
            "episode_return_mean": float(window.mean()) if len(window) else nan,
            "episode_return_min": float(window.min()) if len(window) else nan,
            "episode_return_max": float(window.max()) if len(window) else nan,
            "episode_len_mean": float(np.mean(self.lengths)) if self.lengths else nan,
            "num_episodes": len(returns),
            "num_env_steps_sampled": period.env_steps,
            "env_steps_per_s": period.env_steps * per_s,
            "num_episodes_dropped": period.dropped,
            "num_episodes_truncated_by_max_steps": period.truncated_by_max_steps,
            "num_env_steps_sampled_lifetime": self.lifetime_env_steps,
            "num_episodes_lifetime": self.lifetime_episodes,
            "num_env_restarts": self.env_restarts,
        }
        if self.agent_steps:
            metrics["num_agent_steps_sampled"] = period.agent_steps
            metrics["agent_steps_per_s"] = period.agent_steps * per_s
            metrics["num_agent_steps_sampled_lifetime"] = self.lifetime_agent_steps
        for kind, by_id in period.keyed_returns.items():
            windows = self.keyed_returns.setdefault(kind, {})
            for key, values in by_id.items():
                windows.setdefault(key, deque(maxlen=WINDOW)).extend(values)
        for kind, windows in self.keyed_returns.items():
            for key, values_window in windows.items():
                metrics[f"{kind}/{key}/episode_return_mean"] = float(np.mean(values_window))
        for key, values in period.custom.items():
            self.custom.setdefault(key, deque(maxlen=WINDOW)).extend(values)
        for key, custom_window in self.custom.items():
            metrics[f"custom/{key}_mean"] = float(np.mean(custom_window))
            metrics[f"custom/{key}_min"] = float(np.min(custom_window))
            metrics[f"custom/{key}_max"] = float(np.max(custom_window))
        if period.custom_rejected:
            metrics["num_custom_metrics_rejected"] = period.custom_rejected
        return metrics
