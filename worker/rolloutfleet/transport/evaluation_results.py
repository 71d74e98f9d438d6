"""Evaluation results in the job's Redis: who plays which episode of a weights version, the
episodes played, and one summary per version (:mod:`rolloutfleet.evaluation`).

Keys (the job's hash tag, so one MULTI touches them on a Redis Cluster too)::

    rolloutfleet:{ns/job}:evaluation                 stream: one entry per version judged
    rolloutfleet:{ns/job}:evaluation:<v>:claims      INCR: episode indexes handed out
    rolloutfleet:{ns/job}:evaluation:<v>:episodes    hash: index -> {"return", "length"}

Episode ``i`` of a version is claimed by one evaluation worker (an INCR), played, and
written into the version's hash in a MULTI that also reads the hash back: the one write
that makes it hold all ``episodes`` entries sees so, and its worker publishes the summary,
so each version is summarized once however many workers share it. JSON only, never pickle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import RETRYABLE, connect
from rolloutfleet.transport.redis.errors import Client
from rolloutfleet.transport.redis.keys import JobKeys, job_keys

WORK_TTL_S = 86_400
"""Claims and episodes of a version are kept a day (a version never finished is forgotten then)."""
RESULTS_MAX_LEN = 10_000
"""Summaries kept in the results stream (one per version judged)."""


def results_key(keys: JobKeys) -> str:
    return f"{keys.tag}:evaluation"


def _work_key(keys: JobKeys, version: int, what: str) -> str:
    return f"{keys.tag}:evaluation:{version}:{what}"


class EvaluationBoard:
    """An evaluation worker's side: claim an episode, record it, publish a version's summary."""

    def __init__(self, client: Client, keys: JobKeys, episodes: int) -> None:
        self.client, self.keys, self.episodes = client, keys, episodes

    def claim(self, version: int) -> int | None:
        """The index of an episode of ``version`` nobody plays yet; None when all are handed out."""
        key = _work_key(self.keys, version, "claims")
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, WORK_TTL_S)
        taken = int(pipe.execute()[0]) - 1
        return taken if taken < self.episodes else None

    def record(self, version: int, index: int, episode_return: float, length: int) -> list[tuple[float, int]] | None:
        """Write episode ``index`` of ``version``; all the version's (return, length), by index,
        when this write is the one that completed it, else None."""
        key = _work_key(self.keys, version, "episodes")
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, str(index), json.dumps({"return": float(episode_return), "length": int(length)}))
        pipe.hgetall(key)
        pipe.expire(key, WORK_TTL_S)
        added, played, _ = pipe.execute()
        if not added or len(played) != self.episodes:
            return None
        ordered = sorted(played.items(), key=lambda item: int(item[0]))
        return [(float(e["return"]), int(e["length"])) for e in (json.loads(v) for _, v in ordered)]

    def publish(self, summary: Mapping[str, Any]) -> None:
        """Append a version's summary (JSON) to the results stream."""
        fields = {"summary": json.dumps(dict(summary))}
        self.client.xadd(results_key(self.keys), fields, maxlen=RESULTS_MAX_LEN, approximate=True)  # type: ignore[arg-type]


def read_results(client: Client, keys: JobKeys, count: int = 20) -> list[dict[str, Any]]:
    """The newest ``count`` summaries, by version (oldest first); malformed entries skipped."""
    entries: list[tuple[Any, dict[Any, Any]]] = client.xrevrange(results_key(keys), count=count) or []  # type: ignore[assignment]
    results: dict[int, dict[str, Any]] = {}
    for _, fields in entries:
        try:
            summary = json.loads(fields.get(b"summary") or fields["summary"])
            results.setdefault(int(summary["version"]), summary)  # newest entry of a version wins
        except (KeyError, ValueError, TypeError):
            continue
    return [results[v] for v in sorted(results)]


def read_latest(redis_url: str, job: RolloutJob, password: str | None = None) -> dict[str, Any] | None:
    """The summary of the newest version judged; None when there is none or Redis is away."""
    keys = job_keys(job.namespace, job.name)
    try:
        client = connect(redis_url, password, socket_timeout=2.0, connect_timeout=1.0)
    except RETRYABLE:
        return None
    try:
        results = read_results(client, keys)
    except RETRYABLE:
        return None
    finally:
        client.close()
    return results[-1] if results else None
