"""``rolloutfleet streams``, once its arguments are checked (:mod:`rolloutfleet.cli.streams`):
one row per job stream (per policy, per shard) and consumer group, then who holds the
workers back, which weights versions workers refused, and the newest evaluation results."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from rolloutfleet.evaluation.report import evaluation_lines
from rolloutfleet.rules.refusals import refused_line, refused_versions
from rolloutfleet.transport.heartbeat import parse_heartbeats
from rolloutfleet.transport.redis.connection import connect, explain, where_url
from rolloutfleet.transport.redis.errors import BackendError, Client
from rolloutfleet.transport.redis.keys import BATCHES_PATTERN, POLICY_BATCHES_PATTERN, job_keys, parse_stream_key
from rolloutfleet.transport.redis.sharding import read_shards
from rolloutfleet.transport.redis.stream_status import GroupStatus, Hold, StreamStatus, read_stream_status

COLUMNS = (
    "job",
    "length",
    "group",
    "consumers",
    "last read",
    "pending",
    "lag",
    "oldest pending",
    "dead letters",
    "weights",
)

Stream = tuple[str, str, str | None]
"""(namespace, job, policy) of a batch stream."""


def show_streams(args: argparse.Namespace) -> int:
    """Print one row per job stream found in the Redis at ``args.redis``; the exit code."""
    try:
        client = connect(args.redis, socket_timeout=10.0)
    except BackendError as exc:
        print(f"rolloutfleet streams: Redis at {where_url(args.redis)}: {explain(exc)}", file=sys.stderr)
        return 1
    try:
        streams = _streams(client)
        statuses = [
            (policy, read_stream_status(client, keys))
            for namespace, name, policy in streams
            for keys in job_keys(namespace, name, policy).all_shards(
                read_shards(client, job_keys(namespace, name, policy))
            )
        ]
        refused = _refused(client, streams)
        evaluated = evaluation_lines(client)
    except BackendError as exc:
        print(f"rolloutfleet streams: Redis at {where_url(args.redis)}: {explain(exc)}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if getattr(args, "output", "table") == "json":
        print(json.dumps(as_json(statuses, refused, evaluated), indent=2))
        return 0
    table, holds = _table(statuses)
    # On a terminal, its width; in a pipe or a file, as wide as the table needs: never a cut name.
    console = Console() if sys.stdout.isatty() else Console(width=10_000)
    console.print(table)
    for line in holds + refused + evaluated:
        console.print(line, highlight=False, soft_wrap=True)
    return 0


def as_json(
    statuses: list[tuple[str | None, StreamStatus]], refused: list[str], evaluated: list[str]
) -> dict[str, Any]:
    """What the table says, for a program: each stream (its policy, shard, groups and hold)
    with the same figures, the refused weights' and the evaluation's lines."""
    return {
        "streams": [{"policy": policy, **dataclasses.asdict(status)} for policy, status in statuses],
        "refused_weights": refused,
        "evaluation": evaluated,
    }


def _streams(client: Client) -> list[Stream]:
    """Every job's batch stream (a policy's, of a multi-agent job), sorted."""
    return sorted(
        {
            stream
            for pattern in (BATCHES_PATTERN, POLICY_BATCHES_PATTERN)
            for key in client.scan_iter(match=pattern, count=1000)
            if (stream := parse_stream_key(key))
        },
        key=lambda stream: (stream[0], stream[1], stream[2] or ""),
    )


def _table(statuses: list[tuple[str | None, StreamStatus]]) -> tuple[Table, list[str]]:
    """The table of streams and groups, and a line per stream whose workers are held back."""
    table = Table(title=f"{len(statuses)} job streams", title_justify="left")
    for column in COLUMNS:
        named = column in ("job", "group")  # names are never cut short ("defa…"): they wrap instead
        table.add_column(column, justify="left" if named else "right", overflow="fold", no_wrap=not named)
    holds = []
    for policy, status in statuses:
        name = f"{status.namespace}/{status.job}" + ("" if policy is None else f" ({policy})")
        if status.shards > 1:
            name += f" shard {status.shard}/{status.shards}"
        weights = "-" if status.weights_seq_no is None else f"v{status.weights_seq_no}"
        groups: list[GroupStatus | None] = [*status.groups] or [None]
        for group in groups:
            table.add_row(name, f"{status.length:,}", *_group_cells(group), f"{status.dead_letters:,}", weights)
        if status.hold is not None:
            holds.append(f"{name}: {hold_line(status.hold)}")
    return table, holds


def _group_cells(group: GroupStatus | None) -> list[str]:
    """group, consumers, last read, pending, lag, oldest pending: ``-`` without a group."""
    if group is None:
        return ["-"] * 6
    return [
        group.name,
        str(group.consumers),
        "-" if group.idle_s is None else f"{group.idle_s:.1f} s ago",
        f"{group.pending:,}",
        "?" if group.undelivered is None else f"{group.undelivered:,}",
        "-" if group.oldest_pending_age_s is None else f"{group.oldest_pending_age_s:.1f} s",
    ]


def _refused(client: Any, streams: list[Stream]) -> list[str]:
    """``ns/job (policy): weights vN refused by K workers: <reason>``, from the heartbeats."""
    lines = []
    for namespace, name in sorted({(namespace, name) for namespace, name, _ in streams}):
        beats = parse_heartbeats(client.hgetall(job_keys(namespace, name).heartbeats))
        for policy, seq, workers, reason in refused_versions(beats):
            lines.append(f"{namespace}/{name}: {refused_line(policy, seq, workers, reason)}")
    return lines


def hold_line(hold: Hold) -> str:
    """Who holds the workers back and since when, in one sentence."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(hold.since))
    who = (
        f"group {hold.group!r} holds the workers back"
        if hold.group is not None
        else f"no learner group is reading (none has read within {hold.learner_idle_s:g} s): the workers wait for one"
    )
    line = f"{who} since {since} ({hold.held_s:.0f} s): {hold.unconsumed} unconsumed entries, maxLen {hold.max_len}"
    if hold.ignored:
        line += f"; not counted (no read within {hold.learner_idle_s:g} s): {', '.join(hold.ignored)}"
    return line
