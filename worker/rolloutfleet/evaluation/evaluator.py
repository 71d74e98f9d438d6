"""The evaluation worker process (``rolloutfleet worker`` with ``ROLLOUTFLEET_ROLE=evaluator``).

Loop: while the version it holds has episodes nobody plays yet, claim one, play it, record
it (and publish the version's summary when that completed it); then load the newest
weights version and start on it. So every version it starts is finished, versions the
learner publishes faster than they can be judged are skipped, and several evaluation
workers share a version's episodes. It publishes no training batches and no heartbeat; it
is ready once env, policy and Redis are up (``/readyz``), and Redis errors are waited out
with backoff, unready. SIGTERM: the episode being played is finished and recorded, then
exit 0. A weights version that does not fit the model is refused once, as by a worker.
Redis refusing the password: one line, exit 4 (as a worker).
A worker killed mid-episode leaves that version unfinished (never published); the next
version is judged as usual.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping
from types import FrameType

from prometheus_client import CollectorRegistry, Counter, Gauge

from rolloutfleet.data.weights_check import WeightsRefused
from rolloutfleet.evaluation.confidence import summarize
from rolloutfleet.evaluation.episodes import EpisodePlayer
from rolloutfleet.fleet.parent_watch import parent_pid_from, stop_self, watch_parent
from rolloutfleet.fleet.probes import Probes, serve
from rolloutfleet.fleet.termination import EXIT_BAD_SPEC, EXIT_REDIS, report_fatal
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import SpecError
from rolloutfleet.transport.evaluation_results import EvaluationBoard
from rolloutfleet.transport.filter_sync import FilterSync
from rolloutfleet.transport.redis.connection import connect
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.redis.outage import OutageLoop
from rolloutfleet.transport.weights import WeightSubscriber

log = logging.getLogger("rolloutfleet.evaluation.evaluator")
ROLE_VARIABLE = "ROLLOUTFLEET_ROLE"
ROLE = "evaluator"
POLL_S = 1.0
"""How often an idle evaluation worker looks for a newer weights version."""


class EvaluationWorker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        job = config.job
        self.stopping = False
        self.probes = Probes()
        self.registry = CollectorRegistry()
        labels = {"job": job.name, "namespace": job.namespace}
        self.episodes = Counter("rolloutfleet_evaluation_episodes", "Evaluation episodes played by this worker",
                                list(labels), registry=self.registry).labels(**labels)  # fmt: skip
        self.version_return = Gauge("rolloutfleet_evaluation_return", "Mean return of the last version this "
                                    "worker summarized", list(labels), registry=self.registry).labels(**labels)  # fmt: skip
        self.version: int | None = None

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current episode, then exiting", signum)
        self.stopping = True

    def run(self) -> int:
        config, job = self.config, self.config.job
        server = serve(self.probes, self.registry, config.metrics_port, config.listen_host)
        self.probes.set_ready(False, "building the env and policy")
        player = EpisodePlayer(job, config.worker_index, config.num_workers)
        player.alive = self.probes.beat
        episodes = player.evaluation.episodes
        log.info("evaluation worker %d/%d of %s: %d episodes per version, explore=%s", config.worker_index,
                 config.num_workers, job.name, episodes, player.evaluation.explore)  # fmt: skip
        outage = OutageLoop(config.redis_url, sleep=self._sleep, log=log,
                            unready=lambda reason: self.probes.set_ready(False, reason))  # fmt: skip
        parts: tuple[EvaluationBoard, WeightSubscriber, FilterSync] | None = None
        while not self.stopping:
            self.probes.beat()
            try:
                if parts is None:
                    parts = self._connect(episodes)
                    self.probes.set_ready(True)
                if not self._step(player, *parts):
                    self._sleep(POLL_S)
                outage.succeeded()
            except outage.errors as exc:
                if (line := outage.failed(exc)) is not None:  # a refused password
                    report_fatal(line)
                    player.close()
                    server.shutdown()
                    return EXIT_REDIS  # replaced after a pause: a rotated Secret is read by the next pod
        player.close()
        server.shutdown()
        log.info("stopped cleanly")
        return 0

    def _connect(self, episodes: int) -> tuple[EvaluationBoard, WeightSubscriber, FilterSync]:
        config, job = self.config, self.config.job
        keys = job_keys(job.namespace, job.name)
        client = connect(config.redis_url, config.redis_password)
        subscriber = WeightSubscriber(config.redis_url, job, password=config.redis_password)
        return EvaluationBoard(client, keys, episodes), subscriber, FilterSync(client, keys)

    def _step(self, player: EpisodePlayer, board: EvaluationBoard, weights: WeightSubscriber,
              filters: FilterSync) -> bool:  # fmt: skip
        """One episode of the version held, or the newest version loaded; False: nothing to do."""
        if self.version is not None and (index := board.claim(self.version)) is not None:
            episode_return, length = player.play(player.evaluation.seed + index)
            self.episodes.inc()
            played = board.record(self.version, index, episode_return, length)
            if played is not None:
                summary = summarize(self.version, played)
                board.publish({**summary.to_json(), "evaluated_at": time.time()})
                self.version_return.set(summary.return_mean)
                log.info("%s", summary.describe())
            return True
        update = weights.poll(held=self.version or 0)
        if update is None:
            return False
        try:
            player.policy.set_weights(update.weights, update.seq_no)
        except WeightsRefused as exc:
            weights.refuse(update.seq_no, str(exc))
            return False
        weights.accepted(update.seq_no)
        if player.filter is not None:
            filters.pull(player.filter)  # the fleet's statistics as they are now, frozen while playing
        self.version = update.seq_no
        return True

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stopping:
            self.probes.beat()
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def is_evaluator(environ: Mapping[str, str]) -> bool:
    """Whether this process is an evaluation worker (the operator's evaluation pods say so)."""
    return environ.get(ROLE_VARIABLE, "") == ROLE


def main(environ: Mapping[str, str], log_level: str | None = None) -> int:
    """The evaluation worker until SIGTERM/SIGINT: 0, or 3 with one line for a spec, env or
    policy that cannot be used (and for Redis refusing the password), as a worker says it."""
    logging.basicConfig(
        level=(log_level or environ.get("ROLLOUTFLEET_LOG_LEVEL") or "INFO").upper(),
        format='{"ts": "%(asctime)s", "level": "%(levelname)s", "logger": "%(name)s", "msg": %(message)r}',
    )
    stop_requested: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stop_requested.append(signum))
    try:
        parent_pid = parent_pid_from(environ)  # started by `rolloutfleet run`: stop with it
        if parent_pid is not None:
            watch_parent(parent_pid, stop_self)
        worker = EvaluationWorker(WorkerConfig.from_environ(environ))
        worker.stopping = bool(stop_requested)
        signal.signal(signal.SIGTERM, worker.request_stop)
        signal.signal(signal.SIGINT, worker.request_stop)
        return worker.run()
    except SpecError as exc:
        report_fatal(str(exc))
        return EXIT_BAD_SPEC
