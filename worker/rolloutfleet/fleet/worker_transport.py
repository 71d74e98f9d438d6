"""What a worker process does with Redis, in one object: publish batches, poll weights,
write a heartbeat. :mod:`rolloutfleet.fleet.worker` drives it and owns the retry loop::

    transport = WorkerTransport(config)
    update = transport.poll_weights()           # None unless newer weights exist
    transport.publish(batch)                    # weights versions: the batch's own column
    transport.heartbeat(runner.get_metrics())

A multi-agent job (``spec.multiAgent``) gets one publisher per trained policy, each on its
policy's stream, and one weights subscriber per policy (independent seq numbers);
``publish`` sends each trained policy's part of a :class:`MultiAgentBatch` (policies not
to train are sampled but never published). A publish interrupted by a Redis outage is
retried by the worker with the same batch, and the policies already sent are skipped.

A job with ``observationFilter: meanStd`` shares its filter statistics (one set per policy
for a multi-agent job) through :mod:`rolloutfleet.transport.filter_sync`: pulled once at start-up,
merged after every fragment.

Heartbeats are written through :mod:`rolloutfleet.transport.heartbeat`, which is also where
readers (the operator, ``rolloutfleet fleet``) find them without importing this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis

from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.spec.redis_keys import job_keys
from rolloutfleet.transport.connection import RETRYABLE
from rolloutfleet.transport.filter_sync import FilterSync
from rolloutfleet.transport.heartbeat import write_heartbeat
from rolloutfleet.transport.publisher import BackpressureTimeout, BatchPublisher
from rolloutfleet.transport.weights import WeightSubscriber, WeightsUpdate

if TYPE_CHECKING:
    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.data.multiagent_batch import MultiAgentBatch
    from rolloutfleet.sampling.runners import AnyEnvRunner
    from rolloutfleet.spec.worker_config import WorkerConfig


class WorkerTransport:
    """The worker's Redis side, configured by its :class:`WorkerConfig`.

    ``retryable`` lists the errors after which the worker should back off and call again
    (Redis away, or the learner not keeping up under ``block`` backpressure).
    """

    # WatchError: the filter statistics kept losing their transaction to other workers.
    retryable: tuple[type[Exception], ...] = (*RETRYABLE, BackpressureTimeout, redis.WatchError)

    def __init__(self, config: WorkerConfig) -> None:
        job = config.job
        self.worker_index = config.worker_index
        self.keys = job_keys(job.namespace, job.name)
        url, password = config.redis_url, config.redis_password
        multi = job.spec.multi_agent
        # Short reconnect window: the worker's own loop backs off and keeps the fragment.
        options: dict[str, Any] = {"password": password, "reconnect_timeout_s": 2.0}
        if config.learner_idle_s is not None:
            options["learner_idle_s"] = config.learner_idle_s
        self.publishers: dict[str | None, BatchPublisher]
        self.subscribers: dict[str | None, WeightSubscriber]
        if multi is None:
            self.publishers = {None: BatchPublisher(url, job, **options)}
            self.subscribers = {None: WeightSubscriber(url, job, password=password)}
        else:
            self.publishers = {
                policy: BatchPublisher(url, job, policy=policy, **options) for policy in multi.trained_policies
            }
            self.subscribers = {
                policy: WeightSubscriber(url, job, password=password, policy=policy) for policy in multi.policies
            }
        self.publisher = next(iter(self.publishers.values()))
        self.weights = next(iter(self.subscribers.values()))
        self.client = self.publisher.client
        self._sent: tuple[int, set[str]] = (0, set())  # (id of the batch being published, policies done)
        self._filter_syncs: dict[str | None, FilterSync] = {}

    def poll_weights(self) -> WeightsUpdate | None:
        """Single-agent: the newer weights, if any."""
        return self.weights.poll()

    def poll_policy_weights(self) -> dict[str | None, WeightsUpdate]:
        """Each policy's newer weights (key None for a single-agent job); absent when not newer."""
        updates: dict[str | None, WeightsUpdate] = {}
        for policy, subscriber in self.subscribers.items():
            update = subscriber.poll()
            if update is not None:
                updates[policy] = update
        return updates

    def load_weights(self, runner: AnyEnvRunner) -> int | None:
        """Poll and load newer weights into ``runner``; returns the newest seq no loaded, if any."""
        from rolloutfleet.sampling.multiagent_env_runner import MultiAgentEnvRunner

        loaded = None
        for policy, update in self.poll_policy_weights().items():
            if isinstance(runner, MultiAgentEnvRunner):
                assert policy is not None
                done = runner.set_policy_weights(policy, update.weights, update.seq_no)
            else:
                done = runner.set_weights(update.weights, update.seq_no)
            if done:
                loaded = max(loaded or 0, update.seq_no)
        return loaded

    def publish(self, batch: SampleBatch | MultiAgentBatch) -> None:
        """XADD the batch: a single-agent batch to the job's stream; each trained policy's part of
        a multi-agent batch to its policy's stream. The weights versions go with the rows
        (their ``weights_seq_no`` column), not beside them."""
        from rolloutfleet.data.multiagent_batch import MultiAgentBatch

        if not isinstance(batch, MultiAgentBatch):
            self.publisher.publish(batch, worker_index=self.worker_index)
            return
        if self._sent[0] != id(batch):
            self._sent = (id(batch), set())
        done = self._sent[1]
        for policy, publisher in self.publishers.items():
            assert policy is not None
            part = batch.get(policy)
            if policy in done or part is None or len(part) == 0:
                continue
            publisher.publish(
                part,
                worker_index=self.worker_index,
                env_steps=batch.env_steps(),
                agent_ids=batch.agent_ids,
            )
            done.add(policy)

    def _filters(self, runner: AnyEnvRunner) -> dict[str | None, tuple[MeanStdFilter, FilterSync]]:
        """The runner's observation filters (one, or one per policy) with their syncs."""
        single = getattr(runner, "filter", None)
        filters: dict[str | None, MeanStdFilter] = (
            {None: single} if single is not None else dict(getattr(runner, "filters", None) or {})
        )
        for policy in filters:
            if policy not in self._filter_syncs:
                keys = job_keys(self.keys.namespace, self.keys.job, policy)
                self._filter_syncs[policy] = FilterSync(self.client, keys)
        return {policy: (filt, self._filter_syncs[policy]) for policy, filt in filters.items()}

    def pull_filters(self, runner: AnyEnvRunner) -> bool:
        """Start from the fleet's observation-filter statistics (meanStd jobs); whether there were any."""
        pulled = [sync.pull(filt) for filt, sync in self._filters(runner).values()]
        return any(pulled)

    def sync_filters(self, runner: AnyEnvRunner) -> None:
        """Merge what this worker's observation filters saw into the fleet's, and adopt the result."""
        for filt, sync in self._filters(runner).values():
            sync.push(filt)

    def interrupt(self) -> None:
        """Make publishes blocked on a full stream give up (safe from a signal handler)."""
        for publisher in self.publishers.values():
            publisher.interrupt()

    def heartbeat(self, stats: Mapping[str, float | int]) -> None:
        """This worker's heartbeat from its runner's metrics (see :mod:`rolloutfleet.transport.heartbeat`)."""
        write_heartbeat(self.client, self.keys, self.worker_index, stats)

    def close(self) -> None:
        for publisher in self.publishers.values():
            publisher.close()
        for subscriber in self.subscribers.values():
            subscriber.close()
