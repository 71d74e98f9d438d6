"""``rolloutfleet record`` and ``rolloutfleet replay``: a job's experience as data (docs/datasets.md).

    rolloutfleet record --job examples/cartpole.yaml --redis redis://127.0.0.1:6379/0 --format minari --output runs/cp
    rolloutfleet record --job cartpole --redis redis://127.0.0.1:6379/0 --format parquet --output runs/cp-parquet
    rolloutfleet replay runs/cp --job examples/cartpole.yaml --redis redis://127.0.0.1:6379/0 --rate 5000

``--job`` is a manifest (name, namespace, policies and the env's spaces come from it) or a
bare job name (Parquet only). The password comes from ``$ROLLOUTFLEET_REDIS_PASSWORD``.
Importing this module is cheap: pyarrow, minari, redis load when a command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolloutfleet.cli.preflight import unreachable

RECORD_EXAMPLE = "rolloutfleet record --job examples/cartpole.yaml --redis URL --format minari --output runs/cp"


def add_record_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "record",
        help="write a job's batches continuously to Parquet files or a Minari dataset",
        description="Read a job's batch stream as its own consumer group (never a learner's batches) and write "
        "every batch: Parquet (rolled by size) or Minari (whole episodes). Stops on SIGTERM/SIGINT or --duration.",
    )
    parser.add_argument("--job", required=True, help="a RolloutJob manifest (YAML), or a job name (Parquet only)")
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument("--format", required=True, choices=("parquet", "minari"))
    parser.add_argument("--output", required=True, type=Path, help="the recording folder (empty, or this job's)")
    parser.add_argument("--namespace", default=None, help="the job's namespace (default: the manifest's, else default)")
    parser.add_argument("--policy", action="append", default=None, help="multi-agent: record this policy (repeat)")
    parser.add_argument(
        "--group",
        default=None,
        help="the consumer group to read as (default: the folder's, else a new recorder-<hex>: two recordings never share one)",
    )
    parser.add_argument(
        "--roll-mb",
        type=float,
        default=None,
        help="a Parquet file every this many MB of batches (default 64); Minari: commit episodes this often (default 4)",
    )
    parser.add_argument("--flush-seconds", type=float, default=10.0, help="write files at least this often")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--timeout", type=float, default=30.0, help="give up when Redis is unreachable this long")
    parser.set_defaults(run=_record)
    return parser


def _bad(command: str, message: str, code: int = 2) -> int:
    print(f"rolloutfleet {command}: {message}", file=sys.stderr)
    return code


class _Stop:
    """SIGTERM, SIGINT and SIGHUP: finish the current batch, write the files, exit."""

    def __init__(self, duration: float | None) -> None:
        self.event = threading.Event()
        self.deadline = None if duration is None else time.monotonic() + duration
        self.on_signal: list[Any] = []
        """Called from the handler too (a replay's publisher, to end a wait for room)."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, self._handle)

    def _handle(self, *_: Any) -> None:
        self.event.set()
        for call in self.on_signal:
            call()

    def __call__(self) -> bool:
        return self.event.is_set() or (self.deadline is not None and time.monotonic() >= self.deadline)


def _record(args: argparse.Namespace) -> int:
    from rolloutfleet.datasets.durable import OutputError
    from rolloutfleet.datasets.job_source import load_job

    if args.roll_mb is None:
        # Minari writes a folder per episode: short commits keep the recorder reading (and
        # so counted as a learner by the fleet) between them.
        args.roll_mb = 4.0 if args.format == "minari" else 64.0
    if args.roll_mb <= 0 or args.flush_seconds <= 0:
        return _bad("record", "--roll-mb and --flush-seconds must be > 0")
    job = load_job(args.job)
    name = job.name if job is not None else args.job
    namespace = args.namespace or (job.namespace if job is not None else "default")
    policies = args.policy or (
        sorted(job.spec.multi_agent.policies) if job is not None and job.spec.multi_agent else [None]
    )
    if args.format == "minari":
        if job is None:
            return _bad(
                "record", f"--format minari: --job must be the job's manifest (for the env's spaces), not {args.job!r}"
            )
        if job.spec.multi_agent is not None:
            return _bad(
                "record", "--format minari: a multi-agent job has no single-agent episodes; use --format parquet"
            )
    if (code := unreachable("record", args.redis, args.timeout)) is not None:
        return code
    from rolloutfleet.transport.redis.errors import BackendError

    try:
        writers = _writers(args, job, name, namespace, policies)  # every folder checked before any group exists
        recorders = _recorders(args, name, namespace, writers)
    except (OutputError, BackendError) as exc:
        return _bad("record", str(exc), 1)
    return _record_until_stopped(args, recorders)


def _record_until_stopped(args: argparse.Namespace, recorders: list[Any]) -> int:
    from rolloutfleet.datasets.durable import OutputError
    from rolloutfleet.transport.redis.errors import BackendError

    stop = _Stop(args.duration)
    try:
        while not stop():
            for recorder in recorders:
                recorder.step(timeout=0.5 / len(recorders))
        for recorder in recorders:
            recorder.flush()
    except OutputError as exc:
        return _bad("record", f"{exc}; nothing unwritten was acknowledged", 1)
    except BackendError as exc:
        for recorder in recorders:  # what was spooled is written; the rest waits in the group
            with contextlib.suppress(OutputError):  # it stays in the spool for the next run
                recorder.flush()
        if not (groups := _release(recorders)):
            return _bad("record", f"{exc}; nothing was read", 1)
        return _bad("record", f"{exc}; what was read is written, the rest stays in group(s) {groups}", 1)
    finally:
        for recorder in recorders:
            recorder.close()
    for recorder in recorders:
        print(_summary(recorder))
    return 0


def _summary(recorder: Any) -> str:
    state, kept = recorder.writer.state, recorder.writer.open_rows()
    if state.format == "minari":
        written = f"{state.episodes} episodes ({state.steps} steps)"
    else:
        written = f"{state.rows} rows in {state.parts} files"
    open_note = f"; {kept} rows of open episodes kept for the next run" if kept else ""
    return f"recorded {state.source()}: {written} in {recorder.writer.folder} (group {state.group}){open_note}"


def _writers(args: argparse.Namespace, job: Any, name: str, namespace: str, policies: list[str | None]) -> list[Any]:
    from rolloutfleet.datasets.job_source import job_env_spec, job_spaces
    from rolloutfleet.datasets.writer import DatasetWriter

    spaces = job_spaces(job) if args.format == "minari" else None
    env_spec = job_env_spec(job) if args.format == "minari" else None
    writers = []
    for policy in policies:
        folder = args.output if policy is None else args.output / policy
        writers.append(DatasetWriter(folder, name, args.format, namespace=namespace, policy=policy,
                                     roll_bytes=int(args.roll_mb * (1 << 20)), spaces=spaces, env_spec=env_spec))  # fmt: skip
    return writers


def _recorders(args: argparse.Namespace, name: str, namespace: str, writers: list[Any]) -> list[Any]:
    """A recorder per writer. When one cannot start, the groups the others made are
    released (a group never read would hold a ``block`` fleet back) and the error raised."""
    from rolloutfleet.datasets.recorder import Recorder

    password = os.environ.get("ROLLOUTFLEET_REDIS_PASSWORD")
    recorders: list[Any] = []
    try:
        for writer in writers:
            group = args.group or writer.state.group or f"recorder-{secrets.token_hex(3)}"
            writer.remember_group(group)  # a restart on this folder reads as the same group
            recorders.append(Recorder(args.redis, name, writer, namespace=namespace, policy=writer.state.policy,
                                      group=group, password=password, flush_s=args.flush_seconds))  # fmt: skip
    except BaseException:
        _release(recorders)
        for recorder in recorders:
            recorder.close()
        raise
    return recorders


def _release(recorders: list[Any]) -> list[str]:
    """Destroy the groups of ``recorders`` that never read an entry (Redis may be away: then
    they stay); the groups that are left."""
    from rolloutfleet.transport.redis.errors import BackendError

    left = set()
    for recorder in recorders:
        released: list[str] = []
        with contextlib.suppress(BackendError):
            released = recorder.consumer.release_unread_groups()
        if {shard.keys.batches for shard in recorder.consumer.shards} - set(released):
            left.add(recorder.consumer.group)
    return sorted(left)


def add_replay_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "replay",
        help="publish a recorded dataset (Parquet or Minari) into a job's batch stream",
        description="Publish every row of a recording once, through the workers' publisher: as fast as the "
        "stream's backpressure lets (block: as fast as the learner takes batches), or at --rate rows/s.",
    )
    parser.add_argument("dataset", type=Path, help="a Parquet recording folder or a Minari dataset folder")
    parser.add_argument("--job", required=True, help="a RolloutJob manifest (spaces checked), or a job name")
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument("--namespace", default=None, help="the job's namespace (default: the manifest's, else default)")
    parser.add_argument("--policy", default=None, help="multi-agent: publish into this policy's stream")
    parser.add_argument("--rate", type=float, default=None, help="rows per second (default: as the learner takes them)")
    parser.add_argument(
        "--batch-rows", type=int, default=1024, help="rows per published batch (Minari: whole episodes)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="give up when Redis is unreachable this long")
    parser.set_defaults(run=_replay)
    return parser


def _replay(args: argparse.Namespace) -> int:
    from rolloutfleet.datasets.job_source import job_spaces, load_job
    from rolloutfleet.datasets.replay import open_source, replay, space_mismatch

    if args.rate is not None and not args.rate > 0:
        return _bad("replay", f"--rate must be > 0 rows/s, got {args.rate:g}")
    if args.batch_rows < 1:
        return _bad("replay", f"--batch-rows must be >= 1, got {args.batch_rows}")
    try:
        source = open_source(args.dataset)
    except (ValueError, OSError) as exc:
        return _bad("replay", str(exc))
    job = load_job(args.job)
    if job is not None and job.spec.multi_agent is None and (problem := space_mismatch(source, *job_spaces(job))):
        return _bad("replay", f"{args.dataset} does not fit job {job.name}: {problem}")
    if (code := unreachable("replay", args.redis, args.timeout)) is not None:
        return code

    from rolloutfleet.transport.publisher import PayloadTooLarge, PublishInterrupted
    from rolloutfleet.transport.redis.errors import BackendError

    publisher = _publisher(args, job)
    publisher.on_wait = _wait_notices()
    stop = _Stop(None)
    stop.on_signal.append(publisher.interrupt)
    try:
        stats = replay(source, lambda columns: _publish(publisher, columns), rows_per_batch=args.batch_rows,
                       rate=args.rate, stop=stop)  # fmt: skip
    except PublishInterrupted:
        return _bad("replay", "stopped while waiting for a learner to take batches", 130)
    except (BackendError, PayloadTooLarge) as exc:
        return _bad("replay", f"{exc} (rows before it were published)", 1)
    finally:
        publisher.close()
    print(f"replayed {stats.rows} rows in {stats.batches} batches from {args.dataset} into {publisher.keys.batches}")
    return 130 if stop.event.is_set() else 0


WAIT_REPEAT_S = 30.0


def _wait_notices() -> Callable[[str, Any, float], None]:
    """replay's publisher says when it waits for a learner (a second in, then every
    :data:`WAIT_REPEAT_S`), and when a learner reads: never a silent wait."""
    from rolloutfleet.fleet.learner_wait import LearnerWait

    wait, said = LearnerWait(), [0.0]

    def on_wait(stream: str, load: Any, waited_s: float) -> None:
        now = time.time()
        if load.group is not None:
            line = wait.reading(load.group, now)
        elif (line := wait.absent(stream, waited_s, now, load.ignored)) is None and now - said[0] >= WAIT_REPEAT_S:
            line = f"still waiting for a learner to read {stream}, for {now - (wait.since or now):.0f} s"
        if line:
            said[0] = now
            print(f"replay: {line}", file=sys.stderr, flush=True)

    return on_wait


def _publisher(args: argparse.Namespace, job: Any) -> Any:
    from rolloutfleet.transport.publisher import BatchPublisher

    password = os.environ.get("ROLLOUTFLEET_REDIS_PASSWORD")
    if job is not None:
        return BatchPublisher(args.redis, job, password=password, policy=args.policy, block_timeout_s=3600.0)
    return BatchPublisher(args.redis, args.job, args.namespace or "default", password=password, policy=args.policy,
                          backpressure="block", block_timeout_s=3600.0)  # fmt: skip


def _publish(publisher: Any, columns: dict[str, Any]) -> None:
    from rolloutfleet.transport.publisher import BackpressureTimeout

    agent_ids = None
    if "agent_id" in columns:  # multi-agent: the consumer makes this text column from agent_ids
        text, index = columns.pop("agent_id"), columns["agent_index"]
        agent_ids = [""] * (int(index.max()) + 1 if len(index) else 0)
        for k, agent in zip(index.tolist(), text.tolist(), strict=True):
            agent_ids[k] = agent
    while True:
        try:
            publisher.publish(columns, agent_ids=agent_ids)
            return
        except BackpressureTimeout:
            continue  # no learner took a batch for an hour: keep waiting, as a worker does
