"""``rolloutfleet worker``: the process in every worker pod (and every local-fleet worker).

Loop: load newer weights if any → sample a fragment → publish it → merge the observation
filter's statistics with the fleet's (meanStd jobs) → heartbeat. Around it: probes and
metrics (:mod:`rolloutfleet.fleet.probes`); a stop signal finishes and publishes the
fragment in hand (with Redis away, a second of tries, then it is dropped); Redis away or
refusing a command (NOPERM): not ready, retried with backoff, the fragment kept, never a
crash loop; a full stream is a wait for a learner (:mod:`rolloutfleet.fleet.learner_wait`);
a hung env call (:mod:`rolloutfleet.fleet.env_watchdog`); the supervisor gone
(:mod:`rolloutfleet.fleet.parent_watch`); NaN/inf rows counted. What cannot work ends the
worker with one line and an exit code (:mod:`rolloutfleet.fleet.termination`). The whole
list, user-facing: docs/guides/worker.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from rolloutfleet.transport.redis.errors import BackendError, PermissionRefused

if TYPE_CHECKING:
    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.data.multiagent_batch import MultiAgentBatch
    from rolloutfleet.fleet.worker_transport import WorkerTransport
    from rolloutfleet.league.opponents import LeagueOpponents
    from rolloutfleet.sampling.runner_base import AnyRunner
    from rolloutfleet.transport.redis.stream_load import StreamLoad

from rolloutfleet.fleet.env_watchdog import EnvWatchdog, Verdict, leave
from rolloutfleet.fleet.learner_wait import LearnerWait
from rolloutfleet.fleet.nonfinite import NonFinite, NonFiniteTally
from rolloutfleet.fleet.parent_watch import parent_pid_from, stop_self, watch_parent
from rolloutfleet.fleet.row_tally import RowTally
from rolloutfleet.fleet.termination import EXIT_REDIS, report_fatal, report_unbuildable
from rolloutfleet.fleet.worker_metrics import WorkerMetrics
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import SpecError
from rolloutfleet.transport.publisher import BackpressureTimeout, PublishInterrupted, RedisFull
from rolloutfleet.transport.redis.connection import address
from rolloutfleet.transport.redis.outage import OutageLoop

log = logging.getLogger("rolloutfleet.fleet.worker")

STOP_RETRY_S = 1.0
"""How long a stopping worker keeps trying to publish its last fragment while Redis fails."""
HEARTBEAT_EVERY_S = 1.0
"""A sampling worker writes its heartbeat at most this often (a fast one publishes several
fragments a second); a change of what it says besides its numbers is written at once."""


@dataclass
class _Loop:
    """What :meth:`Worker.run`'s loop carries from one fragment to the next."""

    pending: SampleBatch | MultiAgentBatch | None = None
    """A fragment sampled and not yet published (kept through a Redis outage)."""
    restarts_seen: int = 0
    filters_pulled: bool = False
    stop_deadline: float = 0.0
    """Set at the first Redis error after a stop request."""


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.stopping = False
        job = config.job
        self.metrics = WorkerMetrics(job.name, job.namespace, config.worker_index)
        from rolloutfleet.fleet.probes import Probes

        self.probes = Probes()
        self.transport: WorkerTransport | None = None
        self.league: LeagueOpponents | None = None
        """spec.league: the snapshots this worker's opponents play, and their results."""
        self.nonfinite = NonFiniteTally()
        self._interrupt_envs: Callable[[], None] | None = None
        self.learner_wait = LearnerWait()
        self._stats: Mapping[str, float | int] = {}  # the last fragment's, for heartbeats while waiting
        self.rows = RowTally()  # where every row sampled went: the heartbeat's rows_* fields
        self.watchdog: EnvWatchdog | None = None
        self.outage: OutageLoop | None = None

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current fragment, then exiting", signum)
        self.stopping = True
        if self.watchdog is not None:
            self.watchdog.request_stop()  # an env call that hangs must not outlast the grace period
        if self._interrupt_envs is not None:
            self._interrupt_envs()  # an env failing over and over is not recreated again
        if self.transport is not None:
            # A publish waiting on a full stream (no learner reading) must not outlast the grace period.
            self.transport.interrupt()

    def run(self) -> int:
        started = self._start()
        if isinstance(started, int):  # stopped while Redis was away, or gave up (said in one line)
            return started
        server, watchdog, runner, transport, outage = started
        code = self._sample_and_publish(runner, transport, outage)
        transport.close()
        runner.close()
        server.shutdown()
        watchdog.close()
        if code == 0:
            log.info("stopped cleanly")
        return code

    def _start(self) -> tuple[Any, EnvWatchdog, AnyRunner, WorkerTransport, OutageLoop] | int:
        """Probes and metrics, the env-call watchdog, the runner, then Redis: what :meth:`run`
        samples with (and how it rides out Redis's outages), or the exit code, all closed."""
        from rolloutfleet.fleet.probes import serve
        from rolloutfleet.fleet.runner_factory import make_env_runner
        from rolloutfleet.fleet.worker_transport import WorkerTransport
        from rolloutfleet.inference.cpu_threads import limit_cpu_threads
        from rolloutfleet.sampling.heap import keep_freed_memory
        from rolloutfleet.sampling.sizes import check_sizes
        from rolloutfleet.sampling.vector.make import interrupt_failing_envs

        config = self.config
        try:
            server = serve(self.probes, self.metrics.registry, config.metrics_port, config.listen_host)
        except OSError as exc:  # another process holds the port: a setting to change, not to retry
            raise SpecError(f"probes and metrics port {config.metrics_port}: {exc.strerror or exc}") from None
        log.info("worker %d/%d of %s: probes and metrics on %s:%d", config.worker_index, config.num_workers,
                 config.job.name, config.listen_host, server.server_port)  # fmt: skip
        watchdog = self._watch_env_calls()
        size = check_sizes(config.job)  # before the model and the first fragment are allocated
        if size is not None:
            log.info("sizes: %s", size.describe())
        limit_cpu_threads(config.job.spec.policy.num_threads)
        keep_freed_memory()
        self.probes.set_ready(False, "building the env and policy")
        runner = make_env_runner(config.job, worker_index=config.worker_index, num_workers=config.num_workers)
        runner.idle = self._idle  # a runner waiting for external clients is alive meanwhile
        self.metrics.record_policies(runner.policies)
        choice = runner.vector_choice  # None for a multi-agent runner
        if choice is not None:
            self.metrics.record_vectorization(config.job.spec.env.vectorization, choice)
        outage = self.outage = OutageLoop(
            config.redis_url,
            sleep=self._sleep,
            unready=lambda reason: self.probes.set_ready(False, reason),
            counted=self.metrics.redis_errors.inc,
            retryable=WorkerTransport.retryable,
            startup_bound_s=config.redis_startup_timeout_s,
            log=log,
        )
        self.probes.set_ready(False, f"connecting to redis at {address(config.redis_url)}")
        made = self._connect(lambda: WorkerTransport(config), outage)
        if isinstance(made, int):
            runner.close()
            server.shutdown()
            watchdog.close()
            return made
        transport = self.transport = made
        if config.job.spec.league is not None:
            self._attach_league(runner, transport)
        self.probes.set_ready(True)  # env, policy and Redis are up: it can sample and publish
        transport.on_wait(self._on_wait)
        self._interrupt_envs = interrupt_failing_envs
        if self.stopping:
            transport.interrupt()
            interrupt_failing_envs()
        return server, watchdog, runner, transport, outage

    def _attach_league(self, runner: AnyRunner, transport: WorkerTransport) -> None:
        """spec.league: the runner's opponents come from the job's league, on the transport's
        connection (no connection more)."""
        import numpy as np

        from rolloutfleet.league.opponents import LeagueOpponents
        from rolloutfleet.league.store import PolicyStore
        from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner

        config = self.config
        spec = config.job.spec
        assert spec.league is not None and isinstance(runner, MultiAgentEnvRunner)
        store = PolicyStore(config.redis_url, config.job, password=config.redis_password, client=transport.client,
                            reconnect_timeout_s=2.0)  # fmt: skip
        seed = (
            np.random.SeedSequence([spec.sampling.seed, config.worker_index])
            if spec.sampling.seed is not None
            else None
        )
        signature = runner.policies[spec.league.opponent].weights_signature()  # the slots' model
        self.league = LeagueOpponents(store, spec.league, seed=int(np.random.default_rng(seed).integers(2**63)),
                                      worker_index=config.worker_index, signature=signature,
                                      acting=runner.slots_act_only())  # fmt: skip
        runner.attach_league(self.league)

    def _sample_and_publish(self, runner: AnyRunner, transport: WorkerTransport, outage: OutageLoop) -> int:
        """Sample and publish fragments until stopped (the fragment in hand published first,
        unless Redis stays away); the exit code. Redis errors are ridden out with a backoff."""
        from rolloutfleet.sampling.vector.make import EnvInterrupted

        loop = _Loop()
        last_sample = runner.holds_made_rows  # rows clients made, still in the runner at a stop
        answered = True  # whether Redis took the last fragment (then it takes a last heartbeat too)
        while not self.stopping or loop.pending is not None or last_sample:
            last_sample = last_sample and not (self.stopping and loop.pending is None)
            self.probes.beat()
            self.metrics.count_transport(transport)
            answered = False
            try:
                self._one_fragment(runner, transport, loop)
                answered = True
            except PublishInterrupted:
                self._say(self.learner_wait.end(time.time(), "stopping"))
                rows = self._drop(loop)
                log.warning("stopping: dropped one fragment (%d rows) the learner had no room for (stream full)", rows)
                answered = True  # Redis answered: it takes the last heartbeat, with the drop counted
            except BackpressureTimeout as exc:  # before retryable: it is one, but Redis answered
                self._no_room(exc)
            except EnvInterrupted as exc:
                log.warning("stopping: %s; the fragment being sampled is dropped", exc)
                loop.pending = None
            except outage.errors as exc:
                if isinstance(exc, PermissionRefused) and self.stopping:
                    self._drop(loop)  # a revoked ACL user is waited for (unready), unless stopping
                elif self._redis_error(exc, loop, outage):
                    return EXIT_REDIS
        if answered:
            with contextlib.suppress(BackendError):  # the last numbers, the drops included; best effort
                transport.heartbeat(self._stats)
        log.info("stopping: %s", self.rows.describe())
        return 0

    def _drop(self, loop: _Loop) -> int:
        """Drop the fragment in hand (a stop that cannot publish it), counted; its rows."""
        if loop.pending is None:
            return 0
        rows = self.rows.dropped_fragment(loop.pending)
        self.metrics.rows_dropped.inc(rows)
        self._stats = {**self._stats, **self.rows.fields()}
        loop.pending = None
        return rows

    def _idle(self) -> None:
        """A runner waiting for external clients: alive meanwhile, and the heartbeat its last
        fragment held back (:data:`HEARTBEAT_EVERY_S`) goes out instead of waiting for the next."""
        self.probes.beat()
        if self.transport is not None:
            self.transport.flush_heartbeat(every_s=HEARTBEAT_EVERY_S)

    def _one_fragment(self, runner: AnyRunner, transport: WorkerTransport, loop: _Loop) -> None:
        """Sample a fragment (unless one waits to be published), publish it, sync the filters
        and write the heartbeat; the first time, record the models and pull the filters."""
        if not loop.filters_pulled:
            transport.record_models(runner)  # what a learner's WeightPublisher checks against
            transport.pull_filters(runner)  # a replacement worker normalizes like the fleet
            loop.filters_pulled = True
        if loop.pending is None:
            loaded = transport.load_weights(runner)
            if loaded is not None:
                self.metrics.weights_seq_no.set(runner.weights_seq_no)
            loop.pending = runner.sample()
            self.rows.sampled_fragment(loop.pending)
            quarantined = sum(f.quarantined for f in runner.get_filters().values())
            news = self.nonfinite.observe(loop.pending, quarantined)
            stats = self._stats = {**runner.get_metrics(), **self.nonfinite.lifetime(), **self.rows.fields()}
            self._record(stats, loop.restarts_seen, news)
            loop.restarts_seen = int(stats["num_env_restarts"])
        started = time.perf_counter()
        transport.publish(loop.pending)
        published_s = time.perf_counter() - started
        self.metrics.publish_latency.observe(published_s)
        self.metrics.record_step_timing(self._stats, published_s)
        self.metrics.batches.inc()
        self.rows.published_fragment(loop.pending)
        self._stats = {**self._stats, **self.rows.fields()}
        loop.pending = None
        if self.league is not None:
            self.league.flush()  # the fragment's finished matches (kept for the next try if Redis fails)
        self._say(*self.learner_wait.published(time.time()))
        transport.sync_filters(runner)
        transport.heartbeat(self._stats, every_s=HEARTBEAT_EVERY_S)
        self.probes.set_ready(True)
        if self.outage is not None:
            self.outage.succeeded()

    def _redis_error(self, exc: Exception, loop: _Loop, outage: OutageLoop) -> bool:
        """A Redis error in the loop, met by the :class:`OutageLoop` (not ready, backoff), or
        while stopping a short last try and then the fragment in hand dropped; whether the
        worker ends (a refused password, or Redis never reached within its bound: one line)."""
        line = outage.failed(exc, starting=not loop.filters_pulled, wait=not self.stopping)
        if line is not None:
            report_fatal(line)
            return True
        if not self.stopping:
            return False
        # The backoff is for riding out an outage; a stop has a grace period that
        # a Redis which is gone must not use up: a short last try, then drop.
        now = time.monotonic()
        loop.stop_deadline = loop.stop_deadline or now + STOP_RETRY_S
        if loop.pending is not None and now < loop.stop_deadline:
            time.sleep(0.1)
            return False
        if loop.pending is not None:
            log.warning("stopping with Redis unreachable (%s): dropping one unpublished fragment", exc)
        self._drop(loop)
        return False

    def _watch_env_calls(self) -> EnvWatchdog:
        """Start the env-call watchdog (:mod:`rolloutfleet.fleet.env_watchdog`)."""
        from rolloutfleet.sampling.vector.make import env_name

        spec = self.config.job.spec.env
        watchdog = self.watchdog = EnvWatchdog(env_name(spec), spec.call_timeout_seconds)
        if self.stopping:
            watchdog.request_stop()
        watchdog.start(self._env_call_verdict)
        return watchdog

    def _env_call_verdict(self, verdict: Verdict) -> None:
        """On the watchdog's thread: an env call hung past the timeout (counted, unhealthy, in a
        last heartbeat, then exit 3), or outlasted a stop (exit 0). The process ends here."""
        from rolloutfleet.sampling.vector.processes import kill_env_processes

        transport, last_beat = self.transport, None
        if verdict.stuck:
            self.metrics.env_call_timeouts.inc()
            self.probes.failed = verdict.line
            if transport is not None:
                last_beat = lambda: transport.heartbeat(self._stats, stuck=verdict.line)  # noqa: E731
        leave(verdict, report_fatal, kill_env_processes, last_beat)

    def _no_room(self, exc: BackpressureTimeout) -> None:
        """A publish gave up waiting for room after ``blockTimeoutSeconds``: Redis answered, so
        the worker stays ready and tries again at once with the fragment in hand."""
        self.probes.set_ready(True)
        now = time.time()
        if exc.learner_absent:
            self._say(self.learner_wait.absent(exc.stream, exc.waited_s, now))
        elif isinstance(exc, RedisFull):
            log.warning("%s; waiting on", exc)  # Redis needs more maxmemory or a faster learner: said each time
        elif line := self.learner_wait.slow(exc.group, exc.stream, exc.waited_s, now):
            log.warning("%s", line)
        self._beat_waiting()

    def _on_wait(self, stream: str, load: StreamLoad, waited_s: float) -> None:
        """The publisher's call, after a second of waiting for room and then every two seconds."""
        self.probes.beat()  # a long blockTimeoutSeconds is no stall
        self.probes.set_ready(True)  # Redis answered the measure that found the stream full
        if load.group is None:
            self._say(self.learner_wait.absent(stream, waited_s, time.time(), load.ignored))
        else:
            self._say(self.learner_wait.reading(load.group, time.time()))
        self._beat_waiting()

    def _say(self, *lines: str | None) -> None:
        for line in lines:
            if line:
                log.info("%s", line)
        self.metrics.waiting_for_learner.set(1 if self.learner_wait.waiting else 0)

    def _beat_waiting(self) -> None:
        """While waiting for a learner, a heartbeat that says since when: at once when that
        changed, else every ``WAITING_BEAT_S`` (:meth:`LearnerWait.beat_due`). Best effort: a Redis
        error here is the publisher's to meet (and retry) on its next call."""
        if self.transport is None or not self.learner_wait.beat_due(time.monotonic()):
            return
        since = self.learner_wait.since
        with contextlib.suppress(BackendError):
            self.transport.heartbeat(self._stats, waiting_since=since)
            self.learner_wait.beat = (time.monotonic(), since)

    def _connect(self, make: Callable[[], WorkerTransport], outage: OutageLoop) -> WorkerTransport | int:
        """``make()`` (which asks Redis whether it is a cluster), retried by the
        :class:`OutageLoop` while Redis is away or refusing (not ready meanwhile, never a
        crash) up to ``redis_startup_timeout_s``; else the exit code: 0 once told to stop,
        EXIT_REDIS for a refused password (not retried: it will not become right by waiting)
        or a bound spent, said in one line."""
        while not self.stopping:
            self.probes.beat()
            try:
                return make()
            except outage.errors as exc:
                if (line := outage.failed(exc, starting=True)) is not None:
                    report_fatal(line)
                    return EXIT_REDIS
        return 0

    def _record(self, stats: Mapping[str, float | int], restarts_seen: int, news: NonFinite) -> None:
        if news:
            log.warning("%s", NonFiniteTally.describe(news))
        self.metrics.record_fragment(stats, restarts_seen, news)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stopping:
            self.probes.beat()
            time.sleep(min(0.1, deadline - time.monotonic()))


def main(environ: Mapping[str, str] | None = None, log_level: str | None = None) -> int:
    """``log_level``: as ``rolloutfleet --log-level`` resolved it; else ``ROLLOUTFLEET_LOG_LEVEL``, INFO."""
    logging.basicConfig(
        level=(log_level or os.environ.get("ROLLOUTFLEET_LOG_LEVEL") or "INFO").upper(),
        format='{"ts": "%(asctime)s", "level": "%(levelname)s", "logger": "%(name)s", "msg": %(message)r}',
    )
    # Handlers first: a pod deleted while torch is still importing must still exit 0.
    stop_requested: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stop_requested.append(signum))
    environ = os.environ if environ is None else environ
    try:
        parent_pid = parent_pid_from(environ)
        if parent_pid is not None:
            watch_parent(parent_pid, stop_self)
        config = WorkerConfig.from_environ(environ)
        worker = Worker(config)
        worker.stopping = bool(stop_requested)
        signal.signal(signal.SIGTERM, worker.request_stop)
        signal.signal(signal.SIGINT, worker.request_stop)
        return worker.run()
    except (SpecError, ImportError) as exc:  # ImportError: torch for a policy that needs it, in an image without it
        return report_unbuildable(exc, environ)


if __name__ == "__main__":
    sys.exit(main())
