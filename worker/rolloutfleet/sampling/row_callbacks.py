"""Episode callbacks read back from a chunk of grid rows, for :class:`~rolloutfleet.EnvRunner`.

The hot loop writes rows and leaves the episode bookkeeping to a pass over the chunk; when a
job's callbacks override ``on_episode_step``/``_start``/``_end`` that pass ends here, calling
them row by row in the order the steps happened, as if they had run inside the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rolloutfleet.data import batch as sb
from rolloutfleet.sampling.episode_clock import Ended
from rolloutfleet.sampling.grid import Grid


class RowCallbacks:
    """``runner``'s callbacks for grid rows. ``calls``: whether on_episode_start, _step and _end
    are overridden; ``end_metrics(env_index, ended)`` closes an episode's custom metrics."""

    def __init__(
        self, runner: Any, grid: Grid, calls: tuple[bool, bool, bool], end_metrics: Callable[[int, bool], None]
    ) -> None:
        self.runner, self.grid, self.end_metrics = runner, grid, end_metrics
        self.call_start, self.call_step, self.call_end = calls

    def __call__(self, a: int, valid: np.ndarray, ended: Ended) -> None:
        """Rows ``a`` onwards (``valid``: their transitions): steps, then the episodes that ended
        at each row and the episodes that follow them."""
        cols, callbacks, runner = self.grid.columns, self.runner.callbacks, self.runner
        rows, envs, new_ids, returns, lengths = ended.rows, ended.envs, ended.new_ids, ended.returns, ended.lengths
        e = 0
        for r in range(len(valid)):
            s = a + r
            if self.call_step:
                for i in np.flatnonzero(valid[r]):
                    callbacks.on_episode_step(
                        runner=runner,
                        env_index=int(i),
                        eps_id=int(cols[sb.EPS_ID][s, i]),
                        action=cols[sb.ACTIONS][s, i],
                        reward=float(cols[sb.REWARDS][s, i]),
                        new_obs=self.grid.new_obs(s, int(i)),
                    )
            while e < len(rows) and rows[e] == r:
                i = int(envs[e])
                if self.call_end:
                    callbacks.on_episode_end(
                        runner=runner,
                        env_index=i,
                        eps_id=int(cols[sb.EPS_ID][s, i]),
                        episode_return=float(returns[e]),
                        episode_length=int(lengths[e]),
                        terminated=bool(cols[sb.TERMINATEDS][s, i]),
                        truncated=bool(cols[sb.TRUNCATEDS][s, i]),
                    )
                self.end_metrics(i, True)
                if self.call_start:
                    callbacks.on_episode_start(runner=runner, env_index=i, eps_id=int(new_ids[e]))
                e += 1
