"""``rolloutfleet run``: a job's workers as local processes, supervised like the operator does.

Each worker is the same ``rolloutfleet worker`` process a pod runs, with the same
environment variables. A worker that exits unexpectedly is restarted after its backoff,
against the job's restart budget (:mod:`rolloutfleet.rules.restarts`); once the budget is spent
the fleet says so and leaves it down. A worker that ends because this Python lacks a module
(:mod:`rolloutfleet.rules.missing_modules`, read from its termination message as the operator
reads a pod's) stays down at once, with its one line, and counts no restart. ``stop()`` sends SIGTERM, waits for the grace
period, then SIGKILLs what is left: nothing outlives the fleet. Should this process die
without calling ``stop()`` (SIGKILL), the workers and the embedded redis-server stop by
themselves within seconds (:mod:`rolloutfleet.fleet.parent_watch`). Workers of an autoscaled
job are forked from a server that already imported the worker's library
(:mod:`rolloutfleet.fleet.local_forkserver`): a step up then starts workers in a fraction of a
second.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rolloutfleet.fleet import local_forkserver
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.fleet.local_forkserver import ForkedWorker, WorkerHandle
from rolloutfleet.fleet.parent_watch import PARENT_PID_ENV
from rolloutfleet.rules.footprint import local_cpus
from rolloutfleet.rules.missing_modules import LOCAL_PROFILE, PROFILE_VARIABLE, stays_down
from rolloutfleet.rules.restarts import RestartTracker
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.sampling.vector.processes import CPUS_VARIABLE, usable_cpus
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.sections.external import PORT_VARIABLE, local_port

log = logging.getLogger(__name__)


@dataclass
class WorkerProcess:
    index: int
    process: WorkerHandle | None = None
    state: str = "starting"  # running | backoff | failed | stopped
    exit_code: int | None = None  # of the last exit; kept across restarts
    last_error: str = ""


class LocalFleet:
    """Run ``job.spec.replicas`` workers on this machine.

    >>> with LocalFleet(RolloutJob.from_file("examples/cartpole.yaml")) as fleet:  # doctest: +SKIP
    ...     while True:
    ...         fleet.poll()
    """

    def __init__(
        self,
        job: RolloutJob,
        redis_url: str | None = None,
        redis_password: str | None = None,
        log_dir: Path | None = None,
        grace_seconds: float = 10.0,
        extra_env: Mapping[str, str] | None = None,
        start: str = "auto",
        listen_host: str = "127.0.0.1",
    ) -> None:
        """``start``: ``fork`` (from the warm server), ``exec`` (a new interpreter each), or
        ``auto``: ``fork`` for a job with ``spec.autoscaling`` where the platform allows.
        ``listen_host``: what the workers' listeners bind (probes and metrics, an external
        job's action servers): loopback, so nothing of a laptop's fleet is open to its network."""
        if start not in ("auto", "fork", "exec"):
            raise ValueError(f"start must be auto, fork or exec, got {start!r}")
        if start == "auto":
            start = "fork" if job.spec.autoscaling is not None and local_forkserver.available() else "exec"
        elif start == "fork" and not local_forkserver.available():
            raise ValueError("start fork: no fork server here (Python 3.11 on Linux or macOS): use exec")
        self.start_method = start
        self.job = job
        self.grace_seconds = grace_seconds
        self.redis: EmbeddedRedis | None = None
        self._redis_url = redis_url
        self.redis_password = redis_password
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"rolloutfleet-{job.name}-"))
        self._own_log_dir = log_dir is None  # ours to remove after a clean run
        self.kept_logs: Path | None = None
        self.keep_logs = False  # set by another process of the run that failed (an evaluation worker)
        """Set by :meth:`stop` when the logs of a run with a failed worker were kept (a temporary
        folder of ours): where they are."""
        self.extra_env = dict(extra_env or {})
        self.listen_host = listen_host
        self.tracker = RestartTracker(job.spec.restart_policy)
        self.workers = {i: WorkerProcess(i) for i in range(job.spec.replicas)}
        self.removing: list[tuple[WorkerProcess, float]] = []
        """Workers removed by :meth:`resize`, finishing their fragment, with when to kill them."""
        self.budget_reported = False

    @property
    def redis_url(self) -> str:
        if self._redis_url is not None:
            return self._redis_url
        if self.redis is None:
            raise RuntimeError("the fleet is not started")
        return self.redis.url

    def start(self) -> LocalFleet:
        if self._redis_url is None:
            self.redis = EmbeddedRedis().start()
        now = time.monotonic()
        for index in self.workers:
            self._spawn(index, now)
        return self

    def worker_environ(self, index: int) -> dict[str, str]:
        config = WorkerConfig(
            job=self.job,
            worker_index=index,
            num_workers=max(len(self.workers), 1),
            redis_url=self.redis_url,
            redis_password=self.redis_password,
            metrics_port=0,  # any free port: several workers share this machine
            listen_host=self.listen_host,
        )
        # Env processes (async) of all workers share this machine's CPUs, as pods share a node's.
        cpus = {CPUS_VARIABLE: str(local_cpus(self.job, usable_cpus()))}
        external = self.job.spec.env.external  # workers sharing this machine listen on ports of their own
        if external is not None:
            cpus[PORT_VARIABLE] = str(local_port(external, index))
        # Its one-line exit in a file, as a pod's termination message; the modules it has are this Python's.
        own = {"ROLLOUTFLEET_TERMINATION_LOG": str(self._termination_log(index)), PROFILE_VARIABLE: LOCAL_PROFILE}
        # The worker stops by itself if this process dies without stopping it (SIGKILL).
        return {**os.environ, **cpus, **self.extra_env, **config.to_environ(), **own, PARENT_PID_ENV: str(os.getpid())}

    def _termination_log(self, index: int) -> Path:
        return self.log_dir / f"worker-{index}.termination"

    def _spawn(self, index: int, now: float) -> None:
        worker = self.workers[index]
        self._termination_log(index).unlink(missing_ok=True)  # a fresh one per start, as a pod's
        log_path = self.log_dir / f"worker-{index}.log"
        if self.start_method == "fork":
            worker.process = ForkedWorker(self.worker_environ(index), log_path, index)
        else:
            with log_path.open("ab") as log_file:
                worker.process = subprocess.Popen(
                    [sys.executable, "-m", "rolloutfleet.cli.main", "worker"],
                    env=self.worker_environ(index),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches the fleet, which stops workers in order
                )
        worker.state = "running"
        self.tracker.started(index, now)

    def poll(self, now: float | None = None) -> None:
        """Notice exits, schedule and perform restarts. Call every fraction of a second."""
        now = time.monotonic() if now is None else now
        for index, worker in self.workers.items():
            if worker.state != "running" or worker.process is None:
                continue
            code = worker.process.poll()
            if code is None:
                continue
            worker.exit_code = code
            worker.last_error = self._exit_message(index)
            if stays_down(code, worker.last_error):  # the same Python and spec would fail the same way
                worker.state = "failed"
                log.error("worker %d stays down (no restart counted): %s", index, worker.last_error)
                continue
            restart_at = self.tracker.failed(index, now)
            if restart_at is None:
                worker.state = "failed"
                if not self.budget_reported:
                    log.error(
                        "restart budget spent (%d restarts, maxRestarts=%d): worker %d stays down; last error: %s",
                        self.tracker.total_restarts,
                        self.job.spec.restart_policy.max_restarts,
                        index,
                        worker.last_error,
                    )
                    self.budget_reported = True
            else:
                worker.state = "backoff"
                log.warning(
                    "worker %d exited with %d (%s); restarting in %.1f s",
                    index,
                    code,
                    worker.last_error or "no message",
                    restart_at - now,
                )
        for index in self.tracker.due(now):
            if index in self.workers and self.workers[index].state == "backoff":
                self._spawn(index, now)
        self._reap(now)

    def resize(self, replicas: int, now: float | None = None) -> None:
        """Run ``replicas`` workers: new indexes start at once; the highest go, gracefully
        (SIGTERM: each publishes the fragment in hand, then exits; SIGKILL after the grace
        period). A removal is no failure: it counts against no restart budget."""
        now = time.monotonic() if now is None else now
        for index in sorted(self.workers, reverse=True):
            if index < replicas:
                break
            worker = self.workers.pop(index)
            self.tracker.workers.pop(index, None)  # a removed worker's backoff is not due any more
            if worker.process is not None and worker.process.poll() is None:
                worker.process.terminate()
                worker.state = "removing"
                self.removing.append((worker, now + self.grace_seconds))
        for index in range(replicas):
            if index not in self.workers:
                self.workers[index] = WorkerProcess(index)
                self._spawn(index, now)

    def _reap(self, now: float) -> None:
        """Forget removed workers that exited; kill those past the grace period."""
        for worker, deadline in list(self.removing):
            assert worker.process is not None
            if worker.process.poll() is not None:
                self.removing.remove((worker, deadline))
            elif now > deadline:
                log.warning(
                    "removed worker %d did not stop within %.0f s: killing it", worker.index, self.grace_seconds
                )
                worker.process.kill()

    def _exit_message(self, index: int) -> str:
        return exit_line(self._termination_log(index), self.log_dir / f"worker-{index}.log")

    @property
    def restarts(self) -> int:
        return self.tracker.total_restarts

    def alive(self) -> int:
        return sum(1 for w in self.workers.values() if w.state == "running")

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send a signal to one worker (tests and chaos drills)."""
        process = self.workers[index].process
        if process is not None and process.poll() is None:
            process.send_signal(sig)

    def stop(self) -> dict[int, int | None]:
        """SIGTERM every worker, wait the grace period, SIGKILL the rest; stop the embedded Redis."""
        removing = [worker for worker, _ in self.removing]
        self.removing = []
        running = [w for w in [*self.workers.values(), *removing] if w.process is not None and w.process.poll() is None]
        for worker in running:
            assert worker.process is not None
            worker.process.terminate()
        deadline = time.monotonic() + self.grace_seconds
        for worker in running:
            assert worker.process is not None
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d did not stop within %.0f s: killing it", worker.index, self.grace_seconds)
                worker.process.kill()
                worker.process.wait()
        codes = {}
        for worker in self.workers.values():
            worker.state = "stopped"
            codes[worker.index] = None if worker.process is None else worker.process.returncode
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        self._tidy_logs(codes)
        return codes

    def _tidy_logs(self, codes: Mapping[int, int | None]) -> None:
        """Our temporary log folder goes when every worker ended cleanly and none ever failed;
        otherwise it stays (``kept_logs``) for the error it holds."""
        if not self._own_log_dir or not self.log_dir.exists():
            return
        if (
            self.keep_logs
            or self.tracker.total_restarts
            or any(w.state == "failed" for w in self.workers.values())
            or any(code not in (0, None) for code in codes.values())
        ):
            self.kept_logs = self.log_dir
            return
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> LocalFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def exit_line(termination: Path, log: Path) -> str:
    """A process's termination message (its one-line exit), else the last line of its log."""
    try:
        message = termination.read_text(errors="replace").strip()
    except OSError:
        message = ""
    if message:
        return message
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
