"""Worker heartbeats: what each worker writes after a fragment, and what the operator's job
status and ``rolloutfleet fleet`` read back.

One Redis hash per job (:attr:`rolloutfleet.transport.redis.keys.JobKeys.heartbeats`): worker index
-> JSON of its progress and health (the fields: docs/operations/monitoring.md, "Heartbeats"),
expiring when no worker has written it for :data:`HEARTBEAT_TTL_S`::

    write_heartbeat(client, keys, worker_index=3, stats=runner.get_metrics())   # doctest: +SKIP
    read_heartbeats("redis://redis:6379/0", job)                                # doctest: +SKIP
    {3: {'env_steps': 1200.0, 'steps_per_s': 5400.0, ...}}

This module imports no sampling code (no torch, no gymnasium) and nothing of the batch
transport: the operator reads heartbeats through it alone. :func:`beat` and
:func:`parse_heartbeats` are pure; the rest is one Redis call each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rolloutfleet.transport.redis.connection import RETRYABLE, connect
from rolloutfleet.transport.redis.keys import JobKeys, job_keys

if TYPE_CHECKING:
    from rolloutfleet.spec.job import RolloutJob
    from rolloutfleet.transport.redis.errors import Client

HEARTBEAT_TTL_S = 300
"""The hash outlives its last write by this long (then a finished job leaves nothing behind)."""

Heartbeat = dict[str, Any]
"""Numbers as floats, but ``weights_refused``: policy -> (version, reason)."""
Refused = Mapping[str, tuple[int, str]]


def beat(
    stats: Mapping[str, float | int],
    now: float | None = None,
    refused: Refused | None = None,
    waiting_since: float | None = None,
    stuck: str | None = None,
) -> str:
    """The JSON one worker writes, from its runner's metrics (``get_metrics()``);
    ``waiting_since``: unix time it began to wait for a learner (it samples nothing meanwhile).

    >>> beat({"num_env_steps_sampled_lifetime": 300, "env_steps_per_s": 12.5, "weights_seq_no": 2}, now=10.0)
    '{"env_steps": 300, "steps_per_s": 12.5, "episode_return_mean": NaN, "weights_seq_no": 2, "time": 10.0, \
"nonfinite_obs": 0, "nonfinite_rewards": 0, "filter_quarantined": 0, "blocked_s": 0.0}'
    """
    fields: dict[str, Any] = {
        "env_steps": stats.get("num_env_steps_sampled_lifetime", 0),
        "steps_per_s": stats.get("env_steps_per_s", 0.0),
        "episode_return_mean": stats.get("episode_return_mean", float("nan")),
        "weights_seq_no": stats.get("weights_seq_no", 0),
        "time": time.time() if now is None else now,
        "nonfinite_obs": stats.get("nonfinite_obs", 0),
        "nonfinite_rewards": stats.get("nonfinite_rewards", 0),
        "filter_quarantined": stats.get("filter_quarantined", 0),
        "blocked_s": round(float(stats.get("backpressure_seconds", 0.0)), 3),
    }
    # Where the process's rows went (rolloutfleet.fleet.row_tally): sampled, published, dropped.
    fields.update({name: value for name, value in stats.items() if name.startswith("rows_")})
    # An external env's server: clients, open episodes, timed-out / dropped episodes, refusals.
    fields.update({name: value for name, value in stats.items() if name.startswith("external/")})
    # Callbacks' custom per-episode metrics: their mean over the worker's last episodes (the job's status).
    fields.update(
        {name: value for name, value in stats.items() if name.startswith("custom/") and name.endswith("_mean")}
    )
    if waiting_since is not None:
        fields["steps_per_s"] = 0.0
        fields["waiting_for_learner_since"] = waiting_since
    if refused:
        fields["weights_refused"] = {policy: [seq, reason] for policy, (seq, reason) in refused.items()}
    if stuck is not None:
        fields["env_call_stuck"] = stuck
    return json.dumps(fields)


def parse_heartbeats(raw: Mapping[bytes | str, bytes | str]) -> dict[int, Heartbeat]:
    """Worker index -> its heartbeat, from the hash as Redis returns it.

    Entries that are not a worker index and a JSON object of numbers are skipped: a
    foreign or half-upgraded entry is not worth failing a status table for.

    >>> parse_heartbeats({b"0": b'{"env_steps": 5, "time": 1.5}', b"x": b"{}", b"1": b"[1]"})
    {0: {'env_steps': 5.0, 'time': 1.5}}
    """
    beats: dict[int, Heartbeat] = {}
    for index, value in raw.items():
        try:
            fields = json.loads(value)
            refused = _refused(fields.pop("weights_refused", {}))
            stuck = fields.pop("env_call_stuck", None)
            beats[int(index)] = {str(k): float(v) for k, v in fields.items()}
        except (ValueError, TypeError, AttributeError):
            continue
        if refused:
            beats[int(index)]["weights_refused"] = refused
        if stuck is not None:
            beats[int(index)]["env_call_stuck"] = str(stuck)
    return beats


def _refused(raw: Any) -> dict[str, tuple[int, str]]:
    """``weights_refused`` of a heartbeat; ``{}`` when it is not policy -> [version, reason]."""
    try:
        return {str(policy): (int(seq), str(reason)) for policy, (seq, reason) in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def write_heartbeat(
    client: Client,
    keys: JobKeys,
    worker_index: int,
    stats: Mapping[str, float | int],
    now: float | None = None,
    refused: Refused | None = None,
    waiting_since: float | None = None,
    stuck: str | None = None,
) -> None:
    """Write worker ``worker_index``'s heartbeat and push the hash's expiry back (one round trip)."""
    pipe = client.pipeline(transaction=False)
    pipe.hset(keys.heartbeats, str(worker_index), beat(stats, now, refused, waiting_since, stuck))
    pipe.expire(keys.heartbeats, HEARTBEAT_TTL_S)
    pipe.execute()


def read_heartbeats(redis_url: str, job: RolloutJob, password: str | None = None) -> dict[int, Heartbeat]:
    """Worker index -> its last heartbeat; empty when Redis cannot be reached (a status
    display must keep going while Redis restarts)."""
    keys = job_keys(job.namespace, job.name)
    try:
        client = connect(redis_url, password, socket_timeout=2.0, connect_timeout=1.0)
    except RETRYABLE:
        return {}
    try:
        raw = client.hgetall(keys.heartbeats)
    except RETRYABLE:
        return {}
    finally:
        client.close()
    return parse_heartbeats(raw)
