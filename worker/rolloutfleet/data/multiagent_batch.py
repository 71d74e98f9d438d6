"""Multi-agent experience: one :class:`SampleBatch` per policy id, and the step counts.

Each policy's batch has the usual columns plus ``agent_index`` (a number per agent id,
the same for the whole worker) and ``agent_id`` (the id as text). Rows of one agent in
one sub-env are contiguous and in time order, so ``(eps_id, agent_index)`` runs are
trajectories::

    batch = runner.sample()                  # MultiAgentBatch
    batch["red"]["obs"]                      # the red policy's observations
    batch.env_steps(), batch.agent_steps()   # env steps taken, agent actions taken

On the wire (see :mod:`rolloutfleet.transport.publisher`) each trained policy's batch is its own
stream entry in its own stream; ``agent_id`` travels as the entry's ``agent_ids`` list.
:func:`rolloutfleet.data.codec.encode_multi` also carries a whole batch's numeric columns in one
payload (:meth:`MultiAgentBatch.wire_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from rolloutfleet.data.batch import AGENT_ID, SampleBatch


class MultiAgentBatch(Mapping[str, SampleBatch]):
    """Policy id -> :class:`SampleBatch`, with env steps and agent steps counted.

    >>> batch = MultiAgentBatch({"red": SampleBatch({"obs": np.zeros(3)})}, env_steps=2)
    >>> batch.agent_steps(), batch.env_steps(), list(batch)
    (3, 2, ['red'])
    """

    __slots__ = ("_env_steps", "agent_ids", "policy_batches", "weights_seq_nos")

    def __init__(
        self,
        policy_batches: Mapping[str, SampleBatch],
        env_steps: int,
        agent_ids: Sequence[str] = (),
        weights_seq_nos: Mapping[str, int] | None = None,
    ) -> None:
        self.policy_batches = dict(policy_batches)
        self._env_steps = int(env_steps)
        self.agent_ids = tuple(agent_ids)
        """``agent_ids[i]`` is the agent id of ``agent_index == i``."""
        self.weights_seq_nos = dict(weights_seq_nos or {})
        """Per policy: the weights version in force when sampling began."""

    def __getitem__(self, policy_id: str) -> SampleBatch:
        return self.policy_batches[policy_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.policy_batches)

    def __len__(self) -> int:
        return len(self.policy_batches)

    def __repr__(self) -> str:
        parts = ", ".join(f"{policy}: {len(batch)} rows" for policy, batch in self.policy_batches.items())
        return f"MultiAgentBatch({self._env_steps} env steps; {parts})"

    def by_policy(self) -> dict[str, SampleBatch]:
        """Policy id -> its part (all policies, trained or not)."""
        return dict(self.policy_batches)

    def env_steps(self) -> int:
        """Env steps behind this batch (each sub-env step counts once, however many agents acted)."""
        return self._env_steps

    def agent_steps(self) -> int:
        """Rows over all policies: one per agent action."""
        return sum(len(batch) for batch in self.policy_batches.values())

    @property
    def count(self) -> int:
        """Env steps (RLlib's ``MultiAgentBatch.count``)."""
        return self._env_steps

    def select(self, policy_ids: Iterable[str]) -> MultiAgentBatch:
        """Only these policies' batches (the env step count stays)."""
        wanted = set(policy_ids)
        batches = {p: b for p, b in self.policy_batches.items() if p in wanted}
        return MultiAgentBatch(batches, self._env_steps, self.agent_ids, self.weights_seq_nos)

    def wire_columns(self) -> dict[str, dict[str, np.ndarray]]:
        """Policy id -> its numeric columns (what :func:`~rolloutfleet.data.codec.encode_multi` carries)."""
        return {
            policy: {name: column for name, column in batch.items() if name != AGENT_ID}
            for policy, batch in self.policy_batches.items()
        }

    def to_npz_arrays(self) -> dict[str, np.ndarray]:
        """``"<policy_id>/<column>"`` -> array, ``agent_id`` included (for ``np.savez``)."""
        return {
            f"{policy}/{name}": column
            for policy, batch in self.policy_batches.items()
            for name, column in batch.items()
        }

    @staticmethod
    def concat(batches: Sequence[MultiAgentBatch]) -> MultiAgentBatch:
        """Row-wise, per policy; env steps add up. Agent ids must agree (one runner's batches)."""
        if not batches:
            return MultiAgentBatch({}, 0)
        policies = list(dict.fromkeys(p for batch in batches for p in batch))
        merged = {
            policy: SampleBatch.concat([batch[policy] for batch in batches if policy in batch]) for policy in policies
        }
        longest = max((batch.agent_ids for batch in batches), key=len)
        return MultiAgentBatch(merged, sum(b.env_steps() for b in batches), longest, batches[-1].weights_seq_nos)
