"""RLlib's algorithms on a RolloutFleet fleet: an env runner for RLlib's new API stack whose
samples are the fleet's batches and whose weight syncs are the fleet's weights (the optional
extra ``rolloutfleet[rllib]``; docs/guides/rllib.md).

    config = on_fleet(PPOConfig(), "examples/cartpole.yaml")   # num_env_runners=0: the fleet samples
    algo = config.build_algo()
    while True:
        result = algo.train()                                  # RLlib's PPO, the fleet's experience

:class:`FleetEnvRunner` stands where RLlib's local env runner would. Its ``sample()`` reads the
job's batches (whole fragments, acknowledged on the next ``sample()``) and returns them as
RLlib's ``SingleAgentEpisode`` chunks: one per episode and sub-environment and fragment, with
the workers' ``action_logp`` and ``action_dist_inputs``, as RLlib's own env runners return
them. Its ``set_state()`` (RLlib's weight sync) publishes the module's weights under the
workers' names, after checking that the module is their network
(:mod:`rolloutfleet.integrations.rllib_layout`); anything else is refused in one line, never
approximated. Completed episodes' returns and lengths, env steps and the fleet's lag go to
RLlib's metrics logger under RLlib's own keys (and ``rolloutfleet/...`` for the lag).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
)

from rolloutfleet.data.batch import ACTION_DIST_INPUTS, ACTION_LOGP, WEIGHTS_SEQ_NO
from rolloutfleet.integrations.rllib_layout import (
    ModuleRefused,
    config_mismatches,
    episode_chunks,
    fleet_weights,
    model_config,
)
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.redis_url import redacted_url
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.consuming.args import entries_needed
from rolloutfleet.transport.entries import Message, concat_messages
from rolloutfleet.transport.weights import WeightPublisher

__all__ = ["FleetEnvRunner", "ModuleRefused", "job_model_config", "on_fleet"]

log = logging.getLogger(__name__)
WAITING_SAY_S = 10.0
"""A ``sample()`` that waits for batches says so this often."""
MAX_RUNNING_EPISODES = 100_000
"""Episodes whose return is being added up; past this the oldest are forgotten (a worker that
died mid-episode never sends its end)."""


class FleetEnvRunner(SingleAgentEnvRunner):  # type: ignore[misc]
    """RLlib's local env runner, with the fleet's workers sampling: build it with :func:`on_fleet`
    (which makes a subclass bound to one job)."""

    job: ClassVar[RolloutJob | None] = None
    redis_url: ClassVar[str] = ""
    group: ClassVar[str] = "rllib"
    max_policy_lag: ClassVar[int | None] = None

    def __init__(self, *, config: AlgorithmConfig, **kwargs: Any) -> None:
        job = type(self).job
        if job is None:
            raise ValueError("FleetEnvRunner has no job: configure RLlib with rolloutfleet.integrations.rllib.on_fleet(config, job)")  # fmt: skip
        if kwargs.get("worker_index"):
            raise ValueError(f"FleetEnvRunner runs in the algorithm's process: num_env_runners must be 0 (the fleet's spec.replicas={job.spec.replicas} workers sample)")  # fmt: skip
        if config.in_evaluation:
            raise ValueError("FleetEnvRunner does not evaluate (its rows are the fleet's training rows): give evaluation_config its own env_runner_cls")  # fmt: skip
        from rolloutfleet.fleet.runner_factory import build_model
        from rolloutfleet.sampling.vector.make import env_spaces

        obs_space, action_space = env_spaces(job.spec.env, 0, job.spec.replicas)
        q_values = hasattr(config, "dueling")  # DQN: the module's outputs are Q-values, the workers' logits
        mismatches = config_mismatches(
            job.spec.policy,
            dict(config.model_config),
            value_function=not q_values,
            box_actions=isinstance(action_space, gym.spaces.Box),
        )
        if q_values:
            mismatches += _q_learning_mismatches(config, job)
        if mismatches:
            raise ModuleRefused(f"RLlib's model config is not job {job.name!r}'s network: " + "; ".join(mismatches))
        num_envs = job.spec.env.num_envs
        kwargs["spaces"] = {
            INPUT_ENV_SPACES: (
                gym.vector.utils.batch_space(obs_space, num_envs),
                gym.vector.utils.batch_space(action_space, num_envs),
            ),
            INPUT_ENV_SINGLE_SPACES: (obs_space, action_space),
            DEFAULT_MODULE_ID: (obs_space, action_space),
        }
        self._single_spaces = (obs_space, action_space)
        workers = build_model(job)
        self._signature = {name: (tuple(t.shape), t.detach().numpy().dtype) for name, t in workers.state_dict().items()}
        self._value_side = {name: t.detach().numpy() for name, t in workers.state_dict().items()}
        super().__init__(config=config, **kwargs)
        fleet_weights(self.module.state_dict(), self._signature, self._value_side)  # refused here, before any training
        # max_policy_lag is applied here, not by the consumer: the episodes' returns count every row
        self.consumer = BatchConsumer(self.redis_url, job.name, namespace=job.namespace, group=self.group)
        self.publisher = WeightPublisher(self.redis_url, job.name, namespace=job.namespace)
        self.published: int | None = None
        self._held: list[Message] = []
        self._stale_rows = 0
        self._entry_rows = 0  # rows per entry, last seen: reads take the entries a sample needs, not more
        self._running: dict[int, tuple[float, int]] = {}
        log.info("RLlib samples from job %s/%s at %s (group %r)", job.namespace, job.name, redacted_url(self.redis_url), self.group)  # fmt: skip

    # -- RLlib's EnvRunner ----------------------------------------------------------------

    def make_env(self) -> None:
        """No env here: the fleet's workers step it. The spaces come from the job."""
        self.env, self.num_envs = None, 0

    def assert_healthy(self) -> None:
        assert self.module is not None and self.consumer is not None

    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[SingleAgentEpisode]:
        """The fleet's next batches (at least ``num_timesteps`` rows; else what one read gives,
        at least one fragment) as episode chunks. The previous call's are acknowledged first."""
        if num_episodes is not None or random_actions or explore is False:
            asked = (
                "num_episodes" if num_episodes is not None else "random_actions" if random_actions else "explore=False"
            )
            raise ValueError(f"FleetEnvRunner.sample({asked}): the fleet samples fragments with its workers' policy (spec.policy.explore)")  # fmt: skip
        self.consumer.ack(self._held)
        messages, keep, done = self._gather(num_timesteps or 1)
        self._held = messages
        everything = concat_messages(messages)
        batch = {name: column[np.concatenate(keep)] for name, column in everything.items()}
        starts = np.cumsum([0] + [int(k.sum()) for k in keep[:-1]]).tolist()
        episodes = self.to_episodes(batch, starts)
        stale = self._stale_rows + len(everything["rewards"]) - len(batch["rewards"])
        steps = len(batch["rewards"]) + stale  # what the fleet sampled, trained on or not
        self._increase_sampled_metrics(steps, done)
        self.num_env_steps_sampled_lifetime += steps
        self.metrics.log_value("rolloutfleet/stale_rows", stale, reduce="sum")
        self.metrics.log_value("rolloutfleet/weights_seq_no", max(m.metadata.weights_seq_no for m in messages), reduce="max", window=1)  # fmt: skip
        lag = self.consumer.lag()
        self.metrics.log_value("rolloutfleet/pending_entries", lag.pending, window=1)
        if lag.undelivered is not None:
            self.metrics.log_value("rolloutfleet/undelivered_entries", lag.undelivered, window=1)
        if self.published is not None:
            oldest = min(int(_versions(m).min()) for m in messages)
            self.metrics.log_value("rolloutfleet/policy_lag", self.published - oldest, window=1)
        return episodes

    def to_episodes(self, batch: dict[str, np.ndarray], starts: Sequence[int] = ()) -> list[SingleAgentEpisode]:
        """Rows as RLlib's episode chunks: a chunk's observations are its rows' ``obs`` plus the
        last row's ``new_obs``; it is terminated or truncated when its last row is."""
        obs_space, action_space = self._single_spaces
        episodes = []
        for rows in episode_chunks(batch, starts):
            extra = {key: list(batch[column][rows]) for key, column in (("action_logp", ACTION_LOGP), ("action_dist_inputs", ACTION_DIST_INPUTS)) if column in batch}  # fmt: skip
            episodes.append(
                SingleAgentEpisode(
                    id_=f"{int(batch['eps_id'][rows.start]):x}",
                    observations=[*batch["obs"][rows], batch["new_obs"][rows.stop - 1]],
                    actions=list(batch["actions"][rows]),
                    rewards=[float(r) for r in batch["rewards"][rows]],
                    extra_model_outputs=extra,
                    terminated=bool(batch["terminateds"][rows.stop - 1]),
                    truncated=bool(batch["truncateds"][rows.stop - 1]),
                    t_started=int(batch["t"][rows.start]),
                    len_lookback_buffer=0,
                    observation_space=obs_space,
                    action_space=action_space,
                ).to_numpy()
            )
        return episodes

    def set_state(self, state: dict[str, Any]) -> None:
        """RLlib's weight sync: load the module, then publish its weights to the workers."""
        super().set_state(state)
        if "rl_module" in state:
            self.publish()

    def publish(self) -> int:
        """Publish the local module's weights to the workers (their names); the version."""
        self.published = self.publisher.publish(
            fleet_weights(self.module.state_dict(), self._signature, self._value_side)
        )
        return self.published

    def get_metrics(self) -> Any:
        return self.metrics.reduce()

    def stop(self) -> None:
        """Acknowledge what the learner was given and close the connections."""
        if getattr(self, "consumer", None) is not None:
            self.consumer.ack(self._held)
            self._held = []
            self.consumer.close()
            self.publisher.close()

    # -- helpers --------------------------------------------------------------------------

    def _gather(self, rows: int) -> tuple[list[Message], list[np.ndarray], int]:
        """Whole messages until ``rows`` fresh rows (at least one) are held, with each one's
        fresh rows and the episodes that ended in all read. Messages with no fresh row are
        counted and acknowledged at once: a ``block`` fleet's room would otherwise wait on
        them while the learner waits on the fleet."""
        messages: list[Message] = []
        masks: list[np.ndarray] = []
        fresh = held = done = stale = 0
        began = said = time.monotonic()
        while fresh < rows or not fresh:
            entry_rows = held // len(messages) if messages else self._entry_rows
            read = self.consumer.read(entries_needed(rows - fresh, entry_rows, self.consumer.read_count), timeout=1.0)
            old: list[Message] = []
            for message in read:
                done += self._log_episodes(message.batch)  # every row the fleet sampled counts
                mask = self._fresh(message)
                if count := int(mask.sum()):
                    messages.append(message)
                    masks.append(mask)
                    fresh, held = fresh + count, held + len(message.batch)
                else:
                    old.append(message)
                    stale += len(message.batch)
            self.consumer.ack(old)
            if time.monotonic() - said >= WAITING_SAY_S and fresh < rows:
                said = time.monotonic()
                log.warning("RLlib waits for the fleet's batches: %d of %d rows in %.0f s (%d more older than max_policy_lag) from %s; are its workers running?",
                            fresh, rows, said - began, stale, self.consumer.keys.batches)  # fmt: skip
        self._entry_rows = held // len(messages)
        self._stale_rows = stale
        return messages, masks, done

    def _fresh(self, message: Message) -> np.ndarray:
        """Which rows of ``message`` are recent enough to train on: sampled with weights no more
        than ``max_policy_lag`` versions older than the last this runner published."""
        versions = _versions(message)
        if self.max_policy_lag is None or self.published is None:
            return np.ones(len(versions), np.bool_)
        return np.asarray(versions >= self.published - self.max_policy_lag)

    def _log_episodes(self, batch: Mapping[str, np.ndarray]) -> int:
        """Log each episode that ended in ``batch`` with its return and length across fragments;
        those whose first steps this learner did not see (rows dropped as too old by
        ``max_policy_lag``, or read before it started) are not counted: their return is unknown.
        Nor is one that lost a fragment in the middle, which also leaves the tally."""
        ended = batch["terminateds"] | batch["truncateds"]
        done = 0
        window = self.config.metrics_num_episodes_for_smoothing
        rows = zip(
            batch["eps_id"].tolist(), batch["t"].tolist(), batch["rewards"].tolist(), ended.tolist(), strict=True
        )
        for eps, t, reward, end in rows:
            total, length = self._running.pop(eps, (0.0, 0))
            if t != length:
                continue  # rows of it were not ours to add up (its start, or a dropped fragment)
            total, length = total + reward, length + 1
            if not end:
                self._running[eps] = (total, length)
                if len(self._running) > MAX_RUNNING_EPISODES:  # episodes whose worker died mid-way
                    del self._running[next(iter(self._running))]
                continue
            done += 1
            for key, value, reduce in ((EPISODE_RETURN_MEAN, total, "mean"), (EPISODE_LEN_MEAN, length, "mean"),
                                       (EPISODE_RETURN_MIN, total, "min"), (EPISODE_RETURN_MAX, total, "max"),
                                       (EPISODE_LEN_MIN, length, "min"), (EPISODE_LEN_MAX, length, "max")):  # fmt: skip
                self.metrics.log_value(key, value, reduce=reduce, window=window)
            self.metrics.log_value(("agent_episode_return_mean", DEFAULT_AGENT_ID), total, window=window)
            self.metrics.log_value(("module_episode_return_mean", DEFAULT_MODULE_ID), total, window=window)
        return done


def _versions(message: Message) -> np.ndarray:
    """The weights version of each row (a batch built by hand has one: its metadata's)."""
    column = message.batch.get(WEIGHTS_SEQ_NO)
    return np.asarray(column) if column is not None else np.full(len(message.batch), message.metadata.weights_seq_no)


def job_model_config(job: RolloutJob) -> dict[str, Any]:
    """RLlib's model config for the workers' network of ``job`` (builds one sub-environment to
    learn its action space: a Box's log standard deviations are free parameters)."""
    from rolloutfleet.sampling.vector.make import env_spaces

    action_space = env_spaces(job.spec.env, 0, job.spec.replicas)[1]
    return model_config(job.spec.policy, box_actions=isinstance(action_space, gym.spaces.Box))


def _q_learning_mismatches(config: AlgorithmConfig, job: RolloutJob) -> list[str]:
    """What keeps a DQN config from the workers' network and their greedy acting; RLlib's
    epsilon schedule is not theirs to follow (said once, as a warning)."""
    found = [
        f"{key}={getattr(config, key)!r} (the workers' network has {what})"
        for key, off, what in (
            ("dueling", False, "one Q head"),
            ("num_atoms", 1, "one Q-value per action"),
            ("noisy", False, "no noisy layers"),
        )
        if getattr(config, key, off) != off
    ]
    exploration = job.spec.policy.exploration
    if exploration.type != "epsilonGreedy":
        found.append(f"spec.policy.exploration.type is {exploration.type!r}: Q-values are acted on by epsilonGreedy")
    else:
        log.warning("DQN: RLlib's epsilon schedule %s is not applied; the workers explore by spec.policy.exploration (%s)",
                    getattr(config, "epsilon", None), exploration.model_dump(exclude_defaults=True))  # fmt: skip
    return found


def on_fleet(
    config: AlgorithmConfig,
    job: RolloutJob | str | Path,
    redis_url: str | None = None,
    *,
    group: str = "rllib",
    max_policy_lag: int | None = None,
) -> AlgorithmConfig:
    """``config`` with the fleet of ``job`` (a RolloutJob or its manifest) in place of RLlib's env
    runners: its env (the job's, by id), its env runner (:class:`FleetEnvRunner`, local: no
    remote env runners) and its model (the workers' network: :func:`model_config`, unless the
    config already names one; a different one is refused when the runner starts).

    ``redis_url``: the fleet's Redis (default ``$ROLLOUTFLEET_REDIS_URL``, as ``rolloutfleet run``
    sets it for the learner). ``group``: the learner's consumer group. ``max_policy_lag``: drop
    rows sampled more than this many weights versions ago (PPO is on-policy).
    """
    job = job if isinstance(job, RolloutJob) else RolloutJob.from_file(job)
    spec = job.spec
    if spec.multi_agent is not None or spec.env.external is not None or spec.env.id is None:
        what = "a multi-agent job" if spec.multi_agent is not None else "an external env" if spec.env.external else "an env by entryPoint"  # fmt: skip
        raise ValueError(f"on_fleet: job {job.name!r} has {what}; the RLlib adapter takes single-agent jobs of a registered gymnasium env id")  # fmt: skip
    url = redis_url or os.environ.get("ROLLOUTFLEET_REDIS_URL")
    if not url:
        raise ValueError("on_fleet: no Redis URL: pass redis_url= or set ROLLOUTFLEET_REDIS_URL (rolloutfleet run sets it for the learner)")  # fmt: skip
    runner = type(f"FleetEnvRunner_{job.name}", (FleetEnvRunner,), {"job": job, "redis_url": url, "group": group, "max_policy_lag": max_policy_lag})  # fmt: skip
    return (
        config.environment(spec.env.id, env_config=dict(spec.env.config))
        .env_runners(
            env_runner_cls=runner,
            num_env_runners=0,
            num_envs_per_env_runner=spec.env.num_envs,
            rollout_fragment_length=spec.sampling.rollout_fragment_length,  # a message: one fragment of a worker
        )
        # a model of the user's own is checked when the runner starts
        .rl_module(model_config=config._model_config or job_model_config(job))
    )
