"""``rolloutfleet consume``, once its arguments are checked (:mod:`rolloutfleet.cli.streams`):
without ``--group`` it looks (:class:`~rolloutfleet.transport.reader.BatchReader`, nothing
left behind); with ``--group`` it reads as that group and acknowledges each batch once it
is saved in a spool directory beside the output, merged into the output at the end. Either
way it saves the batches that fit the job's declared columns (:mod:`rolloutfleet.cli.consume_fit`)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from rolloutfleet.cli.consume_fit import LookFit, SpoolFit
from rolloutfleet.cli.npz_output import OutputError, write_npz
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.declared_columns import read_declared
from rolloutfleet.transport.entries import Message, concat_messages
from rolloutfleet.transport.reader import BatchReader
from rolloutfleet.transport.redis.connection import connect
from rolloutfleet.transport.redis.errors import BackendError, CommandRefused
from rolloutfleet.transport.redis.keys import DEFAULT_GROUP, job_keys
from rolloutfleet.transport.redis.sharding import read_shards
from rolloutfleet.transport.redis.stream_status import as_text


def consume(args: argparse.Namespace) -> int:
    """Read ``args.count`` entries and save them; the exit code. Redis errors and bad names
    are one line."""
    try:
        if args.group is None:
            return _look(args)
        return _consume(args)
    except ValueError as exc:  # a job name or policy id that cannot be a key
        print(f"rolloutfleet consume: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:  # away past --timeout, refusing writes, not a stream: one line
        print(f"rolloutfleet consume: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1


def _worker_index(metadata: Any) -> int:
    return int(metadata.worker_index)


def _look(args: argparse.Namespace) -> int:
    with BatchReader(
        args.redis, args.job, args.namespace, policy=args.policy, reconnect_timeout_s=args.timeout
    ) as reader:
        fit = LookFit(lambda: read_declared(reader.client, reader.keys))
        while len(fit.fit()) < args.count:
            got = reader.read(count=args.count - len(fit.fit()), timeout=args.timeout)
            if not got:
                print(_nothing_more(args, len(fit.fit()), reader.keys.batches, reader.groups()), file=sys.stderr)
                return 1
            fit.add(got)
        skipped = reader.stats.decode_failures
        messages, unfit, against = fit.fit()[: args.count], fit.unfit(), fit.against()
    columns = concat_messages(messages, extra={"worker_index": _worker_index})
    try:
        write_npz(args.output, columns)
    except OutputError as exc:
        print(f"rolloutfleet consume: {exc}; nothing saved (nothing was acknowledged)", file=sys.stderr)
        return 1
    note = f"; {skipped} undecodable entries skipped" if skipped else ""
    if unfit:
        note += f"; skipped, unlike {against}: {', '.join(unfit[:3])}" + (" ..." if len(unfit) > 3 else "")
    _report(columns, messages, args.output, note)
    return 0


def _nothing_more(args: argparse.Namespace, read: int, stream: str, groups: list[str]) -> str:
    """Why a look ended short of ``--count``, and what to do."""
    return (
        f"rolloutfleet consume: {read} of {args.count} batches after waiting {args.timeout:g} s "
        f"on {stream}; nothing saved. "
        + (
            f"Consumer groups: {', '.join(groups)}. "
            if groups
            else "No consumer group reads it: with backpressure block the workers wait for a learner "
            "once maxLen entries are unconsumed. "
        )
        + f"To read as the learner (acknowledging, so the fleet goes on): --group {DEFAULT_GROUP}"
    )


class _Stop(Exception):
    """Reading ended early with this exit code; the line is printed."""

    def __init__(self, code: int) -> None:
        self.code = code


def _consume(args: argparse.Namespace) -> int:
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
        args.redis, args.job, args.namespace,
        group=args.group, consumer=args.consumer, policy=args.policy, reconnect_timeout_s=args.timeout,
    )  # fmt: skip
    if new_group is not None:
        print(f"rolloutfleet consume: {new_group}", file=sys.stderr)
    try:
        fit = SpoolFit(lambda: read_declared(consumer.client, consumer.keys))
        messages, unfit = _spool_batches(args, consumer, spool, fit)
    except _Stop as stop:
        return stop.code
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
        note += f"; left pending, unlike {fit.against()}: {', '.join(unfit[:3])}" + (" ..." if len(unfit) > 3 else "")
    if consumer.stats.decode_failures:
        note += f"; {consumer.stats.decode_failures} undecodable entries left for the dead letters"
    _report(columns, messages, output, note)
    return 0


def _spool_batches(
    args: argparse.Namespace, consumer: BatchConsumer, spool: Path, fit: SpoolFit
) -> tuple[list[Message], list[str]]:
    """Read ``--count`` batches into ``spool`` (one file each), acknowledging them once on
    disk; the messages saved and the ones left pending for not fitting (``fit``)."""
    messages: list[Message] = []
    unfit: list[str] = []
    while len(messages) < args.count:
        got = consumer.read(count=args.count - len(messages), timeout=args.timeout)
        if not got:
            saved = f"the {len(messages)} batches read are saved in {spool}" if messages else "nothing saved"
            print(
                f"rolloutfleet consume: {len(messages)} of {args.count} batches after waiting {args.timeout:g} s "
                f"on {consumer.keys.batches}{_other_shards(len(consumer.shards))} as group {args.group!r}; {saved}",
                file=sys.stderr,
            )
            _stop(1, spool, messages)
        kept: list[Message] = []
        for message in got:
            reason = fit.reason(message.batch)
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
                _stop(1, spool, messages)
            messages.append(message)
            kept.append(message)
        # Acknowledged once on disk, so the workers never wait for what this command holds.
        consumer.ack(kept)
    return messages, unfit


def _stop(code: int, spool: Path, saved: list[Message]) -> NoReturn:
    """End reading with exit ``code``; an empty spool goes."""
    if not saved:
        shutil.rmtree(spool, ignore_errors=True)
    raise _Stop(code)


def _new_group_note(args: argparse.Namespace) -> str | None:
    """A line saying that ``--group`` is new (a typo starts a group of its own at the oldest
    entry, reading everything still in the stream), or None when it exists."""
    keys = job_keys(args.namespace, args.job, args.policy)
    client = connect(args.redis, socket_timeout=10.0)
    try:
        keys = keys.shard(0, read_shards(client, keys))  # a group is made on every shard at once
        groups = [as_text(g["name"]) for g in client.xinfo_groups(keys.batches)]
    except CommandRefused:  # no stream yet (or not a stream: the consumer says so)
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
