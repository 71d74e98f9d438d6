"""Episode returns from rows of experience, as a learner tracks them. Pure numpy.

Episodes span fragments and batches: the running sums carry over from one ``add`` to the
next, and an episode's return is counted once its ending row (terminated or truncated)
comes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np


class EpisodeReturns:
    """Returns of episodes completed in the batches seen so far (the last ``window`` of them).

    >>> returns = EpisodeReturns(window=2)
    >>> ends = np.array([False, True, False])
    >>> returns.add({"eps_id": np.array([7, 7, 8]), "rewards": np.ones(3), "terminateds": ends, "truncateds": ~ends & False})
    >>> returns.mean, returns.episodes, returns.running
    (2.0, 1, {8: 1.0})
    """

    def __init__(self, window: int = 20) -> None:
        self.running: dict[int, float] = {}
        self.completed: deque[float] = deque(maxlen=window)
        self.episodes = 0

    def add(self, batch: Mapping[str, np.ndarray]) -> None:
        ended = batch["terminateds"] | batch["truncateds"]
        for eps, reward, end in zip(batch["eps_id"].tolist(), batch["rewards"].tolist(), ended.tolist(), strict=True):
            total = self.running.get(eps, 0.0) + reward
            if end:
                self.completed.append(self.running.pop(eps, 0.0) + reward)
                self.episodes += 1
            else:
                self.running[eps] = total

    @property
    def mean(self) -> float:
        """The mean of the last ``window`` returns; NaN before the first episode ends."""
        return float(np.mean(self.completed)) if self.completed else float("nan")
