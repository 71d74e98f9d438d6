"""The contract every runner keeps, single- or multi-agent.

Outside the samplers a single-agent job is a multi-agent job with one policy,
:data:`~rolloutfleet.data.batch.DEFAULT_POLICY` (``"default"``): weights versions, weights,
filters and state are keyed by policy id the same way for both runners, so the worker's
Redis side (:mod:`rolloutfleet.fleet.worker_transport`) never asks which runner it has::

    runner.set_weights("default", state_dict, seq_no=7)   # False: not newer than loaded
    runner.weights_seq_nos                                # {"default": 7}
    runner.get_filters(flush_after=True)                  # {"default": MeanStdFilter} (meanStd)
    runner.get_state() / runner.set_state(state)          # plain dicts and arrays
    runner.get_metrics()                                  # episode stats, counters, versions

What differs is ``sample()``: :class:`~rolloutfleet.sampling.env_runner.EnvRunner`
returns a :class:`SampleBatch`, :class:`~rolloutfleet.sampling.multiagent_env_runner.
MultiAgentEnvRunner` a :class:`MultiAgentBatch` (one batch per policy); both batch types
answer ``by_policy()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Generic, Self, TypeVar

import numpy as np

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.data.multiagent_batch import MultiAgentBatch
from rolloutfleet.inference.policy import Policy
from rolloutfleet.sampling.callbacks import Callbacks
from rolloutfleet.sampling.episode_stats import EpisodeStats
from rolloutfleet.spec.job import RolloutJob

BatchT = TypeVar("BatchT", SampleBatch, MultiAgentBatch)


class Runner(Generic[BatchT]):
    """Weights, filters, state and metrics of a runner, keyed by policy id."""

    job: RolloutJob
    worker_index: int
    num_workers: int
    num_envs: int
    callbacks: Callbacks
    policies: dict[str, Policy]
    """Policy id -> the policy sampling with it (single-agent: ``{"default": runner.policy}``)."""
    filters: dict[str, MeanStdFilter]
    """Policy id -> its observation filter (empty unless ``observationFilter: meanStd``)."""
    stats: EpisodeStats
    global_step: int = 0
    """The learner's global step last applied (:meth:`set_global_step`)."""

    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
    ) -> BatchT:
        raise NotImplementedError

    @staticmethod
    def check_sample_args(num_timesteps: int | None, num_episodes: int | None) -> None:
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError("give num_timesteps or num_episodes, not both")
        if (num_timesteps is not None and num_timesteps < 1) or (num_episodes is not None and num_episodes < 1):
            raise ValueError("num_timesteps and num_episodes must be at least 1")

    # -- weights -----------------------------------------------------------------------

    @property
    def weights_seq_nos(self) -> dict[str, int]:
        """Policy id -> the version of the weights it samples with (what its rows carry)."""
        return {policy_id: policy.weights_seq_no for policy_id, policy in self.policies.items()}

    @property
    def weights_seq_no(self) -> int:
        """The newest version among the policies (one number for gauges and heartbeats)."""
        return max(self.weights_seq_nos.values(), default=0)

    def get_weights(self, policies: Iterable[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """Policy id -> its model's state dict as numpy (copies), for ``policies`` or all."""
        return {policy_id: self._policy(policy_id).get_weights() for policy_id in policies or self.policies}

    def set_weights(self, policy_id: str, weights: Mapping[str, Any], seq_no: int | None = None) -> bool:
        """Load ``policy_id``'s weights unless ``seq_no`` is not newer than its loaded version;
        returns whether they were loaded. Other policies keep theirs."""
        return self._policy(policy_id).set_weights(weights, seq_no)

    def _policy(self, policy_id: str) -> Policy:
        policy = self.policies.get(policy_id)
        if policy is None:
            raise KeyError(f"no policy {policy_id!r}; this job has {', '.join(self.policies)}")
        return policy

    # -- exploration -------------------------------------------------------------------

    def set_global_step(self, step: int) -> None:
        """The learner's global step (between fragments): every policy's ε or σ schedule follows it."""
        self.global_step = step
        for policy in self.policies.values():
            policy.set_global_step(step)

    def exploration_scales(self) -> dict[str, float]:
        """Policy id -> the ε or σ it explores with now (policies with ``stochastic`` exploration left out)."""
        scales = {
            policy_id: policy.exploration_scale(policy.spec.explore) for policy_id, policy in self.policies.items()
        }
        return {policy_id: scale for policy_id, scale in scales.items() if scale is not None}

    # -- filters -----------------------------------------------------------------------

    def get_filters(self, flush_after: bool = False) -> dict[str, MeanStdFilter]:
        """Copies of the observation filters, keyed by policy id (empty without meanStd)."""
        copies = {policy_id: filt.copy() for policy_id, filt in self.filters.items()}
        if flush_after:
            for filt in self.filters.values():
                filt.flush()
        return copies

    def sync_filters(self, filters: Mapping[str, MeanStdFilter]) -> None:
        """Adopt merged statistics per policy (keeping what was seen since the last flush)."""
        for policy_id, central in filters.items():
            if policy_id in self.filters:
                self.filters[policy_id].sync(central)

    # -- state and metrics -------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Weights and their versions, filter states, the learner's global step last applied
        (where exploration follows a schedule) and lifetime counters, per policy.

        A stateful model's per-sub-env state is not part of it, nor Ornstein-Uhlenbeck noise
        (both belong to the runner's own episodes): :meth:`set_state` leaves a runner's
        running episodes, and those states, as they are; a new runner starts every episode
        from the initial state."""
        return {
            "weights": self.get_weights(),
            "weights_seq_nos": self.weights_seq_nos,
            "filters": {policy_id: filt.get_state() for policy_id, filt in self.filters.items()},
            "global_step": self.global_step,
            **self.stats.get_state(),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        seq_nos = state.get("weights_seq_nos", {})
        for policy_id, weights in state.get("weights", {}).items():
            policy = self._policy(policy_id)
            policy.set_weights(weights)
            policy.weights_seq_no = int(seq_nos.get(policy_id, policy.weights_seq_no))
        for policy_id, filter_state in state.get("filters", {}).items():
            if policy_id in self.filters:
                self.filters[policy_id].set_state(filter_state)
        if "global_step" in state:
            self.set_global_step(int(state["global_step"]))
        self.stats.set_state(state)

    def get_metrics(self) -> dict[str, float | int]:
        """Episode statistics over the last 100 episodes, counters since the previous call,
        lifetime counters, and the weights version of each policy (``policy/<id>/weights_seq_no``)."""
        metrics = self.stats.metrics()
        metrics["weights_seq_no"] = self.weights_seq_no
        for policy_id, seq_no in self.weights_seq_nos.items():
            metrics[f"policy/{policy_id}/weights_seq_no"] = seq_no
        scales = self.exploration_scales()
        for policy_id, scale in scales.items():
            metrics[f"policy/{policy_id}/exploration_scale"] = scale
        if scales:
            metrics["global_step"] = self.global_step
        return metrics

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
