"""``rolloutfleet consume`` and ``rolloutfleet streams``: look at a job's stream as a learner would.

    rolloutfleet consume --redis redis://127.0.0.1:6379/0 --job cartpole --count 10 --output batches.npz
    rolloutfleet streams --redis redis://127.0.0.1:6379/0

Wiring into :mod:`rolloutfleet.cli`::

    from rolloutfleet.streams_cli import add_consume_parser, add_streams_parser
    add_consume_parser(commands)   # commands = parser.add_subparsers(...)
    add_streams_parser(commands)

Both set ``run`` to a function ``(args) -> exit code``; importing this module is cheap
(numpy, redis and rich are imported when a command runs). The password comes from
``$ROLLOUTFLEET_REDIS_PASSWORD``, never from the command line (it would show in ``ps``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rolloutfleet.redis_keys import (
    BATCHES_PATTERN,
    DEFAULT_GROUP,
    POLICY_BATCHES_PATTERN,
    job_keys,
    parse_stream_key,
)


def add_consume_parser(commands: Any) -> argparse.ArgumentParser:
    """``consume`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "consume",
        help="read N batches of a job as a learner would and save them to a .npz file",
        description="Reads as consumer group --group (acking what it saved), so running it beside a learner "
        "takes batches away from the learner; use a group of its own (--group inspect) to only look.",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument("--job", required=True, help="the RolloutJob's name")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--policy", default=None, help="a multi-agent job's policy id: read that policy's stream")
    parser.add_argument("--count", type=int, required=True, help="batches (stream entries) to read")
    parser.add_argument("--output", required=True, type=Path, help="the .npz file to write")
    parser.add_argument("--group", default=DEFAULT_GROUP, help=f"consumer group (default: {DEFAULT_GROUP})")
    parser.add_argument("--consumer", default=None, help="consumer name (default: host-pid)")
    parser.add_argument("--timeout", type=float, default=30.0, help="give up after this many seconds without data")
    parser.set_defaults(run=run_consume)
    return parser


def add_streams_parser(commands: Any) -> argparse.ArgumentParser:
    """``streams`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "streams",
        help="per job (per policy for multi-agent jobs): stream length, pending, lag, consumers, dead letters, "
        "weights version",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.set_defaults(run=run_streams)
    return parser


def run_consume(args: argparse.Namespace) -> int:
    """Read ``args.count`` entries, save the concatenated columns plus per-row
    ``worker_index`` (from each entry's metadata), then ack them. ``weights_seq_no`` is the
    rows' own column (the entry's metadata only for batches built without one)."""
    import numpy as np

    from rolloutfleet.consumer import BatchConsumer, Message, concat_messages

    if args.count < 1:
        print(f"rolloutfleet consume: --count must be >= 1, got {args.count}", file=sys.stderr)
        return 2
    try:
        consumer = BatchConsumer(
            args.redis, args.job, args.namespace, group=args.group, consumer=args.consumer, policy=args.policy
        )
    except ValueError as exc:  # a job name or policy id that cannot be a key
        print(f"rolloutfleet consume: {exc}", file=sys.stderr)
        return 2
    messages: list[Message] = []
    try:
        while len(messages) < args.count:
            got = consumer.read(count=args.count - len(messages), timeout=args.timeout)
            if not got:
                print(
                    f"rolloutfleet consume: {len(messages)} of {args.count} batches after waiting {args.timeout:g} s "
                    f"on {consumer.keys.batches}; nothing saved (the entries read stay pending and will be reclaimed)",
                    file=sys.stderr,
                )
                return 1
            messages.extend(got)
        columns = concat_messages(messages, extra={"worker_index": lambda m: m.worker_index})
        np.savez(args.output, **columns)  # type: ignore[arg-type]
        consumer.ack(messages)  # only after the file is written: a failed save loses nothing
    finally:
        consumer.close()
    rows = len(next(iter(columns.values()))) if columns else 0
    workers = sorted({m.metadata.worker_index for m in messages})
    print(f"wrote {rows} rows from {len(messages)} batches (workers {workers}) to {args.output}")
    return 0


def run_streams(args: argparse.Namespace) -> int:
    """Print one row per job stream found in the Redis at ``args.redis``."""
    from rich.console import Console
    from rich.table import Table

    from rolloutfleet.consumer import GroupStatus, read_stream_status
    from rolloutfleet.redis_connection import connect

    client = connect(args.redis, socket_timeout=10.0)
    try:
        streams = sorted(
            {
                stream
                for pattern in (BATCHES_PATTERN, POLICY_BATCHES_PATTERN)
                for key in client.scan_iter(match=pattern, count=1000)
                if (stream := parse_stream_key(key))
            },
            key=lambda stream: (stream[0], stream[1], stream[2] or ""),
        )
        statuses = [
            (policy, read_stream_status(client, job_keys(namespace, name, policy)))
            for namespace, name, policy in streams
        ]
    finally:
        client.close()
    table = Table(title=f"{len(statuses)} job streams", title_justify="left")
    for column in (
        "job",
        "length",
        "group",
        "consumers",
        "pending",
        "lag",
        "oldest pending",
        "dead letters",
        "weights",
    ):
        table.add_column(column, justify="left" if column in ("job", "group") else "right")
    for policy, status in statuses:
        name = f"{status.namespace}/{status.job}" + ("" if policy is None else f" ({policy})")
        weights = "-" if status.weights_seq_no is None else f"v{status.weights_seq_no}"
        groups: list[GroupStatus | None] = [*status.groups] or [None]
        for group in groups:
            table.add_row(
                name,
                f"{status.length:,}",
                "-" if group is None else group.name,
                "-" if group is None else str(group.consumers),
                "-" if group is None else f"{group.pending:,}",
                "?" if group is None or group.undelivered is None else f"{group.undelivered:,}",
                "-" if group is None or group.oldest_pending_age_s is None else f"{group.oldest_pending_age_s:.1f} s",
                f"{status.dead_letters:,}",
                weights,
            )
    Console().print(table)
    return 0
