"""``spec.evaluation``: workers that judge each new weights version instead of sampling for it.

Like RLlib's evaluation env runners: ``workers`` pods (or local processes) follow the
newest weights, play ``episodes`` whole episodes of each version they see, without
exploration unless ``explore`` says so, and publish one result per version (return mean
with a 95 % confidence interval, mean length) to the job's Redis, never to its batch stream.
Episode ``i`` of every version starts from ``env.reset(seed=seed + i)``: versions are
compared on the same starts (the training workers' seeds come from ``spec.sampling.seed``).

>>> EvaluationSpec(episodes=20).seed, EvaluationSpec().explore
(1000000, False)
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rolloutfleet.spec.model_base import SpecModel

MAX_EVALUATION_WORKERS = 64
MAX_EVALUATION_EPISODES = 100_000
DEFAULT_EVALUATION_SEED = 1_000_000
"""Far from the small seeds people give ``spec.sampling.seed``: evaluation starts differ from training's."""


class EvaluationSpec(SpecModel):
    """How many evaluation workers, and how each weights version is judged."""

    workers: int = Field(default=1, ge=0, le=MAX_EVALUATION_WORKERS)
    """Evaluation workers (pods; processes under ``rolloutfleet run``); they share each version's episodes."""
    episodes: int = Field(default=10, ge=1, le=MAX_EVALUATION_EPISODES)
    """Whole episodes played per weights version, over all evaluation workers together."""
    explore: bool = False
    """Act as ``policy.exploration`` says (True) or take the most likely action (False, the default)."""
    seed: int = Field(default=DEFAULT_EVALUATION_SEED, ge=0)
    """Episode ``i`` of each version starts from ``reset(seed=seed + i)``."""
    env_config: dict[str, Any] = Field(default_factory=dict)
    """Merged over ``spec.env.config`` for the evaluation envs only (e.g. a harder level)."""
    max_episode_steps: int | None = Field(default=None, ge=1)
    """Cut an episode after this many steps (counted as truncated); unset: the env's own limit."""
