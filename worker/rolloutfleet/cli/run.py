"""``rolloutfleet run``: the local fleet with a live status table, and an optional learner.

rolloutfleet run examples/cartpole.yaml
rolloutfleet run examples/cartpole.yaml -- python -m rolloutfleet.examples.ppo examples/cartpole.yaml

A worker that ends because this Python lacks a module stays down (no restart); when every
worker is down so, ``run`` ends with exit 3 and the workers' one line.

A worker whose stream is full with no learner reading it shows ``waiting for learner`` (and
for how long) as its state, and the title counts the waiting workers (from the heartbeats).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from rolloutfleet.cli.preflight import taken_port
from rolloutfleet.fleet.local_autoscaler import LocalAutoscaler
from rolloutfleet.fleet.local_evaluators import LocalEvaluators
from rolloutfleet.fleet.parent_watch import die_with_parent
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.sections.external import local_port

log = logging.getLogger(__name__)
WAITING_FRESH_S = 30.0
"""A heartbeat that says "waiting for a learner" counts while this fresh (a waiting worker
refreshes it every 10 s; a killed one's is left behind)."""


def waiting_since(beat: Mapping[str, Any], now: float) -> float | None:
    """Unix time the worker began to wait for a learner, by its heartbeat; None when it does not.

    >>> waiting_since({"waiting_for_learner_since": 100.0, "time": 120.0}, now=125.0)
    100.0
    """
    since = float(beat.get("waiting_for_learner_since", 0.0) or 0.0)
    if since <= 0 or now - float(beat.get("time", 0.0)) > WAITING_FRESH_S:
        return None
    return since


def fleet_line(fleet: LocalFleet, heartbeats: Mapping[int, Mapping[str, Any]], now: float) -> str:
    """``2/2 workers up, 0 restarts``, and how many of those wait for a learner since when."""
    line = f"{fleet.alive()}/{len(fleet.workers)} workers up, {counted(fleet.restarts, 'restart')}"
    since = [
        s
        for index, worker in fleet.workers.items()
        if worker.state == "running" and (s := waiting_since(heartbeats.get(index, {}), now)) is not None
    ]
    if since:
        line += f", {len(since)} waiting for a learner (for {now - min(since):.0f} s)"
    return line


def status_table(
    fleet: LocalFleet,
    heartbeats: Mapping[int, Mapping[str, Any]],
    elapsed: float,
    now: float | None = None,
    scaling: str | None = None,
) -> Table:
    """The live table; ``now``: unix time (for how long workers wait for a learner);
    ``scaling``: the autoscaler's last decision in words (``spec.autoscaling``), its caption."""
    job = fleet.job
    now = time.time() if now is None else now
    total_rate = sum(float(h.get("steps_per_s", 0.0)) for h in heartbeats.values())
    table = Table(
        title=f"{job.namespace}/{job.name}: {fleet_line(fleet, heartbeats, now)}, "
        f"{total_rate:,.0f} env steps/s, {elapsed:.0f} s",
        title_justify="left",
        caption=None if scaling is None else f"autoscaling: {scaling}",
        caption_justify="left",
    )
    columns = (
        "worker",
        "state",
        "pid",
        "env steps",
        "steps/s",
        "return (100 ep)",
        "weights",
        "NaN/inf rows",
        "last error",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("state", "last error") else "right")
    for index, worker in fleet.workers.items():
        beat = heartbeats.get(index, {})
        episode_return = float(beat.get("episode_return_mean", math.nan))
        since = waiting_since(beat, now) if worker.state == "running" else None
        table.add_row(
            str(index),
            worker.state if since is None else f"waiting for learner ({now - since:.0f} s)",
            str(worker.process.pid) if worker.process is not None and worker.state == "running" else "-",
            f"{int(beat.get('env_steps', 0)):,}",
            f"{float(beat.get('steps_per_s', 0.0)):,.0f}",
            "-" if math.isnan(episode_return) else f"{episode_return:.1f}",
            f"v{int(beat.get('weights_seq_no', 0))}" + _refused(beat),
            _nonfinite(beat),
            worker.last_error[-60:],
        )
    return table


def _refused(beat: Mapping[str, Any]) -> str:
    """`` (v3 refused)`` while the worker refuses a newer weights version, else ``""``."""
    refused = beat.get("weights_refused") or {}
    return "".join(f" (v{seq} refused)" for seq, _ in refused.values())


def _nonfinite(beat: Mapping[str, float]) -> str:
    """Rows with NaN/inf observations and rewards so far ("obs 12, reward 3"), "-" when none."""
    obs, rewards = int(beat.get("nonfinite_obs", 0)), int(beat.get("nonfinite_rewards", 0))
    return f"obs {obs:,}, reward {rewards:,}" if obs or rewards else "-"


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless one.

    >>> counted(1, "worker"), counted(0, "restart"), counted(2, "worker")
    ('1 worker', '0 restarts', '2 workers')
    """
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def external_addresses(job: RolloutJob, workers: int, host: str = "127.0.0.1") -> list[str]:
    """``host:port`` of each local worker's action endpoint (none unless ``spec.env.external``);
    ``host``: what they bind (every interface, ``0.0.0.0``, is reached at 127.0.0.1 here too).

    >>> external_addresses(RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": {"env": {
    ...     "id": "CartPole-v1", "external": {"port": 9900}}}}), 2)
    ['127.0.0.1:9900', '127.0.0.1:9901']
    """
    external = job.spec.env.external
    if external is None:
        return []
    shown = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
    return [f"{shown}:{local_port(external, index)}" for index in range(workers)]


def run_fleet(args: argparse.Namespace) -> int:
    from rolloutfleet.spec.redis_url import redacted_url

    job = RolloutJob.from_file(args.manifest)
    if args.redis is not None and (code := _unreachable(args.redis, args.redis_timeout)) is not None:
        return code
    console = Console(stderr=True, soft_wrap=True)  # a line is never split (a path, in a log or a pipe)
    scaling = job.spec.autoscaling
    if args.replicas is not None and scaling is not None and scaling.clamp(args.replicas) != args.replicas:
        console.print(f"fleet: --replicas {args.replicas} is outside spec.autoscaling's bounds "
                      f"({scaling.min_replicas}-{scaling.max_replicas}): starting {scaling.clamp(args.replicas)}")  # fmt: skip
    job = _sized(job, args.replicas)
    if (taken := taken_port(job, args.listen)) is not None:  # before anything starts: one line, not a crash loop
        print(f"rolloutfleet run: {taken}", file=sys.stderr)
        return 2
    fleet = LocalFleet(job, redis_url=args.redis, redis_password=os.environ.get("ROLLOUTFLEET_REDIS_PASSWORD"),
                       listen_host=args.listen)  # fmt: skip
    evaluators = LocalEvaluators(fleet)  # spec.evaluation's workers; none without it
    learner: subprocess.Popen[bytes] | None = None
    started = time.monotonic()
    stop = StopSignals()
    try:
        stop.install()
        fleet.start()
        evaluators.start()
        console.print(
            f"fleet: {counted(len(fleet.workers), 'worker')} of {job.name}"
            + (f" and {evaluators.count} evaluation worker(s)" if evaluators.count else "")
            + f", redis {redacted_url(fleet.redis_url)}, logs in {fleet.log_dir} (removed after a clean run)"
        )
        addresses = external_addresses(job, len(fleet.workers), args.listen)
        if addresses:
            reach = "" if ipaddress.ip_address(args.listen).is_loopback else " (open to the network: --listen)"
            console.print(f"fleet: external env: simulators connect to {', '.join(addresses)}{reach}")
        scaler = None if job.spec.autoscaling is None else LocalAutoscaler(fleet)
        if args.command:
            learner = _start_learner(list(args.command), fleet, job, addresses)
        code = _watch(args, fleet, job, (scaler, evaluators, learner, stop), console, started)
        if stop.signum is not None:
            console.print(f"fleet: {signal.Signals(stop.signum).name}; stopping workers")
            code = 128 + stop.signum
        elif code == 0 and evaluators.failed:
            console.print(f"fleet: exit 3: {counted(len(evaluators.failed), 'evaluation worker')} could not run")
            code = 3
    finally:
        _shut_down(fleet, evaluators, learner, stop, console)
    return code


def _sized(job: RolloutJob, replicas: int | None) -> RolloutJob:
    """``job`` with ``--replicas`` (else its own), within its autoscaling bounds: the size to start from."""
    size = job.spec.replicas if replicas is None else replicas
    if job.spec.autoscaling is not None:
        size = job.spec.autoscaling.clamp(size)
    if size == job.spec.replicas:
        return job
    return RolloutJob.from_dict({**job.to_dict(), "spec": {**job.to_dict()["spec"], "replicas": size}})


def _start_learner(
    command: list[str], fleet: LocalFleet, job: RolloutJob, addresses: list[str]
) -> subprocess.Popen[bytes]:
    """The learner ``command``, told the fleet's Redis, the job and the external addresses."""
    env = {**os.environ, "ROLLOUTFLEET_REDIS_URL": fleet.redis_url, "ROLLOUTFLEET_JOB_NAME": job.name}
    if addresses:
        env["ROLLOUTFLEET_EXTERNAL_ADDRESSES"] = ",".join(addresses)
    # SIGTERMed by the kernel should this process be SIGKILLed: it outlives nothing either.
    return subprocess.Popen(command, env=env, preexec_fn=die_with_parent())


def _watch(
    args: argparse.Namespace,
    fleet: LocalFleet,
    job: RolloutJob,
    watched: tuple[LocalAutoscaler | None, LocalEvaluators, subprocess.Popen[bytes] | None, StopSignals],
    console: Console,
    started: float,
) -> int:
    """Poll the fleet (the autoscaler, the evaluation workers) until the command exits, every worker is down for
    good, ``--duration`` passes (since ``started``) or a signal comes; the exit code. The status
    table or a log line meanwhile."""
    from rolloutfleet.transport.heartbeat import read_heartbeats

    scaler, evaluators, learner, stop = watched
    judged: list[int] = []  # the newest evaluation version said
    live = None if args.no_status else Live(console=console, refresh_per_second=2, transient=False)
    if live is not None:
        live.start()
    last_log = last_judged = 0.0
    try:
        while True:
            fleet.poll()
            evaluators.poll()
            for line in evaluators.news():
                console.print(f"fleet: {line}", soft_wrap=True, markup=False, highlight=False)
            now = time.monotonic()
            if evaluators.count and now - last_judged >= 2.0:  # one Redis read per 2 s
                last_judged = now
                if (said := _new_evaluation(fleet, judged)) is not None:
                    console.print(f"fleet: evaluation {said}")
            if scaler is not None and (said := scaler.tick(now)) is not None:
                log.info("%s", said)
                console.print(f"fleet: {said}")
            if live is not None:
                beats = read_heartbeats(fleet.redis_url, job, fleet.redis_password)
                scaling = None if scaler is None or scaler.decision is None else scaler.decision.reason
                live.update(status_table(fleet, beats, now - started, scaling=scaling))
            elif now - last_log > 10:
                last_log = now
                beats = read_heartbeats(fleet.redis_url, job, fleet.redis_password)
                log.info("fleet: %s", fleet_line(fleet, beats, time.time()))
            if learner is not None and (learner_code := learner.poll()) is not None:
                console.print(f"fleet: the command exited with {learner_code}; stopping the fleet")
                return learner_code
            if fleet.alive() == 0 and all(w.state == "failed" for w in fleet.workers.values()) and fleet.workers:
                return _all_down(fleet, console)
            if args.duration is not None and now - started >= args.duration:
                return 0
            wait = 0.25 if scaler is None else min(0.25, max(0.02, scaler.due_in(time.monotonic())))
            if stop.received.wait(wait):
                return 0
    finally:
        if live is not None:
            live.stop()


def _all_down(fleet: LocalFleet, console: Console) -> int:
    """Every worker is down for good: why, in one line, and the exit code (3: this Python lacks
    a module, as the workers said; 1: the restart budget is spent)."""
    from rolloutfleet.rules.missing_modules import stays_down

    lacking = [w for w in fleet.workers.values() if stays_down(w.exit_code, w.last_error)]
    if lacking:
        line = f"fleet: every worker is down: {lacking[0].last_error}; stopping"
        console.print(line, soft_wrap=True, markup=False, highlight=False)  # one line, as the worker's
        return 3
    console.print("fleet: every worker is down and the restart budget is spent; stopping")
    return 1


def _shut_down(
    fleet: LocalFleet,
    evaluators: LocalEvaluators,
    learner: subprocess.Popen[bytes] | None,
    stop: StopSignals,
    console: Console,
) -> None:
    """Stop the command, then the workers; say how they ended and where failed workers' logs are."""
    if learner is not None and learner.poll() is None:
        learner.terminate()
        try:
            learner.wait(10)
        except subprocess.TimeoutExpired:
            learner.kill()
    evaluators.stop()  # before the fleet's embedded Redis goes
    codes = fleet.stop()
    stop.restore()
    unclean = {i: c for i, c in codes.items() if c not in (0, None) and fleet.workers[i].state != "failed"}
    console.print(
        f"fleet: stopped ({counted(len(codes), 'worker')}{', exit codes ' + str(unclean) if unclean else ''})"
    )
    if fleet.kept_logs is not None:
        kept = f"fleet: a worker or evaluation worker failed during the run; the logs are kept in {fleet.kept_logs}"
        console.print(kept, soft_wrap=True, markup=False, highlight=False)  # a path to copy: never wrapped


def _new_evaluation(fleet: LocalFleet, judged: list[int]) -> str | None:
    """The newest evaluation result in words when it is of a version not said yet (``judged``)."""
    from rolloutfleet.evaluation.confidence import VersionSummary
    from rolloutfleet.transport.evaluation_results import read_latest

    latest = read_latest(fleet.redis_url, fleet.job, fleet.redis_password)
    if latest is None or (judged and int(latest["version"]) <= judged[-1]):
        return None
    judged.append(int(latest["version"]))
    return VersionSummary.from_json(latest).describe()


def _unreachable(url: str, timeout_s: float) -> int | None:
    """An external ``--redis`` checked before any worker starts: None when it answers within
    ``timeout_s``, else one line on stderr and the exit code (workers would retry for ever)."""
    from rolloutfleet.cli.preflight import unreachable

    if not timeout_s > 0:
        print(f"rolloutfleet run: --redis-timeout must be > 0 s, got {timeout_s:g}", file=sys.stderr)
        return 2
    return unreachable("run", url, timeout_s)


class StopSignals:
    """SIGTERM (systemd, Docker, CI runners, ``kill``), SIGINT (Ctrl-C) and SIGHUP (the
    terminal went away) all mean the same graceful stop. The handlers only record the
    signal: the loop notices it within a quarter second, and nothing is raised in the
    middle of starting or stopping workers, so a second signal cannot cut the stop short
    and leave workers behind."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.received = threading.Event()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; a caller elsewhere keeps its own
        for signum in self.SIGNALS:
            previous = signal.getsignal(signum)
            if signum == signal.SIGHUP and previous == signal.SIG_IGN:
                continue  # started under nohup: stay deaf to hangups, as asked
            self._previous[signum] = previous
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        self.received.set()

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
