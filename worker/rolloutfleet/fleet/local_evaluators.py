"""``rolloutfleet run`` with ``spec.evaluation``: the evaluation workers as local processes.

Each is the process an evaluation pod runs (``rolloutfleet worker`` with
``ROLLOUTFLEET_ROLE=evaluator``, :mod:`rolloutfleet.evaluation.evaluator`), beside the
fleet's workers, on its Redis, with its log beside theirs (``evaluator-<i>.log``). As the
operator does: one that exits is started again after :data:`RETRY_S`, except after exit 3
(a spec, env or policy it cannot use: said once with its one line, left down, and ``run``
ends with exit 3). They spend no restart budget; a failed one keeps the run's logs.
Stopped before the fleet (its embedded Redis goes with it); they stop by themselves should
this process die without stopping them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from rolloutfleet.fleet.parent_watch import PARENT_PID_ENV
from rolloutfleet.fleet.supervisor import LocalFleet, exit_line
from rolloutfleet.rules.worker_config import WorkerConfig

log = logging.getLogger(__name__)
RETRY_S = 30.0
EXIT_BAD_SPEC = 3


class LocalEvaluators:
    """``spec.evaluation.workers`` evaluation processes next to ``fleet`` (none without ``spec.evaluation``)."""

    def __init__(self, fleet: LocalFleet) -> None:
        self.fleet = fleet
        evaluation = fleet.job.spec.evaluation
        self.count = 0 if evaluation is None else evaluation.workers
        self.processes: dict[int, subprocess.Popen[bytes] | None] = {}
        self.retry_at: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        """Index -> the one line of an evaluation worker that cannot run (exit 3): it stays down."""
        self._told: set[int] = set()

    def environ(self, index: int) -> dict[str, str]:
        fleet = self.fleet
        config = WorkerConfig(job=fleet.job, worker_index=index, num_workers=self.count, redis_url=fleet.redis_url,
                              redis_password=fleet.redis_password, metrics_port=0,
                              listen_host=fleet.listen_host)  # fmt: skip
        role = {"ROLLOUTFLEET_ROLE": "evaluator", PARENT_PID_ENV: str(os.getpid()),
                "ROLLOUTFLEET_TERMINATION_LOG": str(self.termination_log(index))}  # fmt: skip
        return {**os.environ, **fleet.extra_env, **config.to_environ(), **role}

    def start(self) -> LocalEvaluators:
        for index in range(self.count):
            self._spawn(index)
        return self

    def log_path(self, index: int) -> Path:
        return self.fleet.log_dir / f"evaluator-{index}.log"

    def termination_log(self, index: int) -> Path:
        return self.fleet.log_dir / f"evaluator-{index}.termination"

    def _spawn(self, index: int) -> None:
        self.termination_log(index).unlink(missing_ok=True)  # a fresh one per start, as a pod's
        with self.log_path(index).open("ab") as log_file:
            self.processes[index] = subprocess.Popen(
                [sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=self.environ(index),
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def poll(self, now: float | None = None) -> None:
        """Notice exits; start again those whose pause is over."""
        now = time.monotonic() if now is None else now
        for index, process in self.processes.items():
            if process is None or (code := process.poll()) is None:
                continue
            self.processes[index] = None
            self.fleet.keep_logs = True  # its log holds the error: kept after the run
            if code == EXIT_BAD_SPEC:
                self.failed[index] = exit_line(self.termination_log(index), self.log_path(index)) or "no message"
                log.debug("evaluation worker %d cannot run: %s; it stays down", index, self.failed[index])
                continue
            log.warning("evaluation worker %d exited with %d; starting it again in %.0f s", index, code, RETRY_S)
            self.retry_at[index] = now + RETRY_S
        for index, at in list(self.retry_at.items()):
            if now >= at:
                del self.retry_at[index]
                self._spawn(index)

    def news(self) -> list[str]:
        """One line for each evaluation worker found unable to run since the last call."""
        new = sorted(set(self.failed) - self._told)
        self._told.update(new)
        return [
            f"evaluation worker {i} cannot run: {self.failed[i]}; it stays down (log: {self.log_path(i)})" for i in new
        ]

    def alive(self) -> int:
        return sum(1 for p in self.processes.values() if p is not None and p.poll() is None)

    def stop(self) -> dict[int, int | None]:
        """SIGTERM each (it finishes the episode in hand), SIGKILL after the fleet's grace period."""
        running = [p for p in self.processes.values() if p is not None and p.poll() is None]
        for process in running:
            process.terminate()
        deadline = time.monotonic() + self.fleet.grace_seconds
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.retry_at.clear()
        return {i: None if p is None else p.returncode for i, p in self.processes.items()}
