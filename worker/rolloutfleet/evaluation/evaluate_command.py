"""``rolloutfleet evaluate``: judge a job's current weights version from a shell.

It plays ``episodes`` episodes with the job's evaluation settings (``spec.evaluation``, or
their defaults) and the same seeds as the evaluation workers (episode ``i``: ``seed + i``),
so for a greedy policy its numbers are the ones the workers publish for that version. It
reads the weights (and a ``meanStd`` job's filter statistics) and writes nothing::

    summary = evaluate_current(job, "redis://127.0.0.1:6379/0", episodes=20)
    print(summary.describe())
"""

from __future__ import annotations

from collections.abc import Callable

from rolloutfleet.data.weights_check import WeightsRefused
from rolloutfleet.evaluation.confidence import VersionSummary, summarize
from rolloutfleet.evaluation.episodes import EpisodePlayer
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.filter_sync import FilterSync
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightSubscriber


class NothingToEvaluate(Exception):
    """No weights version to judge, or one that does not fit the job's model (one line)."""


def evaluate_current(
    job: RolloutJob,
    redis_url: str,
    password: str | None = None,
    episodes: int | None = None,
    on_episode: Callable[[int, float, int], None] | None = None,
) -> VersionSummary:
    """The summary of ``episodes`` (default ``spec.evaluation.episodes``) episodes of the job's
    current weights version; ``on_episode(index, return, length)`` after each."""
    player = EpisodePlayer(job)
    subscriber = WeightSubscriber(redis_url, job, password=password)
    try:
        update = subscriber.poll(held=0)
        if update is None:
            raise NothingToEvaluate(f"no weights version of job {job.namespace}/{job.name} is published yet")
        try:
            player.policy.set_weights(update.weights, update.seq_no)
        except WeightsRefused as exc:
            raise NothingToEvaluate(f"weights version {update.seq_no} does not fit the job's model: {exc}") from None
        if player.filter is not None:
            FilterSync(subscriber.client, job_keys(job.namespace, job.name)).pull(player.filter)
        count = episodes or player.evaluation.episodes
        played = []
        for index in range(count):
            played.append(player.play(player.evaluation.seed + index))
            if on_episode is not None:
                on_episode(index, *played[-1])
        return summarize(update.seq_no, played)
    finally:
        subscriber.close()
        player.close()
