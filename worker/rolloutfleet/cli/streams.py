"""``rolloutfleet consume`` and ``rolloutfleet streams``: look at a job's stream.

    rolloutfleet consume --redis redis://127.0.0.1:6379/0 --job cartpole --count 10 --output batches.npz
    rolloutfleet consume --redis redis://127.0.0.1:6379/0 --job cartpole --count 10 --output b.npz --group learner
    rolloutfleet streams --redis redis://127.0.0.1:6379/0

``consume`` without ``--group`` only looks: it reads without a consumer group
(:mod:`rolloutfleet.transport.reader`) and leaves nothing behind. With ``--group`` it reads as that
group, a learner's, and acknowledges each batch once it is saved (to a spool directory
beside the output, merged into the output at the end): the fleet never waits for what it
holds, whatever ``--count``.

Wiring into :mod:`rolloutfleet.cli.main`::

    from rolloutfleet.cli.streams import add_consume_parser, add_streams_parser
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
from typing import TYPE_CHECKING, Any

from rolloutfleet.cli.preflight import unreachable
from rolloutfleet.spec.redis_keys import (
    BATCHES_PATTERN,
    DEFAULT_GROUP,
    POLICY_BATCHES_PATTERN,
    job_keys,
    parse_stream_key,
)

if TYPE_CHECKING:
    from rolloutfleet.transport.stream_status import Hold


def add_consume_parser(commands: Any) -> argparse.ArgumentParser:
    """``consume`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "consume",
        help="read N batches of a job and save them to a .npz file",
        description="Without --group: reads the stream without a consumer group, from its oldest entry on "
        "(nothing acknowledged, nothing left behind: the fleet never waits for it). With --group: reads as "
        "that consumer group, a learner's, acknowledging each batch once saved; beside a learner of the same "
        "group it takes batches away from it.",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument("--job", required=True, help="the RolloutJob's name")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--policy", default=None, help="a multi-agent job's policy id: read that policy's stream")
    parser.add_argument("--count", type=int, required=True, help="batches (stream entries) to read")
    parser.add_argument("--output", required=True, help="the .npz file to write (.npz is appended when missing)")
    parser.add_argument(
        "--group",
        default=None,
        help=f"read as this consumer group (learners use {DEFAULT_GROUP!r}); default: no group, only look",
    )
    parser.add_argument("--consumer", default=None, help="consumer name within --group (default: host-pid)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="give up after this many seconds without data (or with Redis unavailable)",
    )
    parser.set_defaults(run=run_consume)
    return parser


def add_streams_parser(commands: Any) -> argparse.ArgumentParser:
    """``streams`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "streams",
        help="per job (per policy for multi-agent jobs): stream length, groups (consumers, last read, pending, "
        "lag), dead letters, weights version, which group holds the workers back since when, and the newest "
        "evaluation results (spec.evaluation)",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="give up after this many seconds with Redis unavailable"
    )
    parser.set_defaults(run=run_streams)
    return parser


def run_consume(args: argparse.Namespace) -> int:
    """Read ``args.count`` entries and save the concatenated columns plus per-row
    ``worker_index`` (from each entry's metadata). ``weights_seq_no`` is the rows' own
    column (the entry's metadata only for batches built without one)."""
    if args.count < 1:
        print(f"rolloutfleet consume: --count must be >= 1, got {args.count}", file=sys.stderr)
        return 2
    if args.consumer is not None and args.group is None:
        print("rolloutfleet consume: --consumer names a consumer of --group; give --group too", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print(f"rolloutfleet consume: --timeout must be > 0 s, got {args.timeout:g}", file=sys.stderr)
        return 2
    from rolloutfleet.cli.npz_output import npz_path
    from rolloutfleet.cli.paths import output_problem

    given, args.output = Path(args.output), npz_path(args.output)  # what numpy would write: the path reported
    if (problem := output_problem(given) or output_problem(args.output)) is not None:
        print(f"rolloutfleet consume: --output: {problem}", file=sys.stderr)
        return 2
    if (code := unreachable("consume", args.redis, args.timeout)) is not None:
        return code
    import redis

    try:
        if args.group is None:
            return _look(args)
        return _consume(args)
    except ValueError as exc:  # a job name or policy id that cannot be a key
        print(f"rolloutfleet consume: {exc}", file=sys.stderr)
        return 2
    except redis.RedisError as exc:  # away past --timeout, refusing writes, not a stream: one line
        print(f"rolloutfleet consume: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1


def _worker_index(metadata: Any) -> int:
    return int(metadata.worker_index)


def _look(args: argparse.Namespace) -> int:
    from rolloutfleet.cli.npz_output import OutputError, write_npz
    from rolloutfleet.transport.entries import Message, concat_messages, schema_mismatch, schema_of
    from rolloutfleet.transport.reader import BatchReader

    messages: list[Message] = []
    unfit: list[str] = []
    with BatchReader(
        args.redis, args.job, args.namespace, policy=args.policy, reconnect_timeout_s=args.timeout
    ) as reader:
        while len(messages) < args.count:
            got = reader.read(count=args.count - len(messages), timeout=args.timeout)
            if not got:
                groups = reader.groups()
                print(
                    f"rolloutfleet consume: {len(messages)} of {args.count} batches after waiting {args.timeout:g} s "
                    f"on {reader.keys.batches}; nothing saved. "
                    + (
                        f"Consumer groups: {', '.join(groups)}. "
                        if groups
                        else "No consumer group reads it: with backpressure block the workers wait for a learner "
                        "once maxLen entries are unconsumed. "
                    )
                    + f"To read as the learner (acknowledging, so the fleet goes on): --group {DEFAULT_GROUP}",
                    file=sys.stderr,
                )
                return 1
            for message in got:
                reason = schema_mismatch(message.batch, schema_of((messages or [message])[0].batch))
                if reason is None:
                    messages.append(message)
                else:
                    unfit.append(f"{message.id} ({reason})")
        skipped = reader.stats.decode_failures
    columns = concat_messages(messages, extra={"worker_index": _worker_index})
    try:
        write_npz(args.output, columns)
    except OutputError as exc:
        print(f"rolloutfleet consume: {exc}; nothing saved (nothing was acknowledged)", file=sys.stderr)
        return 1
    note = f"; {skipped} undecodable entries skipped" if skipped else ""
    if unfit:
        note += f"; skipped, unlike the first batch: {', '.join(unfit[:3])}" + (" ..." if len(unfit) > 3 else "")
    _report(columns, messages, args.output, note)
    return 0


def _consume(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    import numpy as np

    from rolloutfleet.cli.npz_output import OutputError, write_npz
    from rolloutfleet.transport.consumer import BatchConsumer
    from rolloutfleet.transport.entries import Message, concat_messages, schema_mismatch, schema_of

    new_group = _new_group_note(args)
    output = Path(args.output)
    try:
        # Beside the output: a directory that cannot be written is found before anything
        # is acknowledged.
        spool = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    except OSError as exc:
        print(f"rolloutfleet consume: cannot write beside {output}: {exc}", file=sys.stderr)
        return 2
    consumer = BatchConsumer(
        args.redis,
        args.job,
        args.namespace,
        group=args.group,
        consumer=args.consumer,
        policy=args.policy,
        reconnect_timeout_s=args.timeout,
    )
    if new_group is not None:
        print(f"rolloutfleet consume: {new_group}", file=sys.stderr)
    messages: list[Message] = []
    schema = None
    unfit: list[str] = []
    try:
        while len(messages) < args.count:
            got = consumer.read(count=args.count - len(messages), timeout=args.timeout)
            if not got:
                saved = f"the {len(messages)} batches read are saved in {spool}" if messages else "nothing saved"
                print(
                    f"rolloutfleet consume: {len(messages)} of {args.count} batches after waiting {args.timeout:g} s "
                    f"on {consumer.keys.batches}{_other_shards(len(consumer.shards))} as group {args.group!r}; {saved}",
                    file=sys.stderr,
                )
                if not messages:
                    shutil.rmtree(spool, ignore_errors=True)
                return 1
            kept: list[Message] = []
            for message in got:
                schema = schema or schema_of(message.batch)
                reason = schema_mismatch(message.batch, schema)
                if reason is not None:
                    # Not this file's: left pending, for the group's learner to judge (and
                    # move to the dead letters) when it reclaims it.
                    unfit.append(f"{message.id} ({reason})")
                    continue
                part = concat_messages([message], extra={"worker_index": _worker_index})
                try:
                    write_npz(spool / f"{len(messages):08d}.npz", part)
                except OutputError as exc:
                    consumer.ack(kept)  # those are on disk; this one and the rest stay pending
                    saved = f"the {len(messages)} batches saved before are in {spool}" if messages else "nothing saved"
                    print(f"rolloutfleet consume: {exc}; {saved}; the rest stay pending for group {args.group!r}",
                          file=sys.stderr)  # fmt: skip
                    if not messages:
                        shutil.rmtree(spool, ignore_errors=True)
                    return 1
                messages.append(message)
                kept.append(message)
            # Acknowledged once on disk, so the workers never wait for what this command holds.
            consumer.ack(kept)
    finally:
        consumer.close()
    parts = [dict(np.load(path, allow_pickle=False)) for path in sorted(spool.glob("*.npz"))]
    columns = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    try:
        write_npz(output, columns)
    except OutputError as exc:
        print(f"rolloutfleet consume: {exc}; the batches are saved in {spool}", file=sys.stderr)
        return 1
    shutil.rmtree(spool, ignore_errors=True)
    note = f", acknowledged as group {args.group!r}"
    if unfit:
        note += f"; left pending, unlike the first batch: {', '.join(unfit[:3])}" + (" ..." if len(unfit) > 3 else "")
    if consumer.stats.decode_failures:
        note += f"; {consumer.stats.decode_failures} undecodable entries left for the dead letters"
    _report(columns, messages, output, note)
    return 0


def _new_group_note(args: argparse.Namespace) -> str | None:
    """A line saying that ``--group`` is new (a typo starts a group of its own at the oldest
    entry, reading everything still in the stream), or None when it exists."""
    import redis

    from rolloutfleet.transport.connection import connect
    from rolloutfleet.transport.sharding import read_shards
    from rolloutfleet.transport.stream_status import as_text

    keys = job_keys(args.namespace, args.job, args.policy)
    client = connect(args.redis, socket_timeout=10.0)
    try:
        keys = keys.shard(0, read_shards(client, keys))  # a group is made on every shard at once
        groups = [as_text(g["name"]) for g in client.xinfo_groups(keys.batches)]
    except redis.ResponseError:  # no stream yet (or not a stream: the consumer says so)
        groups = []
    finally:
        client.close()
    if args.group in groups:
        return None
    existing = f"its groups: {', '.join(groups)}" if groups else "it had no consumer group"
    return f"consumer group {args.group!r} did not exist on {keys.batches} ({existing}); created it at the oldest entry"


def _other_shards(shards: int) -> str:
    return "" if shards == 1 else f" and {shards - 1} other shard(s)"


def _report(columns: dict[str, Any], messages: list[Any], output: Path, note: str) -> None:
    rows = len(next(iter(columns.values()))) if columns else 0
    workers = sorted({m.metadata.worker_index for m in messages})
    print(f"wrote {rows} rows from {len(messages)} batches (workers {workers}) to {output}{note}")


def run_streams(args: argparse.Namespace) -> int:
    """Print one row per job stream found in the Redis at ``args.redis``."""
    import redis
    from rich.console import Console
    from rich.table import Table

    from rolloutfleet.evaluation.report import evaluation_lines
    from rolloutfleet.transport.connection import connect, explain, where_url
    from rolloutfleet.transport.sharding import read_shards
    from rolloutfleet.transport.stream_status import GroupStatus, read_stream_status

    if not args.timeout > 0:
        print(f"rolloutfleet streams: --timeout must be > 0 s, got {args.timeout:g}", file=sys.stderr)
        return 2
    if (code := unreachable("streams", args.redis, args.timeout)) is not None:
        return code
    try:
        client = connect(args.redis, socket_timeout=10.0)
    except redis.RedisError as exc:
        print(f"rolloutfleet streams: Redis at {where_url(args.redis)}: {explain(exc)}", file=sys.stderr)
        return 1
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
            (policy, read_stream_status(client, keys))
            for namespace, name, policy in streams
            for keys in job_keys(namespace, name, policy).all_shards(
                read_shards(client, job_keys(namespace, name, policy))
            )
        ]
        refused = _refused(client, streams)
        evaluated = evaluation_lines(client)
    except redis.RedisError as exc:
        print(f"rolloutfleet streams: Redis at {where_url(args.redis)}: {explain(exc)}", file=sys.stderr)
        return 1
    finally:
        client.close()
    table = Table(title=f"{len(statuses)} job streams", title_justify="left")
    for column in (
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
    ):
        table.add_column(column, justify="left" if column in ("job", "group") else "right")
    holds = []
    for policy, status in statuses:
        name = f"{status.namespace}/{status.job}" + ("" if policy is None else f" ({policy})")
        if status.shards > 1:
            name += f" shard {status.shard}/{status.shards}"
        weights = "-" if status.weights_seq_no is None else f"v{status.weights_seq_no}"
        groups: list[GroupStatus | None] = [*status.groups] or [None]
        for group in groups:
            table.add_row(
                name,
                f"{status.length:,}",
                "-" if group is None else group.name,
                "-" if group is None else str(group.consumers),
                "-" if group is None or group.idle_s is None else f"{group.idle_s:.1f} s ago",
                "-" if group is None else f"{group.pending:,}",
                "-" if group is None else "?" if group.undelivered is None else f"{group.undelivered:,}",
                "-" if group is None or group.oldest_pending_age_s is None else f"{group.oldest_pending_age_s:.1f} s",
                f"{status.dead_letters:,}",
                weights,
            )
        if status.hold is not None:
            holds.append(f"{name}: {hold_line(status.hold)}")
    console = Console()
    console.print(table)
    for line in holds + refused + evaluated:
        console.print(line, highlight=False, soft_wrap=True)
    return 0


def _refused(client: Any, streams: list[tuple[str, str, str | None]]) -> list[str]:
    """``ns/job (policy): weights vN refused by K workers: <reason>``, from the heartbeats."""
    from rolloutfleet.spec.refusals import refused_line, refused_versions
    from rolloutfleet.transport.heartbeat import parse_heartbeats

    lines = []
    for namespace, name in sorted({(namespace, name) for namespace, name, _ in streams}):
        beats = parse_heartbeats(client.hgetall(job_keys(namespace, name).heartbeats))
        for policy, seq, workers, reason in refused_versions(beats):
            lines.append(f"{namespace}/{name}: {refused_line(policy, seq, workers, reason)}")
    return lines


def hold_line(hold: Hold) -> str:
    """Who holds the workers back and since when, in one sentence."""
    import time

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
