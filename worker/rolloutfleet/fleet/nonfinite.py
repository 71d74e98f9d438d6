"""Counting what an env should never produce: NaN or infinite observations and rewards.

A worker ships such rows as they are (a learner may want to see them; dropping them
silently would hide a broken env), but never lets them into the observation filter's
statistics (:mod:`rolloutfleet.data.filters` quarantines them), and counts both here, per
fragment, for its metrics, its log and its heartbeat::

    tally = NonFiniteTally()
    news = tally.observe(batch, quarantined=sum(f.quarantined for f in runner.get_filters().values()))
    if news: log.warning("%s", tally.describe(news))
    heartbeat_fields = tally.lifetime()
"""

from __future__ import annotations

from dataclasses import dataclass

from rolloutfleet.data.batch import SampleBatch, nonfinite_rows
from rolloutfleet.data.multiagent_batch import MultiAgentBatch


@dataclass(frozen=True)
class NonFinite:
    """Counts for one fragment (or a lifetime)."""

    obs_rows: int = 0
    reward_rows: int = 0
    quarantined: int = 0

    def __bool__(self) -> bool:
        return bool(self.obs_rows or self.reward_rows or self.quarantined)


def batch_nonfinite(batch: SampleBatch | MultiAgentBatch) -> tuple[int, int]:
    """(rows with a non-finite observation, rows with a non-finite reward), over all policies."""
    if isinstance(batch, MultiAgentBatch):
        counts = [nonfinite_rows(part) for part in batch.values()]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
    return nonfinite_rows(batch)


class NonFiniteTally:
    """Lifetime counts of one worker; :meth:`observe` returns what one fragment added."""

    def __init__(self) -> None:
        self.total = NonFinite()

    def observe(self, batch: SampleBatch | MultiAgentBatch, quarantined: int) -> NonFinite:
        """Count ``batch``'s bad rows; ``quarantined`` is the filters' lifetime count so far."""
        obs_rows, reward_rows = batch_nonfinite(batch)
        news = NonFinite(obs_rows, reward_rows, max(0, quarantined - self.total.quarantined))
        self.total = NonFinite(
            self.total.obs_rows + obs_rows,
            self.total.reward_rows + reward_rows,
            max(quarantined, self.total.quarantined),
        )
        return news

    def lifetime(self) -> dict[str, int]:
        """The heartbeat's fields (:func:`rolloutfleet.transport.heartbeat.beat`)."""
        total = self.total
        return {"nonfinite_obs": total.obs_rows, "nonfinite_rewards": total.reward_rows,
                "filter_quarantined": total.quarantined}  # fmt: skip

    @staticmethod
    def describe(news: NonFinite) -> str:
        """One log line about a fragment's non-finite values.

        >>> NonFiniteTally.describe(NonFinite(3, 1, 2))
        'env produced non-finite values: 3 rows with a NaN/inf observation, 1 with a NaN/inf reward (published as they are); 2 observations kept out of the filter statistics'
        """
        line = (
            f"env produced non-finite values: {news.obs_rows} rows with a NaN/inf observation, "
            f"{news.reward_rows} with a NaN/inf reward (published as they are)"
        )
        if news.quarantined:
            line += f"; {news.quarantined} observations kept out of the filter statistics"
        return line
