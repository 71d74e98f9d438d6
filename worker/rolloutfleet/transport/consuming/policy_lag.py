"""``max_policy_lag``, judged row by row: rows sampled with weights older than the learner's
version minus the lag are cut from a batch (a fragment can carry rows from before a weights
update); a batch with no row left is dropped whole. The learner's version is its own, or
else the job's published one, whose going back (Redis lost its state) is logged and counted."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rolloutfleet.data.batch import WEIGHTS_SEQ_NO, SampleBatch
from rolloutfleet.transport.consuming.stats import ConsumerStats
from rolloutfleet.transport.entries import BatchMetadata, fresh_rows

log = logging.getLogger(__name__)


class PolicyLag:
    """Rows no more than ``max_policy_lag`` versions behind (None: every row); ``stats``
    counts the stale rows and batches, and the resets of the published version."""

    def __init__(self, max_policy_lag: int | None, stats: ConsumerStats) -> None:
        self.max_policy_lag = max_policy_lag
        self.policy_version: int | None = None
        """The learner's current weights version; None: read the job's published version."""
        self.last_min_seq_no: int | None = None
        """The oldest weights version among the rows delivered last."""
        self._stats = stats
        self._published: int | None = None

    def newest(self, read_published: Callable[[], int | None], key: str) -> int | None:
        """The version rows are judged against (None: no judging): the learner's, else the
        published one (``read_published``, from ``key``)."""
        if self.max_policy_lag is None:
            return None
        if self.policy_version is not None:
            return self.policy_version
        version = read_published()
        if version is not None:
            if self._published is not None and version < self._published:
                self._stats.weights_resets += 1
                log.warning(
                    "the published weights version of %s went back from %d to %d (Redis lost its state?): "
                    "policy lag is judged by %d from now on",
                    key, self._published, version, version,
                )  # fmt: skip
            self._published = version
        return version

    def fresh(self, batch: SampleBatch, metadata: BatchMetadata, newest: int | None) -> tuple[SampleBatch, int] | None:
        """The rows of ``batch`` recent enough next to ``newest`` and the oldest version among
        them; None when no row is (the batch is dropped whole)."""
        oldest = metadata.weights_seq_no_min
        if newest is not None and self.max_policy_lag is not None:
            batch, stale_rows = fresh_rows(batch, metadata, newest - self.max_policy_lag)
            self._stats.stale_rows += stale_rows
            if not len(batch) and stale_rows:
                self._stats.stale += 1
                return None
            if stale_rows:
                oldest = int(batch[WEIGHTS_SEQ_NO].min())
        return batch, oldest  # type: ignore[return-value]  # set in BatchMetadata.__post_init__

    def delivered(self, oldest_versions: list[int]) -> None:
        """The oldest version of each message just delivered."""
        if oldest_versions:
            self.last_min_seq_no = min(oldest_versions)

    def lag(self, newest: int | None) -> int | None:
        """``newest`` minus the oldest version of the rows delivered last."""
        return None if newest is None or self.last_min_seq_no is None else newest - self.last_min_seq_no
