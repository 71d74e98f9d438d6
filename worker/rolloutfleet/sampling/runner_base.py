"""The runner skeleton, single- or multi-agent: shared state built once, ``sample()`` written once.

:class:`Runner` builds what both runners hold (seeds, callbacks, the env failure budget, episode
stats, policies and their meanStd filters) and answers the worker's calls keyed by policy id, a
single-agent job being the one policy ``"default"``, so :mod:`rolloutfleet.fleet` never asks
which runner it has::

    runner.set_weights("default", state_dict, seq_no=7)   # False: not newer than loaded
    runner.get_filters(flush_after=True)                  # {"default": MeanStdFilter} (meanStd)
    runner.get_state() / runner.get_metrics()             # plain dicts and arrays / episode stats

``sample()`` calls the hooks a runner fills in (``_begin_sample``, ``_step``, ``_steps_missing``,
``_cut_truncated``, ``_cut_episodes``): :class:`~rolloutfleet.sampling.env_runner.EnvRunner` steps
a vector env into a grid (a :class:`SampleBatch`), :class:`~rolloutfleet.sampling.multiagent.env_runner.
MultiAgentEnvRunner` multi-agent sub-envs into per-policy rows (a :class:`MultiAgentBatch`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Self, TypeVar

import numpy as np
from gymnasium import spaces

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.data.multiagent_batch import MultiAgentBatch
from rolloutfleet.inference.policy import INIT_SEED_PATH, POLICY_SEED_PATH, Policy
from rolloutfleet.sampling.callbacks import Callbacks, load_callbacks, overrides
from rolloutfleet.sampling.env.creators import derive_seed
from rolloutfleet.sampling.env.failures import FailureBudget, env_name
from rolloutfleet.sampling.episode_stats import EpisodeStats
from rolloutfleet.sampling.step_timing import StepTiming
from rolloutfleet.sampling.vector.choice import VectorChoice
from rolloutfleet.spec.job import PolicySpec, RolloutJob, SpecError

BatchT = TypeVar("BatchT", SampleBatch, MultiAgentBatch)


class Runner(Generic[BatchT]):
    """Samples a RolloutJob for one worker; weights, filters, state and metrics keyed by policy id.

    ``worker_index`` (0-based) and ``num_workers`` (default ``spec.replicas``) go into every
    sub-env's :class:`~rolloutfleet.sampling.env.creators.EnvContext` and into the derived seeds.
    """

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
    vector_choice: VectorChoice | None = None
    """How the vector env was built (``auto`` resolved); None for a multi-agent runner, whose
    sub-envs step one by one in its own process."""
    idle: Callable[[], None] | None = None
    """Called now and then while ``sample()`` waits on something other than its envs (an external
    env's clients): the worker's liveness beat."""
    holds_made_rows = False
    """Whether rows made before a stop request may wait in the runner past the fragment in hand
    (an external env's clients made them): the worker then samples once more after a stop."""
    _episode_chunk = 1
    """Vector steps taken between two looks for complete episodes (``complete_episodes``, ``num_episodes``)."""

    def __init__(
        self,
        job: RolloutJob,
        worker_index: int = 0,
        num_workers: int | None = None,
        callbacks: Callbacks | None = None,
        *,
        agent_steps: bool = False,
    ) -> None:
        spec = job.spec
        self.job = job
        self.worker_index = worker_index
        self.num_workers = spec.replicas if num_workers is None else num_workers
        self.sampling = spec.sampling
        self.num_envs = spec.env.num_envs
        self._seed = spec.sampling.seed
        self.callbacks = callbacks or load_callbacks(self.sampling.callbacks)
        self._call_start = overrides(self.callbacks, "on_episode_start")
        self._call_step = overrides(self.callbacks, "on_episode_step")
        self._call_end = overrides(self.callbacks, "on_episode_end")
        env = spec.env
        self._env_failures = FailureBudget(env.max_consecutive_failures, env_name(env), env.restart_failed_sub_envs)
        self.stats = EpisodeStats(agent_steps=agent_steps)
        self.step_timing = StepTiming()  # filled by runners that time their vector steps
        self._custom_metrics: dict[int, dict[str, Any]] = {}
        self.policies = {}
        self.filters = {}

    def _add_policy(
        self,
        policy_id: str,
        spec: PolicySpec,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        seed_path: tuple[int, ...] = (),
    ) -> Policy:
        """Build policy ``policy_id`` (seeded per worker and ``seed_path``; initial weights the
        same on every worker) and, with ``observationFilter: meanStd``, its filter."""
        policy = Policy(
            spec,
            observation_space,
            action_space,
            seed=derive_seed(self._seed, self.worker_index, POLICY_SEED_PATH, *seed_path),
            init_seed=derive_seed(self._seed, INIT_SEED_PATH, *seed_path),
            worker=(self.worker_index, self.num_workers),
        )
        self.policies[policy_id] = policy
        if self.sampling.observation_filter == "meanStd":
            if not isinstance(observation_space, spaces.Box):
                whose = "this env's" if self.job.spec.multi_agent is None else f"policy {policy_id!r}'s"
                raise SpecError(
                    f"spec.sampling.observationFilter: meanStd normalizes Box observations, {whose} are "
                    f"{observation_space}; normalize them in the env or set observationFilter: none"
                )
            self.filters[policy_id] = MeanStdFilter(observation_space.shape)
        return policy

    # -- sampling: the skeleton, and the hooks each runner fills in ----------------------

    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
    ) -> BatchT:
        """Step the envs and return a batch (multi-agent: one per policy, trained or not).

        * default, ``truncate_episodes``: ``numEnvs x rolloutFragmentLength`` steps. Single-agent:
          that many rows, the earliest ones not yet returned (sub-envs whose episodes reset
          more often, losing a reset step each time, contribute a few rows fewer);
          multi-agent: steps counted per ``countStepsBy``, every completed row;
        * default, ``complete_episodes``: whole episodes only, at least that many steps;
        * ``num_timesteps``: at least this many steps (single-agent truncate mode: rounded up
          to a multiple of numEnvs; whole episodes in complete mode);
        * ``num_episodes``: exactly this many complete episodes (the first to end).

        Episodes that are still running continue in the next call, with the same ``eps_id``.
        ``explore`` overrides every policy's ``explore``; ``random_actions`` acts uniformly.
        """
        self.check_sample_args(num_timesteps, num_episodes)
        started = time.perf_counter()
        self.step_timing.begin()
        self._begin_sample(explore, random_actions)
        target = num_timesteps if num_timesteps is not None else self.sampling.rollout_fragment_length * self.num_envs
        if num_episodes is not None or self.sampling.batch_mode == "complete_episodes":
            while (batch := self._cut_episodes(num_episodes, target)) is None:
                self._step(self._episode_chunk)
        else:
            while (steps := self._steps_missing(target)) > 0:
                self._step(steps)
            batch = self._cut_truncated(target)
        elapsed = time.perf_counter() - started
        self.stats.period.seconds += elapsed
        self.step_timing.end(elapsed)
        self.callbacks.on_sample_end(runner=self, batch=batch)
        return batch

    @staticmethod
    def check_sample_args(num_timesteps: int | None, num_episodes: int | None) -> None:
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError("give num_timesteps or num_episodes, not both")
        if (num_timesteps is not None and num_timesteps < 1) or (num_episodes is not None and num_episodes < 1):
            raise ValueError("num_timesteps and num_episodes must be at least 1")

    def _begin_sample(self, explore: bool | None, random_actions: bool) -> None:
        """Settle how this call acts (explore or not, random actions, ε or σ); start the envs if new."""
        raise NotImplementedError

    def _step(self, steps: int) -> None:
        """Step every sub-env ``steps`` times, recording rows and ended episodes."""
        raise NotImplementedError

    def _steps_missing(self, target: int) -> int:
        """``truncate_episodes``: vector steps still to take before ``target`` steps can be cut (0: enough)."""
        raise NotImplementedError

    def _cut_truncated(self, target: int) -> BatchT:
        """``truncate_episodes``: the batch of ``target`` steps; later rows stay for the next call."""
        raise NotImplementedError

    def _cut_episodes(self, num_episodes: int | None, target: int) -> BatchT | None:
        """Whole episodes: the first ``num_episodes`` to end or, without it, every ended episode
        once they hold ``target`` steps; None while there are not enough yet."""
        raise NotImplementedError

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

    def custom_metrics(self, env_index: int) -> dict[str, Any]:
        """The custom metrics of the episode now running in sub-env ``env_index`` (RLlib's
        ``episode.custom_metrics``): a callback sets numbers in it, in any hook of the
        episode; when the episode ends they are windowed per key over the last 100 episodes
        that set one (``get_metrics()["custom/lap_time_mean"]``, ``_min``, ``_max``). An
        episode dropped after an env failure reports nothing.

        >>> runner.custom_metrics(env_index)["lap_time"] = 31.5    # doctest: +SKIP
        """
        return self._custom_metrics.setdefault(env_index, {})

    def _end_custom_metrics(self, env_index: int, ended: bool) -> None:
        """The episode of sub-env ``env_index`` ended (``ended``) or was dropped."""
        values = self._custom_metrics.pop(env_index, None)
        if values and ended:
            self.stats.custom_values(values)

    def get_metrics(self) -> dict[str, float | int]:
        """Episode statistics over the last 100 episodes, counters since the previous call,
        lifetime counters, and the weights version of each policy (``policy/<id>/weights_seq_no``)."""
        metrics = self.stats.metrics()
        metrics.update(self.step_timing.metrics())
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


AnyRunner = Runner[SampleBatch] | Runner[MultiAgentBatch]
"""A runner of either kind: what the worker, its transport and the CLI hold."""
