"""Whole evaluation episodes with one policy: reset with a given seed, act, step to the end.

The env is built as a training worker builds a sub-env (``spec.env``, its wrappers, with
``spec.evaluation.envConfig`` merged over its config); the policy is the job's, acting
without exploration unless ``spec.evaluation.explore``. A ``meanStd`` job's observations
are normalized by statistics the caller sets (the fleet's), never updated here::

    player = EpisodePlayer(job)
    player.policy.set_weights(weights, seq_no=3)
    episode_return, length = player.play(seed=1_000_000)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import concatenate, create_empty_array

from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.inference.policy import Policy
from rolloutfleet.sampling.vector.make import env_build_errors, env_creator, env_name, reset_or_fail
from rolloutfleet.sampling.vector_policy import VectorPolicy
from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.evaluation import EvaluationSpec

ALIVE_EVERY = 256


def evaluation_spec(job: RolloutJob) -> EvaluationSpec:
    """``spec.evaluation``, or its defaults for a job without one (``rolloutfleet evaluate``)."""
    return job.spec.evaluation or EvaluationSpec()


class EpisodePlayer:
    """One env and the job's policy, for evaluation worker ``index`` of ``count``."""

    def __init__(self, job: RolloutJob, index: int = 0, count: int = 1) -> None:
        spec = job.spec
        if spec.multi_agent is not None or spec.env.external is not None:
            raise SpecError("spec.evaluation: evaluates single-agent envs the worker steps")
        self.evaluation = evaluation_spec(job)
        env_spec = spec.env.model_copy(update={"config": {**spec.env.config, **self.evaluation.env_config}})
        self.name = env_name(env_spec)
        # One line naming the field, not a traceback: the evaluation's own envConfig when it has one.
        with env_build_errors(env_spec, "spec.evaluation.envConfig" if self.evaluation.env_config else None):
            self.env = env_creator(env_spec, index, count)(0)
        self.policy = Policy(spec.policy, self.env.observation_space, self.env.action_space,
                             seed=self.evaluation.seed + index, worker=(index, count))  # fmt: skip
        self.filter: MeanStdFilter | None = None
        if spec.sampling.observation_filter == "meanStd":
            space = self.env.observation_space
            if not isinstance(space, spaces.Box):
                raise SpecError(f"spec.sampling.observationFilter: meanStd normalizes Box observations, not {space}")
            self.filter = MeanStdFilter(space.shape)
        box = self.env.action_space
        self._clip = (box.low, box.high) if spec.sampling.clip_actions and isinstance(box, spaces.Box) else None
        self._vector = VectorPolicy(self.policy, 1)
        self._batch: Any = create_empty_array(self.env.observation_space, 1)
        self.alive: Callable[[], None] = lambda: None
        """Called every :data:`ALIVE_EVERY` steps: a long episode is no stalled worker."""

    def play(self, seed: int) -> tuple[float, int]:
        """(return, length) of one whole episode started by ``reset(seed=seed)``; cut after
        ``spec.evaluation.maxEpisodeSteps`` steps when that is set."""
        explore = self.evaluation.explore
        limit = self.evaluation.max_episode_steps
        obs, _ = reset_or_fail(self.env.reset, self.name, "the evaluation env", seed=seed)
        vector = self._vector
        vector.restart_state(np.ones(1, np.bool_))
        noise = self.policy.noise_state(explore)
        if noise is not None:
            noise.reset(np.ones(1, np.bool_))
        act = vector.act(explore, False)
        stateful = vector.stateful_act(explore, False, self._state_columns()) if vector.state else None
        total, steps = 0.0, 0
        while True:
            batch = self._batched(obs)
            actions = (act(batch) if stateful is None else stateful(batch, 0))[0]
            action = actions[0] if self._clip is None else np.clip(actions[0], *self._clip)
            obs, reward, terminated, truncated, _ = self.env.step(action)
            total += float(reward)
            steps += 1
            if steps % ALIVE_EVERY == 0:
                self.alive()
            if terminated or truncated or (limit is not None and steps >= limit):
                return total, steps

    def _batched(self, obs: Any) -> Any:
        """``obs`` as a batch of one (Dict and Tuple observations leaf by leaf), filtered."""
        batch: Any = concatenate(self.env.observation_space, [obs], self._batch)
        return batch if self.filter is None else self.filter(batch, update=False)

    def _state_columns(self) -> dict[str, np.ndarray]:
        """Scratch rows where a stateful model's act records its state (one row: nothing kept)."""
        names = self._vector.state_names
        parts = self._vector.state
        return {name: np.empty_like(parts[i % len(parts)]) for i, name in enumerate(names)}

    def close(self) -> None:
        self.env.close()
