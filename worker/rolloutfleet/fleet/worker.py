"""``rolloutfleet worker``: the process in every worker pod (and every local-fleet worker).

Loop: load newer weights if any → sample a fragment → publish it → merge the observation
filter's statistics with the fleet's (meanStd jobs) → heartbeat. Around it:

* Prometheus metrics, ``/healthz`` and ``/readyz`` (:mod:`rolloutfleet.fleet.probes`);
* SIGTERM/SIGINT: the fragment being sampled is finished and published, then exit 0;
  with Redis unreachable the fragment is dropped after a second of tries (a stop never
  waits out the outage backoff);
* ready once env and policy are built and Redis is reached (before the first publish): the
  worker can sample and publish when there is room (:mod:`rolloutfleet.fleet.probes`);
* a full stream under ``block`` backpressure (the publisher gave up after
  ``blockTimeoutSeconds``): still ready, fragment kept, tried again at once, no Redis error;
  no learner reading is a wait *for a learner*, said once at its start and once at its end,
  carried by the heartbeat and ``rolloutfleet_waiting_for_learner``
  (:mod:`rolloutfleet.fleet.learner_wait`);
* Redis unreachable: not ready, retry with backoff, keep the sampled fragment (never
  crash-loop because the learner's Redis restarts); a Redis never reached at all is waited
  for without bound too (a pod whose Redis is not up yet), unless
  ``ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS`` bounds that wait: then one line
  (``redis at 127.0.0.1:1: connection refused (tried for 30 s)``) and exit code 4;
* Redis refuses the password: not retried, one line and exit code 4;
* started by ``rolloutfleet run`` (``ROLLOUTFLEET_PARENT_PID`` set): the same stop once
  the supervisor is gone, even by SIGKILL (:mod:`rolloutfleet.fleet.parent_watch`);
* env or policy cannot be built, an env's ``reset`` raises, or a sub-env fails
  ``spec.env.maxConsecutiveFailures`` times in a row: one line on stderr naming the env and
  the error (and in the pod's termination message), exit code 3, so the operator can show
  why; a stop signal while an env keeps failing ends sampling at the next failure, exit 0;
  a module the image lacks (torch in the slim image) is such a line too, saying which image
  has it (:mod:`rolloutfleet.spec.missing_modules`);
* an env constructor, ``reset`` or ``step`` still running after ``spec.env.callTimeoutSeconds``:
  one line naming the sub-env and the call, counted, unhealthy, exit code 3; a stop signal
  during such a call ends the worker within seconds (:mod:`rolloutfleet.fleet.env_watchdog`);
* NaN/inf observations and rewards: counted (metrics, a log line per fragment, heartbeat);
* a weights version that does not fit the model or holds NaN/inf: refused once (one log
  line, ``rolloutfleet_weights_refused``, heartbeat), sampling goes on with the weights held.
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
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.data.multiagent_batch import MultiAgentBatch
    from rolloutfleet.fleet.worker_transport import WorkerTransport
    from rolloutfleet.sampling.runner import AnyRunner
    from rolloutfleet.transport.backpressure import StreamLoad

from rolloutfleet.fleet.env_watchdog import EnvWatchdog, Verdict, leave
from rolloutfleet.fleet.learner_wait import LearnerWait
from rolloutfleet.fleet.nonfinite import NonFinite, NonFiniteTally
from rolloutfleet.fleet.parent_watch import parent_pid_from, stop_self, watch_parent
from rolloutfleet.fleet.worker_metrics import WorkerMetrics
from rolloutfleet.spec.job import SpecError
from rolloutfleet.spec.missing_modules import PROFILE_VARIABLE, missing_module, missing_module_line
from rolloutfleet.spec.worker_config import WorkerConfig
from rolloutfleet.transport.connection import address, failure_line
from rolloutfleet.transport.publisher import BackpressureTimeout, PublishInterrupted, RedisFull

log = logging.getLogger("rolloutfleet.fleet.worker")

EXIT_BAD_SPEC = 3
EXIT_REDIS = 4
"""Redis refused the password, or was never reached within ``redis_startup_timeout_s``."""
STOP_RETRY_S = 1.0
"""How long a stopping worker keeps trying to publish its last fragment while Redis fails."""
WAITING_BEAT_S = 10.0
"""How often a worker waiting for a learner refreshes its heartbeat (which says since when)."""
TERMINATION_LOG = Path(os.environ.get("ROLLOUTFLEET_TERMINATION_LOG", "/dev/termination-log"))


@dataclass
class _Loop:
    """What :meth:`Worker.run`'s loop carries from one fragment to the next."""

    pending: SampleBatch | MultiAgentBatch | None = None
    """A fragment sampled and not yet published (kept through a Redis outage)."""
    backoff: float = 0.5
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
        self.nonfinite = NonFiniteTally()
        self._interrupt_envs: Callable[[], None] | None = None
        self._counted: dict[str, float] = {}
        self.learner_wait = LearnerWait()
        self._stats: Mapping[str, float | int] = {}  # the last fragment's, for heartbeats while waiting
        self._waiting_beat: tuple[float, float | None] = (0.0, None)  # (monotonic time, since) of the last
        self.watchdog: EnvWatchdog | None = None
        self._last_refusal = ""  # the last NOPERM line said (each distinct one once)

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
        server, watchdog, runner, transport, began = started
        code = self._sample_and_publish(runner, transport, began)
        transport.close()
        runner.close()
        server.shutdown()
        watchdog.close()
        if code == 0:
            log.info("stopped cleanly")
        return code

    def _start(self) -> tuple[Any, EnvWatchdog, AnyRunner, WorkerTransport, float] | int:
        """Probes and metrics, the env-call watchdog, the runner, then Redis: what :meth:`run`
        samples with (and when Redis was reached first), or the exit code, all closed."""
        from rolloutfleet.fleet.probes import serve
        from rolloutfleet.fleet.worker_transport import WorkerTransport
        from rolloutfleet.inference.cpu_threads import limit_cpu_threads
        from rolloutfleet.sampling.envs import interrupt_failing_envs
        from rolloutfleet.sampling.heap import keep_freed_memory
        from rolloutfleet.sampling.runners import make_env_runner
        from rolloutfleet.sampling.sizes import check_sizes

        config = self.config
        try:
            server = serve(self.probes, self.metrics.registry, config.metrics_port)
        except OSError as exc:  # another process holds the port: a setting to change, not to retry
            raise SpecError(f"probes and metrics port {config.metrics_port}: {exc.strerror or exc}") from None
        log.info("worker %d/%d of %s: probes and metrics on :%d", config.worker_index, config.num_workers,
                 config.job.name, server.server_port)  # fmt: skip
        watchdog = self._watch_env_calls()
        size = check_sizes(config.job)  # before the model and the first fragment are allocated
        if size is not None:
            log.info("sizes: %s", size.describe())
        limit_cpu_threads(config.job.spec.policy.num_threads)
        keep_freed_memory()
        self.probes.set_ready(False, "building the env and policy")
        runner = make_env_runner(config.job, worker_index=config.worker_index, num_workers=config.num_workers)
        runner.idle = self.probes.beat  # a runner waiting for external clients is alive meanwhile
        self.metrics.record_policies(runner.policies)
        choice = runner.vector_choice  # None for a multi-agent runner
        if choice is not None:
            self.metrics.record_vectorization(config.job.spec.env.vectorization, choice)
        began = time.monotonic()
        self.probes.set_ready(False, f"connecting to redis at {address(config.redis_url)}")
        made = self._connect(lambda: WorkerTransport(config), began)
        if isinstance(made, int):
            runner.close()
            server.shutdown()
            watchdog.close()
            return made
        transport = self.transport = made
        self.probes.set_ready(True)  # env, policy and Redis are up: it can sample and publish
        transport.on_wait(self._on_wait)
        self._interrupt_envs = interrupt_failing_envs
        if self.stopping:
            transport.interrupt()
            interrupt_failing_envs()
        return server, watchdog, runner, transport, began

    def _sample_and_publish(self, runner: AnyRunner, transport: WorkerTransport, began: float) -> int:
        """Sample and publish fragments until stopped (the fragment in hand published first,
        unless Redis stays away); the exit code. Redis errors are ridden out with a backoff."""
        from rolloutfleet.sampling.envs import EnvInterrupted

        loop = _Loop()
        last_sample = runner.holds_made_rows  # rows clients made, still in the runner at a stop
        while not self.stopping or loop.pending is not None or last_sample:
            last_sample = last_sample and not (self.stopping and loop.pending is None)
            self.probes.beat()
            self._count_transport(transport)
            try:
                self._one_fragment(runner, transport, loop)
            except PublishInterrupted:
                self._say(self.learner_wait.end(time.time(), "stopping"))
                log.warning("stopping: dropped one fragment the learner had no room for (stream full)")
                loop.pending = None
            except BackpressureTimeout as exc:  # before retryable: it is one, but Redis answered
                self._no_room(exc)
            except EnvInterrupted as exc:
                log.warning("stopping: %s; the fragment being sampled is dropped", exc)
                loop.pending = None
            except redis.AuthenticationError as exc:  # before retryable: it is a ConnectionError
                report_fatal(failure_line(exc, address(self.config.redis_url)))
                return EXIT_REDIS
            except redis.exceptions.NoPermissionError as exc:  # a revoked ACL user: wait (unready) for it back
                if self.stopping:
                    loop.pending = None
                    continue
                loop.backoff = self._refused(exc, loop.backoff)
            except transport.retryable as exc:
                if self._redis_error(exc, loop, began):
                    return EXIT_REDIS
        return 0

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
            quarantined = sum(f.quarantined for f in runner.get_filters().values())
            news = self.nonfinite.observe(loop.pending, quarantined)
            stats = self._stats = {**runner.get_metrics(), **self.nonfinite.lifetime()}
            self._record(stats, loop.restarts_seen, news)
            loop.restarts_seen = int(stats["num_env_restarts"])
        started = time.perf_counter()
        transport.publish(loop.pending)
        published_s = time.perf_counter() - started
        self.metrics.publish_latency.observe(published_s)
        self.metrics.record_step_timing(self._stats, published_s)
        self.metrics.batches.inc()
        loop.pending = None
        self._say(*self.learner_wait.published(time.time()))
        transport.sync_filters(runner)
        transport.heartbeat(self._stats)
        self.probes.set_ready(True)
        loop.backoff = 0.5
        self._last_refusal = ""

    def _redis_error(self, exc: Exception, loop: _Loop, began: float) -> bool:
        """A retryable Redis error in the loop: back off, or while stopping a short last try
        and then drop the fragment in hand; whether the worker gives up (Redis never came)."""
        self.metrics.redis_errors.inc()
        self.probes.set_ready(False, f"redis: {exc}")
        if not loop.filters_pulled and self._gave_up(exc, began):
            return True
        if self.stopping:
            # The backoff is for riding out an outage; a stop has a grace period that
            # a Redis which is gone must not use up: a short last try, then drop.
            now = time.monotonic()
            loop.stop_deadline = loop.stop_deadline or now + STOP_RETRY_S
            if loop.pending is not None and now < loop.stop_deadline:
                time.sleep(0.1)
                return False
            if loop.pending is not None:
                log.warning("stopping with Redis unreachable (%s): dropping one unpublished fragment", exc)
            loop.pending = None
            return False
        log.warning("redis unavailable (%s); retrying in %.1f s", exc, loop.backoff)
        self._sleep(loop.backoff)
        loop.backoff = min(loop.backoff * 2, 10.0)
        return False

    def _watch_env_calls(self) -> EnvWatchdog:
        """Start the env-call watchdog (:mod:`rolloutfleet.fleet.env_watchdog`)."""
        from rolloutfleet.sampling.envs import env_name

        spec = self.config.job.spec.env
        watchdog = self.watchdog = EnvWatchdog(env_name(spec), spec.call_timeout_seconds)
        if self.stopping:
            watchdog.request_stop()
        watchdog.start(self._env_call_verdict)
        return watchdog

    def _env_call_verdict(self, verdict: Verdict) -> None:
        """On the watchdog's thread: an env call hung past the timeout (counted, unhealthy, in a
        last heartbeat, then exit 3), or outlasted a stop (exit 0). The process ends here."""
        from rolloutfleet.sampling.env_processes import kill_env_processes

        transport, last_beat = self.transport, None
        if verdict.stuck:
            self.metrics.env_call_timeouts.inc()
            self.probes.failed = verdict.line
            if transport is not None:
                last_beat = lambda: transport.heartbeat(self._stats, stuck=verdict.line)  # noqa: E731
        leave(verdict, report_fatal, kill_env_processes, last_beat)

    def _refused(self, exc: redis.exceptions.NoPermissionError, backoff: float) -> float:
        """Redis refused a command of this worker's ACL user (NOPERM: the user was revoked or
        narrowed mid-run): said in one line when the refusal is new, not ready, retried with
        backoff (the operator re-applies the job's users), never a crash loop; the next backoff."""
        line = f"redis at {address(self.config.redis_url)} refused a command: NOPERM {' '.join(str(exc).split())}"
        self.metrics.redis_errors.inc()
        self.probes.set_ready(False, "redis: NOPERM (the job's Redis user lacks a permission)")
        if line != self._last_refusal:
            self._last_refusal = line
            log.error("%s; retrying until the job's Redis user allows it again", line)
        self._sleep(backoff)
        return min(backoff * 2, 30.0)

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
        """The publisher's call, about once a second while a publish waits for room."""
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
        changed, else every :data:`WAITING_BEAT_S`. Best effort: a Redis error here is the
        publisher's to meet (and retry) on its next call."""
        if self.transport is None:
            return
        since = self.learner_wait.since
        last_at, last_since = self._waiting_beat
        if since == last_since and (since is None or time.monotonic() - last_at < WAITING_BEAT_S):
            return
        with contextlib.suppress(redis.RedisError):
            self.transport.heartbeat(self._stats, waiting_since=since)
            self._waiting_beat = (time.monotonic(), since)

    def _gave_up(self, exc: Exception, began: float) -> bool:
        """Whether Redis, never reached yet, has been tried for ``redis_startup_timeout_s``
        (said in one line); never when that is None."""
        bound = self.config.redis_startup_timeout_s
        if bound is None or time.monotonic() - began < bound:
            return False
        report_fatal(f"{failure_line(exc, address(self.config.redis_url))} (tried for {bound:g} s)")
        return True

    def _connect(self, make: Callable[[], WorkerTransport], began: float) -> WorkerTransport | int:
        """``make()`` (which asks Redis whether it is a cluster), retried with backoff while
        Redis is away (not ready meanwhile, never a crash) up to ``redis_startup_timeout_s``;
        else the exit code: 0 once told to stop, EXIT_REDIS for a refused password (not
        retried: it will not become right by waiting) or a bound spent, said in one line."""
        from rolloutfleet.fleet.worker_transport import WorkerTransport

        backoff = 0.5
        while not self.stopping:
            self.probes.beat()
            try:
                return make()
            except redis.AuthenticationError as exc:  # before retryable: it is a ConnectionError
                report_fatal(failure_line(exc, address(self.config.redis_url)))
                return EXIT_REDIS
            except redis.exceptions.NoPermissionError as exc:
                backoff = self._refused(exc, backoff)
            except WorkerTransport.retryable as exc:
                self.metrics.redis_errors.inc()
                self.probes.set_ready(False, f"redis: {exc}")
                if self._gave_up(exc, began):
                    return EXIT_REDIS
                log.warning("redis unavailable (%s); retrying in %.1f s", exc, backoff)
                self._sleep(backoff)
                backoff = min(backoff * 2, 10.0)
        return 0

    def _record(self, stats: Mapping[str, float | int], restarts_seen: int, news: NonFinite) -> None:
        m = self.metrics
        if news:
            log.warning("%s", NonFiniteTally.describe(news))
            m.nonfinite_obs.inc(news.obs_rows)
            m.nonfinite_rewards.inc(news.reward_rows)
            m.filter_quarantined.inc(news.quarantined)
        m.env_steps.inc(stats["num_env_steps_sampled"])
        m.episodes.inc(stats["num_episodes"])
        m.episodes_truncated_by_max_steps.inc(stats.get("num_episodes_truncated_by_max_steps", 0))
        m.steps_per_s.set(stats["env_steps_per_s"])
        if stats["episode_return_mean"] == stats["episode_return_mean"]:  # not NaN
            m.episode_return.set(stats["episode_return_mean"])
        m.record_custom(stats)
        m.record_external(stats)
        m.record_step_timing(stats)
        m.env_restarts.inc(int(stats["num_env_restarts"]) - restarts_seen)

    def _count_transport(self, transport: WorkerTransport) -> None:
        """Carry the transport's own counters (publishers', weights subscribers') into the metrics."""
        publishers = [p.stats for p in transport.publishers.values()]
        totals = {
            "backpressure_seconds": sum(p.blocked_seconds for p in publishers),
            "redis_full_seconds": sum(p.oom_wait_seconds for p in publishers),
            "batches_resent": sum(p.resent for p in publishers),
            "weights_resets": sum(s.resets for s in transport.subscribers.values()),
            "weights_refused": sum(s.refusals for s in transport.subscribers.values()),
        }
        for name, total in totals.items():
            if total > self._counted.get(name, 0):
                getattr(self.metrics, name).inc(total - self._counted.get(name, 0))
                self._counted[name] = total

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stopping:
            self.probes.beat()
            time.sleep(min(0.1, deadline - time.monotonic()))


def report_fatal(message: str) -> None:
    """One line for humans (stderr) and for the operator (the pod's termination message)."""
    line = message.replace("\n", " ")[:1000]
    print(f"rolloutfleet worker: {line}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):  # not in a pod, or a read-only path: stderr is enough
        TERMINATION_LOG.write_text(line + "\n")


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
    except SpecError as exc:
        module = missing_module(exc)
        report_fatal(
            str(exc) if module is None else missing_module_line(module, environ.get(PROFILE_VARIABLE), str(exc))
        )
        return EXIT_BAD_SPEC
    except ImportError as exc:  # torch for a policy that needs it, in an image without it
        module = missing_module(exc)
        if module is None:
            raise
        report_fatal(missing_module_line(module, environ.get(PROFILE_VARIABLE)))
        return EXIT_BAD_SPEC


if __name__ == "__main__":
    sys.exit(main())
