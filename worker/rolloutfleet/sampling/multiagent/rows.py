"""The multi-agent runner's buffers: one :class:`PolicyRows` per policy (growable column
buffers that agent steps are appended to as the agents act, completed when their next
observation arrives, cut into batches when complete) and one :class:`SubEnv` per
sub-environment (its current episode's bookkeeping)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rolloutfleet.data import batch as sb
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.inference.obs_spaces import MASK_KEY, check_masks, leaf_values
from rolloutfleet.inference.policy import Policy, RecurrentActFn
from rolloutfleet.sampling.multiagent.pettingzoo_env import MultiAgentEnvAdapter
from rolloutfleet.spec.job import SpecError

COMPLETE = "_complete"
"""Column: the row's next observation (or its episode's end) has arrived."""
Outputs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""A policy's (actions, action_logp, action_dist_inputs, vf_preds) for the rows it acted for."""


class PolicyRows:
    """One policy's agent steps: growable column buffers, rows appended as agents act.

    Rows stay here until they are completed and cut into a batch; open rows (waiting for
    the agent's next observation) are kept, and so are rows of episodes that
    ``complete_episodes`` must not cut yet.
    """

    def __init__(self, policy_id: str, policy: Policy, filtered: bool = False) -> None:
        self.policy_id, self.policy = policy_id, policy
        obs_space, act_space = policy.observation_space, policy.action_space
        self.parts = parts = policy.obs_parts
        self.paths = parts.paths  # a Dict/Tuple observation's leaves: one obs/<path>, new_obs/<path> column each
        self.masked = parts.masked
        act_shape = act_space.shape or ()
        self.specs: dict[str, tuple[tuple[int, ...], Any]] = {}
        for path, leaf in parts.leaves or (("", obs_space),):
            spec = (leaf.shape or (), np.float32 if filtered else leaf.dtype)
            self.specs[f"{sb.OBS}/{path}" if path else sb.OBS] = spec
            self.specs[f"{sb.NEW_OBS}/{path}" if path else sb.NEW_OBS] = spec
        self.specs |= {
            sb.ACTIONS: (act_shape, act_space.dtype),
            sb.REWARDS: ((), np.float32),
            sb.TERMINATEDS: ((), np.bool_),
            sb.TRUNCATEDS: ((), np.bool_),
            sb.EPS_ID: ((), np.int64),
            sb.ENV_ID: ((), np.int32),
            sb.AGENT_INDEX: ((), np.int32),
            sb.T: ((), np.int64),
            sb.ACTION_LOGP: ((), np.float32),
            sb.ACTION_DIST_INPUTS: ((policy.distribution.num_inputs,), np.float32),
            sb.VF_PREDS: ((), np.float32),
            sb.WEIGHTS_SEQ_NO: ((), np.int64),
        }
        if policy.exploration is not None:
            self.specs[sb.EXPLORATION_SCALE] = ((), np.float32)
        if parts.masked:
            self.specs[sb.ACTION_MASK] = ((policy.distribution.num_inputs,), np.bool_)
        # Stateful models: the state each row acted with (and, with stateOut, the state after).
        self.initial_state = [part[0] for part in policy.initial_state(1)] if policy.recurrent else []
        parts_n = len(self.initial_state)
        self.state_names = sb.state_column_names(parts_n, policy.spec.state_out) if parts_n else ()
        for k, name in enumerate(self.state_names):
            self.specs[name] = (self.initial_state[k % parts_n].shape, np.float32)
        self.specs[COMPLETE] = ((), np.bool_)
        self.size = 0
        self.capacity = 0
        self.columns: dict[str, np.ndarray] = {}
        self._grow(256)

    def _grow(self, capacity: int) -> None:
        old = self.columns
        self.columns = {name: np.empty((capacity, *shape), dtype) for name, (shape, dtype) in self.specs.items()}
        for name, column in old.items():
            self.columns[name][: self.size] = column[: self.size]
        self.capacity = capacity
        # Bound views for the step loop, refreshed whenever the buffers move.
        c = self.columns
        self.obs: Any = c.get(sb.OBS)  # None for a Dict/Tuple observation (its leaves' columns)
        self.new_obs: Any = c.get(sb.NEW_OBS)
        self.rewards = c[sb.REWARDS]
        self.terminateds, self.truncateds, self.complete = c[sb.TERMINATEDS], c[sb.TRUNCATEDS], c[COMPLETE]

    def set_new_obs(self, row: int, obs: Any) -> None:
        """Row ``row``'s ``new_obs``: an observation as the env gave it, or None for the row's own ``obs``."""
        if not self.paths:
            self.new_obs[row] = self.obs[row] if obs is None else obs
            return
        values = None if obs is None else leaf_values(obs, self.paths)
        columns = self.columns
        for path in self.paths:
            new = columns[f"{sb.NEW_OBS}/{path}"]
            new[row] = columns[f"{sb.OBS}/{path}"][row] if values is None else values[path]

    def write_obs(self, obs_list: list[Any], start: int, agents: list[Any]) -> tuple[Any, np.ndarray | None]:
        """The acting agents' observations into rows ``start:``; returns the model's input and
        the action mask (checked; None without one)."""
        end = start + len(obs_list)
        if not self.paths:
            obs = self.columns[sb.OBS][start:end]
            self._stack(obs_list, obs, agents)
            return obs, None
        try:
            per_obs = [leaf_values(o, self.paths) for o in obs_list]
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise SpecError(
                f"spec.env: an observation of policy {self.policy_id!r}'s agents {agents[:4]} lacks leaf {exc} of its "
                f"observation space {self.policy.observation_space}"
            ) from None
        leaves = {}
        for path in self.paths:
            leaves[path] = self.columns[f"{sb.OBS}/{path}"][start:end]
            self._stack([values[path] for values in per_obs], leaves[path], agents)
        model_input = self.parts.model_input(leaves)
        if not self.masked:
            return model_input, None
        mask = self.columns[sb.ACTION_MASK][start:end]
        np.not_equal(leaves[MASK_KEY], 0, out=mask)
        try:
            check_masks(mask, agents)
        except ValueError as exc:
            raise SpecError(f"spec.env: {exc}") from None
        return model_input, mask

    def _stack(self, obs_list: list[Any], out: np.ndarray, agents: list[Any]) -> None:
        try:
            np.stack(obs_list, out=out, casting="unsafe")
        except (ValueError, TypeError) as exc:
            raise SpecError(
                f"spec.env: observations of policy {self.policy_id!r}'s agents {agents[:4]} do not fit its "
                f"observation space {self.policy.observation_space}: {exc}"
            ) from None

    def act_stateful(
        self, act: RecurrentActFn, start: int, kept: list[list[np.ndarray] | None], obs: Any, mask: np.ndarray | None
    ) -> tuple[Outputs, list[np.ndarray]]:
        """A stateful policy's act for rows ``start:`` on the model's input ``obs``: each agent's
        ``kept`` state (None: the initial one, at its episode's start) into ``state_in``, the
        state after into ``state_out`` (with stateOut); returns the outputs and the new states."""
        end = start + len(kept)
        parts, initial = len(self.initial_state), self.initial_state
        state_in = [self.columns[name][start:end] for name in self.state_names[:parts]]
        for offset, state in enumerate(kept):
            for k in range(parts):
                state_in[k][offset] = initial[k] if state is None else state[k]
        action, logp, dist_inputs, values, new_state = act(obs, state_in, mask)
        for name, part in zip(self.state_names[parts:], new_state, strict=False):
            self.columns[name][start:end] = part
        return (action, logp, dist_inputs, values), new_state

    def open_rows(self, start: int, envs: list[int], outputs: Outputs, scale: float | None) -> None:
        """Rows ``start:`` (one per acting agent, of sub-envs ``envs``) get what the policy gave;
        rewards and flags wait for the agent's next observation."""
        end, columns = start + len(envs), self.columns
        columns[sb.ACTIONS][start:end], columns[sb.ACTION_LOGP][start:end] = outputs[0], outputs[1]
        columns[sb.ACTION_DIST_INPUTS][start:end], columns[sb.VF_PREDS][start:end] = outputs[2], outputs[3]
        columns[sb.ENV_ID][start:end] = envs
        columns[sb.REWARDS][start:end] = 0.0
        columns[sb.TERMINATEDS][start:end] = False
        columns[sb.TRUNCATEDS][start:end] = False
        columns[COMPLETE][start:end] = False
        columns[sb.WEIGHTS_SEQ_NO][start:end] = self.policy.weights_seq_no
        if scale is not None:
            columns[sb.EXPLORATION_SCALE][start:end] = scale

    def cut(self, eps_ids: np.ndarray | None, agent_ids: np.ndarray) -> tuple[SampleBatch, np.ndarray]:
        """Every completed row (of episodes ``eps_ids`` only, when given) as a batch, trajectories
        contiguous (by sub-env, then agent; time order kept within); the other rows stay. Also
        returns old row index -> new index for the rows that stay (-1: cut)."""
        n = self.size
        keep = self.complete[:n].copy()
        if eps_ids is not None:
            keep &= np.isin(self.columns[sb.EPS_ID][:n], eps_ids)
        taken, remap = self.take(keep)
        order = np.lexsort((taken[sb.AGENT_INDEX], taken[sb.ENV_ID]))  # stable: time order kept
        columns = {name: column[order] for name, column in taken.items()}
        columns[sb.AGENT_ID] = agent_ids[columns[sb.AGENT_INDEX]]
        return SampleBatch(columns), remap

    def drop(self, eps_id: int) -> tuple[int, np.ndarray] | None:
        """Forget episode ``eps_id``'s rows: how many of them were complete, and old row index ->
        new index (:meth:`take`); None when it has no rows here."""
        n = self.size
        doomed = self.columns[sb.EPS_ID][:n] == eps_id
        if not doomed.any():
            return None
        complete = int((doomed & self.complete[:n]).sum())
        return complete, self.take(doomed)[1]

    def reserve(self, rows: int) -> int:
        """Room for ``rows`` more rows; returns the first one's index."""
        start = self.size
        if start + rows > self.capacity:
            self._grow(max(2 * self.capacity, start + rows))
        self.size = start + rows
        return start

    def take(self, keep: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Cut the rows of mask ``keep`` out (returned, in row order); the others move to the
        front. Also returns old row index -> new index for the rows that stay (-1: cut)."""
        n = self.size
        taken = {name: column[:n][keep] for name, column in self.columns.items() if name != COMPLETE}
        stay = ~keep
        remap = np.full(n, -1, np.int64)
        remaining = int(stay.sum())
        remap[stay] = np.arange(remaining)
        if remaining:
            for column in self.columns.values():
                column[:remaining] = column[:n][stay]
        self.size = remaining
        return taken, remap


class Arrivals:
    """meanStd: the observations that arrived this step, per policy, normalized in one filter
    call each. Each updates its policy's statistics once and becomes, filtered, both the
    new_obs of the agent's last row and the obs it acts on next (so new_obs[t] == obs[t + 1])."""

    def __init__(self) -> None:
        # policy id -> (observation, row whose new_obs it is or -1, dict to store it in or None, agent)
        self.pending: dict[str, list[tuple[Any, int, dict[Any, Any] | None, Any]]] = {}

    def add(self, policy_id: str, obs: Any, row: int, store: dict[Any, Any] | None, agent: Any) -> None:
        self.pending.setdefault(policy_id, []).append((obs, row, store, agent))

    def remap(self, policy_id: str, remap: np.ndarray) -> None:
        """``policy_id``'s rows moved (:meth:`PolicyRows.take`): old row index -> new (-1: gone)."""
        self.pending[policy_id] = [
            (obs, int(remap[row]) if row >= 0 else -1, store, agent)
            for obs, row, store, agent in self.pending.get(policy_id, [])
        ]

    def filter(self, rows: Mapping[str, PolicyRows], filters: Mapping[str, MeanStdFilter]) -> None:
        for policy_id, arrivals in self.pending.items():
            if not arrivals:
                continue
            new_obs = rows[policy_id].new_obs
            filtered = filters[policy_id](np.stack([np.asarray(a[0]) for a in arrivals]))
            for k, (_, row, store, agent) in enumerate(arrivals):
                if row >= 0:
                    new_obs[row] = filtered[k]
                if store is not None:
                    store[agent] = filtered[k]
            arrivals.clear()


class SubEnv:
    """Bookkeeping of one sub-env's current episode."""

    __slots__ = (
        "agent_t",
        "env",
        "eps_id",
        "league_name",
        "league_slot",
        "length",
        "mapping",
        "obs",
        "open",
        "returns",
        "rows",
        "state",
    )

    def __init__(self, env: MultiAgentEnvAdapter) -> None:
        self.env = env
        self.obs: dict[Any, Any] = {}  # agents that act next -> their observation
        self.open: dict[Any, tuple[str, int]] = {}  # agent -> (policy, row) waiting for its next obs
        self.mapping: dict[Any, str] = {}  # agent -> policy, for this episode
        self.agent_t: dict[Any, int] = {}
        self.returns: dict[Any, float] = {}
        self.eps_id = 0
        self.length = 0  # env steps
        self.rows = 0  # agent steps
        self.state: dict[Any, list[np.ndarray]] = {}  # agent -> its model state (stateful policies)
        self.league_slot: int | None = None  # spec.league: the slot this episode's opponent plays
        self.league_name: str | None = None  # ... and the snapshot that slot held when it began

    def episode_returns(self) -> tuple[float, dict[str, dict[str, float]]]:
        """The episode's return (summed over agents), and per ``"agent"`` and per ``"policy"``."""
        per_policy: dict[str, float] = {}
        for agent, policy_id in self.mapping.items():
            per_policy[policy_id] = per_policy.get(policy_id, 0.0) + self.returns.get(agent, 0.0)
        per_agent = {str(agent): value for agent, value in self.returns.items()}
        return float(sum(self.returns.values())), {"agent": per_agent, "policy": per_policy}

    def start(self, obs: dict[Any, Any], eps_id: int) -> None:
        self.obs, self.eps_id = obs, eps_id
        self.open, self.mapping, self.agent_t, self.returns, self.state = {}, {}, {}, {}, {}
        self.length = self.rows = 0
        self.league_slot = self.league_name = None
