"""The vectorized sampler's grid: preallocated ``(steps, num_envs)`` column buffers that
:class:`~rolloutfleet.sampling.env_runner.EnvRunner` steps into, and the cut that turns their
valid rows into a batch. Grid row ``s`` holds vector step ``s`` of every sub-env (flat index
``s * num_envs + i``). Besides the batch columns the grid keeps :data:`OBS_BUF` (``capacity + 1``
rows: row ``s`` is row ``s``'s ``obs``, row ``s + 1`` its ``new_obs``; one buffer per leaf of a
Dict or Tuple observation, gathered as ``obs/<path>`` and ``new_obs/<path>``), :data:`VALID`
(whether a row is a transition: a NEXT_STEP reset step is not), :data:`RAW_REWARDS` (unclipped
rewards, when clipping), :data:`SEQ_NO` (per grid row: the ``weights_seq_no`` it was sampled
with) and :attr:`Grid.final_obs` (SAME_STEP envs' true final observations, patched into
``new_obs`` when rows are gathered).

Rows a batch does not take (the start of the next fragment, episodes still running in
complete_episodes mode) stay: the tail of time steps that holds them moves to the grid's
front (:meth:`Grid.keep_rest`) and the next call steps on after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from rolloutfleet.data import batch as sb
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.inference.obs_spaces import MASK_KEY, leaf_values
from rolloutfleet.inference.policy import Policy

VALID = "_valid"
TICK = "_tick"  # global vector-step counter: orders episode ends across sub-envs
OBS_BUF = "_obs_buf"  # capacity + 1 rows: row s is grid row s's obs, row s + 1 its new_obs
RAW_REWARDS = "_raw_rewards"  # unclipped rewards (episode returns), only when clipping
SEQ_NO = "_seq_no"  # per grid row (not per env): the weights_seq_no it was sampled with

ColumnSpecs = Mapping[str, tuple[tuple[int, ...], Any]]
"""Column name -> (shape of one sub-env's entry, dtype), for the per-step columns."""


def grid_columns(
    policy: Policy, state: Sequence[np.ndarray], state_names: Sequence[str], raw_rewards: bool
) -> ColumnSpecs:
    """The per-step columns of ``policy``'s grid (observations and weights versions are the
    grid's own); ``state``: a stateful model's initial state per part, ``(num_envs, ...)``."""
    action_space = policy.action_space
    specs: dict[str, tuple[tuple[int, ...], Any]] = {
        sb.ACTIONS: (action_space.shape or (), action_space.dtype),
        sb.REWARDS: ((), np.float32),
        sb.TERMINATEDS: ((), np.bool_),
        sb.TRUNCATEDS: ((), np.bool_),
        sb.EPS_ID: ((), np.int64),
        sb.T: ((), np.int64),
        sb.ACTION_LOGP: ((), np.float32),
        sb.ACTION_DIST_INPUTS: ((policy.distribution.num_inputs,), np.float32),
        sb.VF_PREDS: ((), np.float32),
        VALID: ((), np.bool_),
    }
    if raw_rewards:
        specs[RAW_REWARDS] = ((), np.float64)
    if policy.exploration is not None:
        specs[sb.EXPLORATION_SCALE] = ((), np.float32)
    for name in state_names:
        part = state[int(name.rsplit("_", 1)[1])]
        specs[name] = (part.shape[1:], np.float32)
    return specs


def batch_columns(policy: Policy, state_names: Sequence[str]) -> list[str]:
    """The batch's columns in order: a Dict/Tuple observation's leaves in place of obs and new_obs."""
    parts = policy.obs_parts
    names: list[str] = []
    for name in sb.COLUMNS:
        if name in (sb.OBS, sb.NEW_OBS) and parts.leaves:
            names.extend(f"{name}/{path}" for path in parts.paths)
        else:
            names.append(name)
    names.extend(state_names)
    if policy.exploration is not None:
        names.append(sb.EXPLORATION_SCALE)
    if parts.masked:
        names.append(sb.ACTION_MASK)
    return names


def obs_buffer(path: str) -> str:
    """The grid buffer of observation leaf ``path`` (``""``: a plain observation)."""
    return f"{OBS_BUF}/{path}" if path else OBS_BUF


def _obs_column(name: str) -> tuple[str, int] | None:
    """(leaf path, 0 for obs or 1 for new_obs) of an observation column name, else None."""
    if name in (sb.OBS, sb.NEW_OBS):
        return "", int(name == sb.NEW_OBS)
    for first, prefix in enumerate((f"{sb.OBS}/", f"{sb.NEW_OBS}/")):
        if name.startswith(prefix):
            return name[len(prefix) :], first
    return None


class Layout(NamedTuple):
    """The valid grid rows, env-major: per position its env, grid step, rank within the env
    and flat grid index (step * num_envs + env)."""

    env: np.ndarray
    step: np.ndarray
    rank: np.ndarray
    flat: np.ndarray


class Grid:
    """Column buffers of ``num_envs`` sub-envs, grown on demand.

    ``specs`` are the per-step columns (:data:`VALID` among them, :data:`RAW_REWARDS` when
    rewards are clipped); the observation buffers and :data:`SEQ_NO` are added here.
    ``leaves`` (path -> (shape, dtype)): a Dict or Tuple observation's leaves, one buffer
    each, instead of one buffer of ``obs_shape``.
    """

    def __init__(
        self,
        num_envs: int,
        specs: ColumnSpecs,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        leaves: ColumnSpecs | None = None,
    ) -> None:
        self.num_envs = num_envs
        self.specs = dict(specs)
        self.obs_specs = {"": (obs_shape, obs_dtype)} if leaves is None else dict(leaves)
        self.columns: dict[str, np.ndarray] = {}
        self.capacity = 0
        self.filled = 0  # grid rows in use: kept from the last batch, then stepped in this call
        self.tick = 0  # the tick of grid row 0
        # SAME_STEP: grid row * num_envs + env -> new_obs (leaf path -> value with leaves)
        self.final_obs: dict[int, Any] = {}

    def ensure_capacity(self, steps: int) -> None:
        """Grid buffers for ``steps`` rows; growing keeps the rows already stepped."""
        if steps <= self.capacity:
            return
        old, filled = self.columns, self.filled
        steps = max(steps, 2 * self.capacity)
        n = self.num_envs
        self.columns = {name: np.empty((steps, n, *shape), dtype) for name, (shape, dtype) in self.specs.items()}
        for path, (shape, dtype) in self.obs_specs.items():
            self.columns[obs_buffer(path)] = np.empty((steps + 1, n, *shape), dtype)
        self.columns[SEQ_NO] = np.empty(steps, np.int64)
        for name, column in old.items():
            rows = filled + 1 if name.startswith(OBS_BUF) else filled
            self.columns[name][:rows] = column[:rows]
        self.capacity = steps

    def obs_writer(self) -> Callable[[int, Any], None]:
        """``(grid row, observations of every sub-env) -> None``: one buffer, or one per leaf
        (bound to the buffers as they are: ask again after :meth:`ensure_capacity`)."""
        if "" in self.obs_specs:
            c_obs = self.columns[OBS_BUF]

            def put(row: int, obs: Any) -> None:
                c_obs[row] = obs

            return put
        paths = tuple(self.obs_specs)
        buffers = [(path, self.columns[obs_buffer(path)]) for path in paths]

        def put_leaves(row: int, obs: Any) -> None:
            values = leaf_values(obs, paths)
            for path, buffer in buffers:
                buffer[row] = values[path]

        return put_leaves

    def keep_final_obs(
        self, s: int, info: Mapping[str, Any], obs_filter: Callable[[np.ndarray], np.ndarray] | None
    ) -> None:
        """SAME_STEP: the true final observations (``info["final_obs"]``) of the episodes that ended
        at row ``s``; plain ones filtered like any other (NEXT_STEP envs return them as next_obs)."""
        ended = np.flatnonzero(info["_final_obs"])
        if len(ended) == 0:
            return
        final, base = info["final_obs"], s * self.num_envs
        if "" not in self.obs_specs:  # Dict/Tuple observations are not filtered
            paths = tuple(self.obs_specs)
            for i in ended:
                values = leaf_values(final[i], paths)
                self.final_obs[base + int(i)] = {path: np.asarray(values[path]) for path in paths}
            return
        stacked = np.stack([np.asarray(final[i]) for i in ended])
        filtered = stacked if obs_filter is None else obs_filter(stacked)
        for k, i in enumerate(ended):
            self.final_obs[base + int(i)] = filtered[k]

    def new_obs(self, s: int, i: int) -> Any:
        """Grid row ``s``'s ``new_obs`` of sub-env ``i`` (leaf path -> value with leaves)."""
        final = self.final_obs.get(s * self.num_envs + i)
        if final is not None:
            return final
        if "" in self.obs_specs:
            return self.columns[OBS_BUF][s + 1, i]
        return {path: self.columns[obs_buffer(path)][s + 1, i] for path in self.obs_specs}

    def layout(self) -> Layout:
        """Every valid grid row, ordered by env then time."""
        self.ensure_capacity(1)
        n = self.num_envs
        env, step = np.nonzero(self.columns[VALID][: self.filled].T)  # (envs, steps): env-major
        counts = np.bincount(env, minlength=n)
        rank = np.arange(len(env)) - np.repeat(np.cumsum(counts) - counts, counts)
        return Layout(env, step, rank, step * n + env)

    def gather(
        self, name: str, flat: np.ndarray, env: np.ndarray | None = None, step: np.ndarray | None = None
    ) -> np.ndarray:
        """Grid rows ``flat`` (step * num_envs + env) of one column; ``env`` and ``step``, when
        the caller has them (a :class:`Layout`'s), save dividing ``flat`` again."""
        n = self.num_envs
        if name == sb.ENV_ID:
            return (flat % n if env is None else env).astype(np.int32)
        if name == TICK:
            return (flat // n if step is None else step) + self.tick
        if name == sb.WEIGHTS_SEQ_NO:
            return np.take(self.columns[SEQ_NO], flat // n if step is None else step)
        leaf = _obs_column(name)
        if leaf is not None:
            # One buffer holds both: new_obs of row s is obs of row s + 1, except the
            # SAME_STEP final observations kept aside.
            path, first = leaf
            column = self.columns[obs_buffer(path)][first : first + self.filled]
        else:
            column = self.columns[name][: self.filled]
        # np.take moves small rows (a CartPole observation) ~10x faster than fancy indexing.
        out = np.take(column.reshape(-1, *column.shape[2:]), flat, axis=0)
        if leaf is not None and leaf[1] == 1 and self.final_obs:
            self._patch_final_obs(out, flat, leaf[0])
        return out

    def _patch_final_obs(self, new_obs: np.ndarray, flat: np.ndarray, path: str = "") -> None:
        """Put the kept final observations into gathered ``new_obs`` rows (grid rows ``flat``)."""
        keys = np.fromiter(self.final_obs, np.int64, len(self.final_obs))
        where = np.full(self.filled * self.num_envs, -1, np.int64)
        where[keys] = np.arange(len(keys))
        hit = where[flat]
        rows = np.flatnonzero(hit >= 0)
        if len(rows):
            finals = list(self.final_obs.values())
            new_obs[rows] = np.stack([finals[j] if not path else finals[j][path] for j in hit[rows]])

    def keep_rest(self, layout: Layout, rest: np.ndarray) -> None:
        """Move the grid's tail that holds the ``rest`` rows to its front; only they stay valid."""
        filled, n, cols = self.filled, self.num_envs, self.columns
        first = int(layout.step[rest].min()) if rest.any() else filled
        kept = filled - first
        valid = cols[VALID]
        valid[:filled] = False
        valid.reshape(-1)[layout.flat[rest]] = True
        for name, column in cols.items():
            extra = 1 if name.startswith(OBS_BUF) else 0  # obs buffers also hold the next obs
            column[: kept + extra] = column[first : filled + extra]
        cutoff = first * n
        self.final_obs = {key - cutoff: obs for key, obs in self.final_obs.items() if key >= cutoff}
        self.tick += first
        self.filled = kept

    def ended(self, layout: Layout) -> np.ndarray:
        """Per layout row: whether an episode ended there."""
        return self.gather(sb.TERMINATEDS, layout.flat) | self.gather(sb.TRUNCATEDS, layout.flat)

    def complete_keep(self, layout: Layout, max_episodes: int | None = None) -> np.ndarray:
        """Layout rows that belong to completed episodes (optionally the first ``max_episodes`` to end)."""
        positions = np.flatnonzero(self.ended(layout))
        if max_episodes is not None and len(positions) > max_episodes:
            ticks = self.gather(TICK, layout.flat[positions])
            positions = positions[np.argsort(ticks, kind="stable")[:max_episodes]]
        last_end = np.full(self.num_envs, -1)
        np.maximum.at(last_end, layout.env[positions], layout.rank[positions])
        return layout.rank <= last_end[layout.env]

    def cut(self, layout: Layout, keep: np.ndarray, names: list[str]) -> SampleBatch:
        """The batch of columns ``names`` from layout rows ``keep`` (in layout order); the other
        rows stay for the next call (:meth:`keep_rest`)."""
        flat, env, step = layout.flat[keep], layout.env[keep], layout.step[keep]
        derived = (sb.AGENT_INDEX, sb.ACTION_MASK)
        columns = {name: self.gather(name, flat, env, step) for name in names if name not in derived}
        columns[sb.AGENT_INDEX] = np.zeros(len(flat), np.int32)
        if sb.ACTION_MASK in names:
            columns[sb.ACTION_MASK] = columns[f"{sb.OBS}/{MASK_KEY}"] != 0
        self.keep_rest(layout, ~keep)
        return SampleBatch({name: columns[name] for name in names})

    def valid_rows(self) -> np.ndarray:
        """Flat grid indices (step * num_envs + env) of the valid rows, in time order."""
        return np.flatnonzero(self.columns[VALID][: self.filled].reshape(-1)) if self.filled else np.zeros(0, np.intp)
