"""What a worker process does with Redis, in one object: publish batches, load announced
weights, write a heartbeat. :mod:`rolloutfleet.fleet.worker` drives it and owns the retry loop::

    transport = WorkerTransport(config)
    loaded = transport.load_weights(runner)     # newer weights of any policy, if any
    transport.publish(batch)                    # weights versions: the batch's own column
    transport.heartbeat(runner.get_metrics())

Everything is keyed by policy id, as the runners are (``"default"`` for a single-agent job;
for a multi-agent job one publisher per published policy, the trained ones and a league's
opponent when asked for, and one weights subscriber per policy). The weights are read on the first publisher's connection, when the learner announced a
version (one subscription, a second connection). A publish interrupted by an outage is
retried with the same batch, the policies already sent skipped. Filter statistics, refused weights versions and declared columns:
docs/transport.md ("A worker's side").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rolloutfleet.data.batch import DEFAULT_POLICY
from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.data.weights_check import WeightsRefused
from rolloutfleet.transport.declared_columns import declare, published_schema
from rolloutfleet.transport.filter_sync import FilterSync
from rolloutfleet.transport.global_step import GlobalStepReader
from rolloutfleet.transport.heartbeat import write_heartbeat
from rolloutfleet.transport.publisher import BackpressureTimeout, BatchPublisher
from rolloutfleet.transport.redis.connection import RETRYABLE, connect_lazily
from rolloutfleet.transport.redis.errors import BackendError, ConcurrentChange
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.redis.stream_load import StreamLoad
from rolloutfleet.transport.weights import WEIGHTS_SOCKET_TIMEOUT_S, WeightSubscriber, WeightsUpdate
from rolloutfleet.transport.weights_news import WeightsNews

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.data.multiagent_batch import MultiAgentBatch
    from rolloutfleet.rules.worker_config import WorkerConfig
    from rolloutfleet.sampling.runner_base import AnyRunner


class WorkerTransport:
    """The worker's Redis side, configured by its :class:`WorkerConfig`.

    ``retryable`` lists the errors after which the worker should back off and call again
    (Redis away, or the learner not keeping up under ``block`` backpressure).
    """

    # WatchError: the filter statistics kept losing their transaction to other workers.
    retryable: tuple[type[Exception], ...] = (*RETRYABLE, BackpressureTimeout, ConcurrentChange)

    def __init__(self, config: WorkerConfig) -> None:
        job = config.job
        self.worker_index = config.worker_index
        self.keys = job_keys(job.namespace, job.name)
        url, password = config.redis_url, config.redis_password
        multi = job.spec.multi_agent
        # Short reconnect window: the worker's own loop backs off and keeps the fragment.
        options: dict[str, Any] = {"password": password, "reconnect_timeout_s": 2.0, "worker_index": self.worker_index}
        if config.learner_idle_s is not None:
            options["learner_idle_s"] = config.learner_idle_s
        # Keyed by policy id, "default" for a single-agent job (whose Redis keys carry no policy).
        self._redis_policy: dict[str, str | None]
        if multi is None:
            self._redis_policy = {DEFAULT_POLICY: None}
            published: tuple[str, ...] = (DEFAULT_POLICY,)
        else:
            self._redis_policy = {policy: policy for policy in multi.policies}
            published = tuple(str(policy) for policy in job.published_policies)
        self.publishers = {
            policy: BatchPublisher(url, job, policy=self._redis_policy[policy], **options) for policy in published
        }
        self.publisher = next(iter(self.publishers.values()))
        self.client = self.publisher.job_client  # the job's keys: weights, filters, heartbeats
        # The weights are read on the publisher's connection, when announced (one more connection),
        # or from this worker's read replica (spec.redis.readReplicas): its announcements and its
        # copy of the versions, both on the replica, so an announcement heard there finds its version.
        replicas = job.spec.redis.read_replicas
        self.reader = None
        if replicas:
            replica = replicas[self.worker_index % len(replicas)]
            self.reader = connect_lazily(replica, password, socket_timeout=WEIGHTS_SOCKET_TIMEOUT_S)
        self.subscribers = {
            policy: WeightSubscriber(
                url, job, password=password, policy=redis_policy, client=self.client, reader=self.reader
            )
            for policy, redis_policy in self._redis_policy.items()
        }
        self.weights = next(iter(self.subscribers.values()))
        announced = {p: s.keys.weights_news for p, s in self.subscribers.items()}
        self.news = WeightsNews(self.reader or self.client, announced)
        self._sent: tuple[object, set[str]] = (None, set())  # (the batch being published, policies done)
        self._filter_syncs: dict[str, FilterSync] = {}
        self._declared: set[str] = set()  # policies whose batch columns this worker declared
        # The last heartbeat written: when, and what it said besides the numbers; the numbers held back.
        self._beat_at = float("-inf")
        self._said: tuple[Any, float | None, str | None] = ((), None, None)
        self._unsent: Mapping[str, float | int] | None = None
        # Exploration schedules follow the learner's global step: read only by jobs that have one.
        specs = [job.spec.policy] if multi is None else [o.apply(job.spec.policy) for o in multi.policies.values()]
        scheduled = any(spec.exploration.follows_global_step for spec in specs)
        self.global_step = GlobalStepReader(self.client, self.keys) if scheduled else None

    def poll_weights(self, held: Mapping[str, int] | None = None) -> dict[str, WeightsUpdate]:
        """Each policy's newer weights (``"default"`` for a single-agent job); absent when not
        newer than ``held[policy]`` (the runner's versions), or than the last one polled. Only
        the policies announced since the last call are read (:class:`WeightsNews`), and those
        whose ``held`` version is not the one last seen (a runner restored by ``set_state``)."""
        updates: dict[str, WeightsUpdate] = {}
        due = self.news.due()
        for policy, subscriber in self.subscribers.items():
            if policy not in due and (held is None or held.get(policy, subscriber.seq_no) == subscriber.seq_no):
                continue
            update = subscriber.poll(held=None if held is None else held.get(policy))
            if update is not None:
                updates[policy] = update
        return updates

    def load_weights(self, runner: AnyRunner) -> int | None:
        """Poll and load newer weights into ``runner``; returns the newest seq no loaded, if any.
        A job with an exploration schedule also takes the learner's global step, when it changed."""
        loaded = None
        # The runner's versions are the one record of what is loaded (set_state can change them).
        for policy, update in self.poll_weights(held=runner.weights_seq_nos).items():
            try:
                if runner.set_weights(policy, update.weights, update.seq_no):
                    loaded = max(loaded or 0, update.seq_no)
                    self.subscribers[policy].accepted(update.seq_no)
            except WeightsRefused as exc:  # the runner keeps the weights it holds
                self.subscribers[policy].refuse(update.seq_no, str(exc))
        if self.global_step is not None and (step := self.global_step.poll()) is not None:
            runner.set_global_step(step)
        return loaded

    def record_models(self, runner: AnyRunner) -> None:
        """Record each policy's weight names, shapes and dtypes (``weights:model``): what a
        learner's ``WeightPublisher`` checks a version against before publishing it."""
        for policy, subscriber in self.subscribers.items():
            subscriber.record_model(runner.policies[policy].weights_signature())

    def refused_weights(self) -> dict[str, tuple[int, str]]:
        """Policy -> (version, reason) of a refused version newer than the one loaded."""
        return {policy: s.refused for policy, s in self.subscribers.items() if s.refused is not None}

    def publish(self, batch: SampleBatch | MultiAgentBatch) -> None:
        """XADD each published policy's part of the batch to its policy's stream (a single-agent
        batch: the job's stream). The weights versions go with the rows (their
        ``weights_seq_no`` column), not beside them. A retry with the same batch after an
        interrupted publish skips the parts already sent."""
        # The batch object itself, not its id(): a freed batch's address is often the next one's.
        if self._sent[0] is not batch:
            self._sent = (batch, set())
        done = self._sent[1]
        parts = batch.by_policy()
        for policy, publisher in self.publishers.items():
            part = parts.get(policy)
            if policy in done or part is None or len(part) == 0:
                continue
            if policy not in self._declared:  # before the first batch: a learner judges it against this
                redis_policy = self._redis_policy[policy]
                keys = job_keys(self.keys.namespace, self.keys.job, redis_policy)
                declare(self.client, keys, published_schema(part, batch.agent_ids, redis_policy))
                self._declared.add(policy)
            publisher.publish(
                part, worker_index=self.worker_index, env_steps=batch.env_steps(), agent_ids=batch.agent_ids
            )
            done.add(policy)
        self._sent = (None, set())  # all sent: the next call is a new batch, whatever it is

    def _filters(self, runner: AnyRunner) -> list[tuple[MeanStdFilter, FilterSync]]:
        """The runner's observation filters (one per policy) with their syncs."""
        for policy in runner.filters:
            if policy not in self._filter_syncs:
                keys = job_keys(self.keys.namespace, self.keys.job, self._redis_policy[policy])
                self._filter_syncs[policy] = FilterSync(self.client, keys)
        return [(filt, self._filter_syncs[policy]) for policy, filt in runner.filters.items()]

    def pull_filters(self, runner: AnyRunner) -> bool:
        """Start from the fleet's observation-filter statistics (meanStd jobs); whether there were any."""
        pulled = [sync.pull(filt) for filt, sync in self._filters(runner)]
        return any(pulled)

    def sync_filters(self, runner: AnyRunner) -> None:
        """Merge what this worker's observation filters saw into the fleet's, and adopt the result."""
        for filt, sync in self._filters(runner):
            sync.push(filt)

    def on_wait(self, callback: Callable[[str, StreamLoad, float], None]) -> None:
        """Call ``callback(stream, load, waited_s)`` after a second of a publish waiting for
        room, then every two seconds (see :attr:`BatchPublisher.on_wait`)."""
        for publisher in self.publishers.values():
            publisher.on_wait = callback

    def interrupt(self) -> None:
        """Make publishes blocked on a full stream give up (safe from a signal handler)."""
        for publisher in self.publishers.values():
            publisher.interrupt()

    def heartbeat(
        self,
        stats: Mapping[str, float | int],
        waiting_since: float | None = None,
        stuck: str | None = None,
        *,
        every_s: float = 0.0,
    ) -> None:
        """This worker's heartbeat from its runner's metrics (see :mod:`rolloutfleet.transport.heartbeat`);
        ``waiting_since``: unix time it began to wait for a learner, while it does; ``stuck``: an
        env call's line, from the watchdog (:mod:`rolloutfleet.fleet.env_watchdog`).

        ``every_s``: write at most this often (a worker writes one after each fragment, and a
        fast one makes several a second), unless what it says besides its numbers changed (a
        weights refusal, a wait, a stuck call): that is written at once. What was held back
        is written by the next call or by :meth:`flush_heartbeat`."""
        refused = self.refused_weights()
        said = (tuple(sorted(refused.items())), waiting_since, stuck)
        now = time.monotonic()
        if every_s and said == self._said and now - self._beat_at < every_s:
            self._unsent = stats
            return
        blocked = sum(p.stats.blocked_seconds for p in self.publishers.values())  # the autoscaler's signal
        write_heartbeat(
            self.client,
            self.keys,
            self.worker_index,
            {**stats, "backpressure_seconds": blocked},
            refused=refused,
            waiting_since=waiting_since,
            stuck=stuck,
        )
        self._beat_at, self._said, self._unsent = now, said, None

    def flush_heartbeat(self, every_s: float = 0.0) -> None:
        """Write the heartbeat that ``every_s`` held back, if any, once ``every_s`` passed since
        the last one (a worker stopping: its last numbers; a worker waiting for external
        clients: the numbers of its last fragment). Best effort: Redis failing, the numbers
        held back are dropped (the next fragment writes its own) and nothing is raised."""
        if self._unsent is None or time.monotonic() - self._beat_at < every_s:
            return
        stats, self._unsent = self._unsent, None
        try:
            self.heartbeat(stats, waiting_since=self._said[1], stuck=self._said[2])
        except BackendError as exc:
            log.debug("a held-back heartbeat was not written: %s", exc)

    def close(self) -> None:
        for publisher in self.publishers.values():
            publisher.close()
        self.news.close()
        if self.reader is not None:
            self.reader.close()
