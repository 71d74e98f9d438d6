"""Callbacks the worker tests load by entry point (``spec.sampling.callbacks``)."""

from __future__ import annotations

from typing import Any

from rolloutfleet import Callbacks


class ReturnCheck(Callbacks):
    """Sums each episode's rewards itself, and at the end sets its custom metrics: ``steps``
    (the rewards it saw) and ``return_gap`` (the runner's return minus its own sum: 0)."""

    def on_episode_step(self, *, runner: Any, env_index: int, reward: float, **kwargs: Any) -> None:
        custom = runner.custom_metrics(env_index)
        custom["steps"] = custom.get("steps", 0) + 1
        custom["reward_sum"] = custom.get("reward_sum", 0.0) + reward

    def on_episode_end(self, *, runner: Any, env_index: int, episode_return: float, **kwargs: Any) -> None:
        custom = runner.custom_metrics(env_index)
        custom["return_gap"] = episode_return - custom.pop("reward_sum")
