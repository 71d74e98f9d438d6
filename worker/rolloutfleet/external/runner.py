"""ExternalRunner: the runner of a job whose env is external (``spec.env.external``).

It steps nothing: it serves actions to the clients that call it
(:mod:`rolloutfleet.external.server`) and its :meth:`~ExternalRunner.sample` returns the next
``rolloutFragmentLength`` rows they completed (``complete_episodes``: their whole episodes),
in the batch columns every runner gives. Weights, filters, exploration, metrics and state are
the :class:`~rolloutfleet.sampling.runner_base.Runner`'s, so the worker loop drives it unchanged::

    with ExternalRunner(job) as runner:      # listens on spec.env.external.port
        batch = runner.sample()              # waits for the clients' rows

``ROLLOUTFLEET_EXTERNAL_PORT`` overrides the port (``rolloutfleet run`` gives worker i
``port + i``; 0 picks a free one, then see :attr:`ExternalRunner.port`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import numpy as np
from gymnasium import spaces

from rolloutfleet.data import batch as sb
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.external.book import EpisodeBook, Row, Step
from rolloutfleet.external.local_inference import local_policy, parse_shipped
from rolloutfleet.external.server import ActionServer, LocalHooks, ServerThread
from rolloutfleet.rules.worker_config import listen_host
from rolloutfleet.sampling.callbacks import Callbacks
from rolloutfleet.sampling.env.creators import episode_id_base
from rolloutfleet.sampling.env.external_spaces import action_to_json, check_served_spaces, external_spaces
from rolloutfleet.sampling.env.failures import EnvInterrupted, stop_requested
from rolloutfleet.sampling.runner_base import Runner
from rolloutfleet.sampling.vector.make import env_spaces
from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.external import PORT_VARIABLE

log = logging.getLogger("rolloutfleet.external.runner")

READY_FRAGMENTS = 2
"""Fragments of rows the runner holds before its clients' actions wait (backpressure)."""
WAIT_S = 0.5
"""How often a sample() waiting for client rows looks for a stop and calls :attr:`ExternalRunner.idle`."""


class ExternalRunner(Runner[SampleBatch]):
    """Serves one worker's share of an external env's clients; one policy, ``"default"``."""

    holds_made_rows = True

    def __init__(
        self,
        job: RolloutJob,
        worker_index: int = 0,
        num_workers: int | None = None,
        callbacks: Callbacks | None = None,
        host: str | None = None,
    ) -> None:
        super().__init__(job, worker_index, num_workers, callbacks)
        env = job.spec.env
        external = env.external
        if external is None:
            raise SpecError("spec.env.external: not set; this job's env is stepped by an EnvRunner")
        declared = external_spaces(env)
        self.observation_space, self.action_space = declared or env_spaces(env, worker_index, self.num_workers)
        check_served_spaces(self.observation_space, self.action_space)
        self.policy = self._add_policy(sb.DEFAULT_POLICY, job.spec.policy, self.observation_space, self.action_space)
        if self.policy.recurrent:
            raise SpecError("spec.policy: an external env is served by stateless models; leave out recurrent")
        self.filter = self.filters.get(sb.DEFAULT_POLICY)
        self.explore = job.spec.policy.explore
        self._act = self.policy.act(self.explore)
        self.lock = threading.Lock()
        self._ready = threading.Condition(self.lock)
        complete = self.sampling.batch_mode == "complete_episodes"
        self.book = EpisodeBook(episode_id_base(worker_index), external.max_clients,
                                external.episode_timeout_seconds, complete)  # fmt: skip
        self._last_cut = time.perf_counter()
        self._counted = (0, 0)  # (episodes dropped, timed out) already in self.stats
        # Room for two fragments of rows (one being published, one being cut), then clients wait.
        max_ready = READY_FRAGMENTS * self.sampling.rollout_fragment_length
        local = LocalHooks(
            lambda: local_policy(self.policy, self.filter is not None),
            lambda body: parse_shipped(body, self.policy, self.policy.weights_seq_no),
            lambda: self.policy.weights_seq_no,
        )
        self.server = ActionServer(self.book, self.lock, self._act_batch, self._prepare, self._answer,
                                   self.observation_space, self._info(), max_ready, local)  # fmt: skip
        self.server.rows_ready = self._ready.notify_all
        port = int(os.environ.get(PORT_VARIABLE, external.port))
        host = host or listen_host(os.environ)  # loopback under `rolloutfleet run`, unless --listen
        self._thread = ServerThread(self.server, host, port, min(1.0, external.episode_timeout_seconds / 4))
        try:
            self.port = self._thread.start()
        except OSError as exc:
            raise SpecError(f"spec.env.external.port {port}: {exc.strerror or exc}") from None
        log.info("external env: serving actions on %s:%d (at most %d clients)", host, self.port, external.max_clients)

    # -- what the server calls (under self.lock) -------------------------------------------

    def _prepare(self, obs: np.ndarray) -> np.ndarray:
        if self.filter is None:
            return obs
        with self.lock:
            return self.filter(obs[None].astype(np.float32), update=True)[0]

    def _act_batch(self, obs: np.ndarray) -> list[Step]:
        actions, logp, dist_inputs, values = self._act(obs)
        seq_no, scale = self.policy.weights_seq_no, self.policy.exploration_scale(self.explore)
        return [Step(obs[i], actions[i], float(logp[i]), dist_inputs[i], float(values[i]), seq_no, scale)
                for i in range(len(obs))]  # fmt: skip

    def _answer(self, action: np.ndarray) -> Any:
        space = self.action_space
        if self.sampling.clip_actions and isinstance(space, spaces.Box):
            action = np.clip(action, space.low, space.high)
        return action_to_json(space, action)

    def _info(self) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "worker_index": self.worker_index,
            "observation_space": str(self.observation_space),
            "action_space": str(self.action_space),
            "max_clients": self.book.max_clients,
            "episode_timeout_seconds": self.book.timeout_s,
        }

    # -- sampling ------------------------------------------------------------------------

    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
    ) -> SampleBatch:
        """The next ``num_timesteps`` (default ``rolloutFragmentLength``) rows the clients
        completed, waiting for them (``complete_episodes``: every whole episode once there are
        that many). A stop request returns the rows there are, with every open episode closed as
        truncated; with none, :class:`EnvInterrupted`. The clients' acting follows
        ``spec.policy.explore``: ``explore`` and ``random_actions`` are not choices here."""
        self.check_sample_args(num_timesteps, num_episodes)
        if num_episodes is not None or explore is not None or random_actions:
            raise ValueError("an external runner cuts rows its clients made: num_timesteps only")
        target = num_timesteps or self.sampling.rollout_fragment_length
        with self._ready:
            while len(self.book.ready) < target and not stop_requested():
                self._ready.wait(WAIT_S)
                if self.idle is not None:
                    self.idle()
            if stop_requested():  # every row the clients made goes, open episodes as truncated
                self.book.close_all("the worker stopped: closed as truncated")
            rows = self.book.take(None if self.book.complete_episodes or stop_requested() else target)
            self._account()
        if not rows:
            raise EnvInterrupted("no client rows were waiting")
        batch = self._cut(rows)
        # The clients set the pace: steps per second of wall time, waiting included.
        now = time.perf_counter()
        self.stats.period.seconds += now - self._last_cut
        self._last_cut = now
        self.callbacks.on_sample_end(runner=self, batch=batch)
        return batch

    def _cut(self, rows: list[Row]) -> SampleBatch:
        """Rows as columns, each episode's rows together and in time order."""
        rows = sorted(rows, key=lambda row: (row[sb.EPS_ID], row[sb.T]))

        def column(name: str, dtype: Any) -> np.ndarray:
            return np.asarray([row[name] for row in rows], dtype)

        obs_dtype = np.float32 if self.filter is not None else self.observation_space.dtype
        action_dtype = np.int64 if isinstance(self.action_space, spaces.Discrete) else self.action_space.dtype
        rewards = column(sb.REWARDS, np.float32)
        if self.sampling.clip_rewards is not None:
            rewards = np.clip(rewards, -self.sampling.clip_rewards, self.sampling.clip_rewards)
        columns = {
            sb.OBS: column(sb.OBS, obs_dtype), sb.NEW_OBS: column(sb.NEW_OBS, obs_dtype),
            sb.ACTIONS: column(sb.ACTIONS, action_dtype), sb.REWARDS: rewards,
            sb.TERMINATEDS: column(sb.TERMINATEDS, np.bool_), sb.TRUNCATEDS: column(sb.TRUNCATEDS, np.bool_),
            sb.EPS_ID: column(sb.EPS_ID, np.int64), sb.ENV_ID: column(sb.ENV_ID, np.int32),
            sb.AGENT_INDEX: np.zeros(len(rows), np.int32), sb.T: column(sb.T, np.int64),
            sb.ACTION_LOGP: column(sb.ACTION_LOGP, np.float32),
            sb.ACTION_DIST_INPUTS: column(sb.ACTION_DIST_INPUTS, np.float32),
            sb.VF_PREDS: column(sb.VF_PREDS, np.float32), sb.WEIGHTS_SEQ_NO: column(sb.WEIGHTS_SEQ_NO, np.int64),
        }  # fmt: skip
        if self.policy.exploration is not None:
            columns[sb.EXPLORATION_SCALE] = column(sb.EXPLORATION_SCALE, np.float32)
        return SampleBatch(columns)

    def _account(self) -> None:
        """The book's news into the episode stats (under self.lock)."""
        book, stats = self.book, self.stats
        stats.period.env_steps += book.new_rows
        stats.lifetime_env_steps += book.new_rows
        book.new_rows = 0
        if book.ended_episodes:
            returns, lengths = zip(*book.ended_episodes, strict=True)
            stats.episodes(np.asarray(returns), np.asarray(lengths))
            book.ended_episodes = []
        dropped, timed_out = book.counters.episodes_dropped, book.counters.episodes_timed_out
        stats.period.dropped += dropped - self._counted[0]
        self._counted = (dropped, timed_out)

    # -- what the worker calls between fragments, kept apart from the serving thread ------

    def set_weights(self, policy_id: str, weights: Any, seq_no: int | None = None) -> bool:
        with self.lock:
            return super().set_weights(policy_id, weights, seq_no)

    def set_global_step(self, step: int) -> None:
        with self.lock:
            super().set_global_step(step)

    def sync_filters(self, filters: Any) -> None:
        with self.lock:
            super().sync_filters(filters)

    def get_filters(self, flush_after: bool = False) -> Any:
        with self.lock:
            return super().get_filters(flush_after)

    def get_metrics(self) -> dict[str, float | int]:
        with self.lock:
            self._account()
            counters = self.book.counters
            metrics = super().get_metrics()
            metrics.update({
                "external/clients": len(self.book.clients),
                "external/open_episodes": len(self.book.episodes),
                "external/episodes_timed_out": counters.episodes_timed_out,
                "external/episodes_dropped": counters.episodes_dropped,
                "external/clients_refused": counters.clients_refused,
                "external/calls_refused": counters.calls_refused,
                "external/inference_passes": self.server.passes,
                "external/actions": self.server.acted,
                "external/backpressure_waits": self.server.waits,
                "external/port": self.port,
            })  # fmt: skip
        return metrics

    def close(self) -> None:
        self._thread.stop()
